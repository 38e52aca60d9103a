package app_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/promcheck"
	"github.com/orderflow/orderflow/services/reconciler/internal/app"
)

// TestMetricsFollowTheConventions runs the reconciler, lets a payment's
// checks fire and lints its /metrics: promlint clean, orderflow_build_info
// present, every family named orderflow_… (or a library's standard name),
// and the delay-queue and provider-call series there.
func TestMetricsFollowTheConventions(t *testing.T) {
	c := newCluster(t)
	cfg, err := config.LoadEnv[app.Config](c.env())
	if err != nil {
		t.Fatal(err)
	}
	addrs, client := startPlaintext(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+auth.DevGatewayReconcilerToken)
	if _, err := client.CreatePayment(ctx, &reconcilerv1.CreatePaymentRequest{MemberId: "m1", OrderCode: "LINT1", AmountFen: 100, Description: "metrics"}); err != nil {
		t.Fatalf("CreatePayment() = %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := client.GetPayment(ctx, &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "LINT1"})
		if err != nil {
			t.Fatalf("GetPayment() = %v", err)
		}
		if len(r.GetPayment().GetAttempts()) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment has %d attempts after 30s, want 2 checks", len(r.GetPayment().GetAttempts()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	fams := promcheck.Service(t, addrs.HTTP, cfg.Metrics.Token.Reveal())
	for _, m := range []struct {
		name   string
		labels map[string]string
	}{
		{"orderflow_reconciler_provider_calls_total", map[string]string{"action": "QUERY", "answer": "NOTPAY"}},
		{"orderflow_reconciler_provider_calls_total", map[string]string{"action": "CREATE", "answer": "OK"}},
		{"orderflow_delayq_fired_total", nil},
		{"orderflow_delayq_lateness_seconds", nil},
		{"grpc_server_handled_total", map[string]string{"grpc_method": "CreatePayment"}},
	} {
		if v, ok := promcheck.Value(fams, m.name, m.labels); !ok || v < 1 {
			t.Errorf("%s%v = %v (present %v), want at least 1", m.name, m.labels, v, ok)
		}
	}
}
