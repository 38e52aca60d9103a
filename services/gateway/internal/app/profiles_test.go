package app

import (
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
)

// TestProfilesNeedAdmin: the Go runtime's profiles on the gateway's admin
// port need an admin token; a member gets 403, a service's token 401.
func TestProfilesNeedAdmin(t *testing.T) {
	s := startGateway(t, nil)
	cfg := auth.Config{Secret: []byte(s.cfg.JWT.Secret.Reveal())}
	admin, _ := auth.Issue(cfg, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	apptest.ProfilesNeedAdmin(t, "http://"+s.addrs.Admin, s.cfg.ReconcilerToken.Reveal(), admin, s.token(t, "alice"))
}
