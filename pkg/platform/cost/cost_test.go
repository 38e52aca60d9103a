package cost_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// delta returns what step spent while f ran.
func delta(step string, f func()) map[string]int64 {
	before := cost.Read(step)
	f()
	after := cost.Read(step)
	for k, v := range before {
		after[k] -= v
	}
	return after
}

func TestRedisCountsOnlyUnderAStep(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	rdb.AddHook(cost.Hook{})
	step := prefix
	ctx := cost.WithStep(context.Background(), step)
	script := redis.NewScript("-- " + prefix + "\nreturn redis.call('SET', KEYS[1], ARGV[1])")

	got := delta(step, func() {
		if err := rdb.Set(ctx, prefix+":a", "12345", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// A pipeline is one round trip of three commands; a transaction's
		// MULTI and EXEC are not commands of their own.
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, prefix+":a")
			p.Incr(ctx, prefix+":n")
			p.Expire(ctx, prefix+":n", 0)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, prefix+":n")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// The script's first run is EVALSHA, refused NOSCRIPT, then EVAL
		// (the prefix makes it a script Redis has not seen).
		if err := script.Run(ctx, rdb, []string{prefix + ":s"}, "v").Err(); err != nil {
			t.Fatal(err)
		}
		// Work under a context without a step is not counted.
		if err := rdb.Set(context.Background(), prefix+":b", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if got[cost.RedisRoundTrips] != 5 || got[cost.RedisCommands] != 7 || got[cost.RedisScripts] != 2 {
		t.Errorf("counts = %v, want 5 round trips, 7 commands, 2 script calls", got)
	}
	if min := int64(len("set") + len(prefix+":a") + len("12345")); got[cost.RedisBytes] < min {
		t.Errorf("bytes sent = %d, want at least the SET's %d", got[cost.RedisBytes], min)
	}
}

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
	got := delta(step, func() {
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
