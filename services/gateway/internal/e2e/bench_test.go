package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// stockCatalogue gives the stack's fulfilment simulator 5 SKUs in 2
// warehouses with plenty of stock, so every order of the same items ships
// the same way, and returns them.
func stockCatalogue(t testing.TB, s *stacktest.Stack) []map[string]any {
	t.Helper()
	skus := []map[string]any{
		{"sku": "SKU-A", "warehouse": "WH-1", "stock": 1 << 30, "weightGrams": 900},
		{"sku": "SKU-B", "warehouse": "WH-1", "stock": 1 << 30, "weightGrams": 1500},
		{"sku": "SKU-C", "warehouse": "WH-2", "stock": 1 << 30, "weightGrams": 400},
		{"sku": "SKU-D", "warehouse": "WH-2", "stock": 1 << 30, "weightGrams": 2500},
		{"sku": "SKU-E", "warehouse": "WH-2", "stock": 1 << 30, "weightGrams": 700},
	}
	if st, body := call(t, "PUT", s.URL(stacktest.Fulfilment)+"/admin/catalogue", "", map[string]any{"skus": skus}); st/100 != 2 {
		t.Fatalf("set catalogue = %d %v", st, body)
	}
	return skus
}

// BenchmarkSubmitToTerminal measures, over real processes, the time from
// submitting a 20-item order over REST to seeing its terminal status, with
// the fulfilment simulator's jobs taking 10–30 ms and N = 8 slots, in
// benchrec.Rounds (5) rounds of 60 orders, 4 at a time: each figure is the
// median of the rounds'.
func BenchmarkSubmitToTerminal(b *testing.B) {
	s := stacktest.Start(b, stacktest.Options{ServiceEnv: map[string]map[string]string{
		stacktest.Fulfilment:  {"ORDERFLOW_FULFILMENT_CAPACITY": "8", "ORDERFLOW_FULFILMENT_JOB_MIN": "10ms", "ORDERFLOW_FULFILMENT_JOB_MAX": "30ms"},
		stacktest.SplitWorker: {"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": "8", "ORDERFLOW_LOG_LEVEL": "warn", "ORDERFLOW_SPLITWORKER_POLL_INITIAL": "5ms", "ORDERFLOW_SPLITWORKER_POLL_MAX": "50ms"},
		stacktest.Gateway:     {"ORDERFLOW_LOG_LEVEL": "warn", "ORDERFLOW_GATEWAY_RATE_LIMIT": "0"},
	}})
	gw := s.URL(stacktest.Gateway)
	skus := stockCatalogue(b, s)
	tok := s.DevToken(b, "bench")
	var items []map[string]any
	for i := range 20 {
		items = append(items, map[string]any{"itemCode": fmt.Sprintf("I%02d", i), "sku": skus[i%5]["sku"], "quantity": 1})
	}
	const orders, conc = 60, 4
	// round submits orders, conc at a time, and returns each one's time to
	// its terminal status, the shipments they made and the round's wall time.
	round := func() (lat []time.Duration, shipments int, wall time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := make(chan int)
		for range conc {
			wg.Go(func() {
				for i := range next {
					start := time.Now()
					st, task := call(b, "POST", gw+"/v1/order-splits", tok, map[string]any{"orderCode": fmt.Sprintf("B-%d-%d", start.UnixNano(), i), "items": items})
					if st != 200 {
						b.Errorf("submit = %d %v", st, task)
						return
					}
					id := task["taskId"].(string)
					for task["status"] == "TASK_STATUS_PROCESSING" {
						time.Sleep(5 * time.Millisecond)
						_, task = call(b, "GET", gw+"/v1/tasks/"+id, tok, nil)
					}
					d := time.Since(start)
					res, _ := task["result"].(map[string]any)
					mu.Lock()
					lat = append(lat, d)
					if sh, ok := res["shipments"].([]any); ok {
						shipments += len(sh)
					}
					mu.Unlock()
				}
			})
		}
		t0 := time.Now()
		for i := range orders {
			next <- i
		}
		close(next)
		wg.Wait()
		slices.Sort(lat)
		return lat, shipments, time.Since(t0)
	}
	rounds := benchrec.Rounds(5)
	var all []time.Duration
	var p50, p99, rates []float64
	var shipments int
	for range rounds {
		lat, sh, wall := round()
		if len(lat) == 0 {
			b.Fatal("no order finished")
		}
		all, shipments = append(all, lat...), shipments+sh
		p50, p99 = append(p50, benchrec.In(lat[len(lat)/2], "ms")), append(p99, benchrec.In(lat[len(lat)*99/100], "ms"))
		rates = append(rates, float64(len(lat))/wall.Seconds())
	}
	slices.Sort(all)
	cond := fmt.Sprintf("%d orders a round, %d at a time; jobs 10–30 ms, N = 8; %d rounds", orders, conc, rounds)
	benchrec.Record(b, benchrec.Figure{Group: "submit → terminal", Name: "20-item order over REST, real processes, p99",
		Params: cond, Value: benchrec.Median(p99), Unit: "ms", Better: benchrec.Lower, Samples: p99, Dist: benchrec.Dist(all, "ms"),
		Note: fmt.Sprintf("median of %d rounds' p99s; p50 %.0f ms, max %v, %.1f shipments per order, polling every 5 ms", rounds, benchrec.Median(p50),
			all[len(all)-1].Round(time.Millisecond), float64(shipments)/float64(len(all)))})
	benchrec.Record(b, benchrec.Figure{Group: "submit → terminal", Name: "20-item orders finished per second",
		Params: cond, Value: benchrec.Median(rates), Unit: "orders/s", Samples: rates, Note: fmt.Sprintf("median of %d rounds", rounds)})
}
