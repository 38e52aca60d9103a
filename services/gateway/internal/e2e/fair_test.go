package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// TestAnotherMemberIsNotStuckBehindABulkMember goes through REST with real
// processes: with one fulfilment slot, 100 ms jobs and one parcel per
// item, member A submits 20 orders of 5 items; member B then submits a
// 1-item order. B's order must end SUCCEEDED while at least half of A's
// orders are still PROCESSING: neither the split-worker's handlers nor the
// slot queue let A's backlog go first.
func TestAnotherMemberIsNotStuckBehindABulkMember(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{
		Services: []string{stacktest.Gateway, stacktest.SplitWorker, stacktest.Fulfilment},
		ServiceEnv: map[string]map[string]string{
			stacktest.Fulfilment: {
				"ORDERFLOW_FULFILMENT_CAPACITY": "1",
				"ORDERFLOW_FULFILMENT_JOB_MIN":  "100ms",
				"ORDERFLOW_FULFILMENT_JOB_MAX":  "100ms",
			},
			stacktest.SplitWorker: {
				"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS":   "1",
				"ORDERFLOW_SPLITWORKER_PARCEL_MAX_GRAMS":   "500", // one 400 g mug per parcel
				"ORDERFLOW_SPLITWORKER_POLL_INITIAL":       "20ms",
				"ORDERFLOW_SPLITWORKER_POLL_MAX":           "100ms",
				"ORDERFLOW_SPLITWORKER_MEMBER_CONCURRENCY": "4",
			},
		},
	})
	gw := s.URL(stacktest.Gateway)
	a, b := s.DevToken(t, "bulk-member"), s.DevToken(t, "small-member")
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	submit := func(tok, code string, items int) string {
		t.Helper()
		var lines []map[string]any
		for i := range items {
			lines = append(lines, map[string]any{"itemCode": fmt.Sprint("I", i), "sku": "SKU-MUG", "quantity": 1})
		}
		st, body := call(t, "POST", gw+"/v1/order-splits", tok, map[string]any{"orderCode": code, "items": lines})
		id, _ := body["taskId"].(string)
		if st != 200 || id == "" {
			t.Fatalf("POST /v1/order-splits %s = %d %v", code, st, body)
		}
		return id
	}
	status := func(tok, id string) string {
		_, body := call(t, "GET", gw+"/v1/tasks/"+id, tok, nil)
		st, _ := body["status"].(string)
		return st
	}
	var bulk []string
	for i := range 20 {
		bulk = append(bulk, submit(a, fmt.Sprintf("BULK-%s-%d", suffix, i), 5))
	}
	start := time.Now()
	small := submit(b, "SMALL-"+suffix, 1)
	until(t, "the small order to finish", 60*time.Second, func() bool { return status(b, small) != "TASK_STATUS_PROCESSING" })
	took := time.Since(start)
	if st := status(b, small); st != "TASK_STATUS_SUCCEEDED" {
		t.Fatalf("small order = %s, want SUCCEEDED", st)
	}
	processing := 0
	for _, id := range bulk {
		if status(a, id) == "TASK_STATUS_PROCESSING" {
			processing++
		}
	}
	t.Logf("small order SUCCEEDED %v after submission; %d of %d bulk orders still processing", took.Round(time.Millisecond), processing, len(bulk))
	if processing < len(bulk)/2 {
		t.Errorf("%d of %d bulk orders still processing when the small order finished; want at least half", processing, len(bulk))
	}
}
