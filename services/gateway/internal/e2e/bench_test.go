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
// the fulfilment simulator's jobs taking 10–30 ms and N = 8 slots.
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
	var mu sync.Mutex
	var lat []time.Duration
	var shipments int
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
	wall := time.Since(t0)
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no order finished")
	}
	cond := fmt.Sprintf("%d orders, %d at a time; jobs 10–30 ms, N = 8", len(lat), conc)
	benchrec.Record(b, benchrec.Figure{Group: "submit → terminal", Name: "20-item order over REST, real processes, p99",
		Params: cond, Value: benchrec.In(lat[len(lat)*99/100], "ms"), Unit: "ms", Better: benchrec.Lower, Dist: benchrec.Dist(lat, "ms"),
		Note: fmt.Sprintf("p50 %v, max %v, %.1f shipments per order, polling every 5 ms", lat[len(lat)/2].Round(time.Millisecond),
			lat[len(lat)-1].Round(time.Millisecond), float64(shipments)/float64(len(lat)))})
	benchrec.Record(b, benchrec.Figure{Group: "submit → terminal", Name: "20-item orders finished per second",
		Params: cond, Value: float64(len(lat)) / wall.Seconds(), Unit: "orders/s"})
}
