package cost_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestTransportCountsCallsByPeer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	hc := &http.Client{Transport: cost.Transport(http.DefaultTransport, "sim")}
	step := testenv.Prefix(t)
	call := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := cost.During(step, func() {
		call(cost.WithStep(context.Background(), step))
		call(cost.WithStep(context.Background(), step))
		call(context.Background())
	})
	if got[cost.HTTPCalls+":sim"] != 2 {
		t.Errorf("HTTP calls = %v, want 2 to sim", got)
	}
}

func TestCollectorExportsByStep(t *testing.T) {
	step := testenv.Prefix(t) // unique: the counts are process-wide
	cost.Add(cost.WithStep(context.Background(), step), cost.AMQPPublishes, 3)
	cost.Add(context.Background(), cost.AMQPPublishes, 5) // no step: not counted
	reg := prometheus.NewRegistry()
	reg.MustRegister(cost.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := -1.0
	for _, mf := range mfs {
		if mf.GetName() != "orderflow_step_amqp_publishes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == step {
				got = m.GetCounter().GetValue()
			}
		}
	}
	if got != 3 {
		t.Errorf("orderflow_step_amqp_publishes_total{step=%q} = %v, want 3", step, got)
	}
}
