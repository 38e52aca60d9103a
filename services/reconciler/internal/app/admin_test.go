package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/app"
)

// TestProfilesNeedAdmin: the Go runtime's profiles on the reconciler's
// admin port need an admin token.
func TestProfilesNeedAdmin(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	admin, member := apptest.DevTokens(t)
	apptest.ProfilesNeedAdmin(t, startAdmin(t, cfg), cfg.GatewayToken.Reveal(), admin, member)
}

// startAdmin runs the reconciler with cfg on a fresh Redis prefix until
// the test ends and returns its admin base URL.
func startAdmin(t *testing.T, cfg app.Config) string {
	t.Helper()
	_, prefix := testenv.Redis(t)
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RedisPrefix = "127.0.0.1:0", "127.0.0.1:0", prefix
	cfg.Redis.Addr = testenv.RedisAddr()
	return "http://" + apptest.Start(t, app.Run, cfg).HTTP
}

// TestMetricsNeedCredentials: the reconciler's admin port serves /metrics
// to the scrape token or an admin token only.
func TestMetricsNeedCredentials(t *testing.T) {
	const scrape = "scrape-token-for-this-test-0123456789"
	cfg, err := config.LoadEnv[app.Config](map[string]string{
		config.EnvVar: string(config.Development), "ORDERFLOW_METRICS_TOKEN": scrape,
	})
	if err != nil {
		t.Fatal(err)
	}
	admin, member := apptest.DevTokens(t)
	apptest.MetricsNeedCredentials(t, startAdmin(t, cfg)+"/metrics", scrape, cfg.GatewayToken.Reveal(), admin, member)
}
