package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/promcheck"
	"github.com/orderflow/orderflow/services/paysim/internal/app"
)

// TestRunServesHealthUntilCancelled also lints the service's /metrics.
func TestRunServesHealthUntilCancelled(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	cfg.Addr = "127.0.0.1:0"
	addrs := apptest.Start(t, app.Run, cfg)
	if addrs.GRPC != "" {
		t.Errorf("ready(%+v): a service without gRPC reports a gRPC address", addrs)
	}
	apptest.Healthy(t, addrs.HTTP)
	promcheck.Service(t, addrs.HTTP, "")
}
