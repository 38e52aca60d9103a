package app_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/promcheck"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/splitworker/internal/app"
)

// TestRunServesHealthUntilCancelled also lints the service's /metrics.
func TestRunServesHealthUntilCancelled(t *testing.T) {
	cfg := apptest.Defaults[app.Config](t)
	_, prefix := testenv.Redis(t)
	cfg.HTTPAddr, cfg.RedisPrefix, cfg.AMQPPrefix = "127.0.0.1:0", prefix, prefix
	cfg.Redis.Addr, cfg.AMQP.URL = testenv.RedisAddr(), config.Secret(testenv.AMQPURL())
	testenv.SplitJobQueues(t, prefix)
	addrs := apptest.Start(t, app.Run, cfg)
	if addrs.GRPC != "" {
		t.Errorf("ready(%+v): a service without gRPC reports a gRPC address", addrs)
	}
	apptest.Healthy(t, addrs.HTTP)
	fams := promcheck.Service(t, addrs.HTTP, cfg.Metrics.Token.Reveal())
	if v, ok := promcheck.Value(fams, "orderflow_splitworker_settle_frames_total", nil); !ok || v != 0 {
		t.Errorf("orderflow_splitworker_settle_frames_total = %v (present %v), want 0 before any delivery", v, ok)
	}
}
