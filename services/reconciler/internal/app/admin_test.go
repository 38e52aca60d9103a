package app_test

import (
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/app"
)

// TestProfilesNeedAdmin: the Go runtime's profiles on the reconciler's
// admin port need an admin token.
func TestProfilesNeedAdmin(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	_, prefix := testenv.Redis(t)
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RedisPrefix = "127.0.0.1:0", "127.0.0.1:0", prefix
	cfg.Redis.Addr = testenv.RedisAddr()
	addrs := apptest.Start(t, app.Run, cfg)
	jwtCfg := auth.Config{Secret: []byte(auth.DevJWTSecret)} // development fills it in
	admin, _ := auth.Issue(jwtCfg, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	member, _ := auth.Issue(jwtCfg, "alice", time.Now(), time.Hour)
	apptest.ProfilesNeedAdmin(t, "http://"+addrs.HTTP, cfg.InternalToken.Reveal(), admin, member)
}
