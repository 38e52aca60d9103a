package app

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
)

// TestOpsRates submits orders while one of two slots is held and reads
// GET /v1/ops/rates: the gateway's sampler counts the submissions and
// observes the pool half used in the current minute; the hour is 60
// points, oldest first; a bad minutes is refused naming the field.
func TestOpsRates(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.OpsSampleInterval = time.Second })
	ctx := context.Background()
	admin := s.adminToken(t, "root")
	rdb := redisconn.New(s.cfg.Redis)
	defer rdb.Close()
	pool := slotpool.New(rdb, slotpool.Options{Name: s.prefix + ":fulfilment", Capacity: 2, Lease: time.Minute, Replica: "splitworker-1"})
	if err := pool.SetCapacity(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.AcquireClass(ctx, "task-1/1", slotpool.Class{Group: "m-1"}); err != nil {
		t.Fatal(err)
	}
	tok := s.token(t, "alice")
	for i := range 3 {
		if code, body := s.do(t, "POST", "/v1/order-splits", tok, fmt.Sprintf(`{"orderCode":"ORD-R%d","items":[{"itemCode":"i1","sku":"SKU-1","quantity":1}]}`, i)); code != http.StatusOK {
			t.Fatalf("POST /v1/order-splits = %d %v, want 200", code, body)
		}
	}
	var body map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		var code int
		code, body = s.do(t, "GET", "/v1/ops/rates", admin, "")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/ops/rates = %d %v, want 200", code, body)
		}
		points, _ := body["points"].([]any)
		if len(points) != 60 {
			t.Fatalf("rates have %d points, want 60 (the last hour)", len(points))
		}
		var submitted float64
		var util any
		// The last two minutes, in case a minute turned.
		for _, p := range points[58:] {
			m := p.(map[string]any)
			n, _ := m["submitted"].(string) // int64 is a JSON string
			var v float64
			fmt.Sscan(n, &v)
			submitted += v
			if u, ok := m["slotUtilisation"]; ok {
				util = u
			}
		}
		if submitted == 3 && util == 0.5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rates end with %v, want 3 submitted and slot utilisation 0.5", points[58:])
		}
		time.Sleep(200 * time.Millisecond)
	}
	first := body["points"].([]any)[0].(map[string]any)
	if _, ok := first["slotUtilisation"]; ok {
		t.Errorf("the oldest minute = %v, want no utilisation sampled an hour ago", first)
	}
	for _, bad := range []string{"61", "-1"} {
		if code, body := s.do(t, "GET", "/v1/ops/rates?minutes="+bad, admin, ""); code != http.StatusBadRequest || field(body) != "minutes" {
			t.Errorf("GET /v1/ops/rates?minutes=%s = %d %v, want 400 naming minutes", bad, code, body)
		}
	}
	if code, body := s.do(t, "GET", "/v1/ops/rates?minutes=5", admin, ""); code != http.StatusOK || len(body["points"].([]any)) != 5 {
		t.Errorf("GET /v1/ops/rates?minutes=5 = %d %v, want 5 points", code, body)
	}
}
