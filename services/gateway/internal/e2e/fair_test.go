package e2e

import (
	"fmt"
	"slices"
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

// TestPlainMemberCannotTakeMoreThanItsShare goes through REST with real
// processes: one fulfilment slot, 150 ms jobs, one item per order. Three
// members queue 6 orders each; a fourth member without the priority role
// then asks for PRIORITY_HIGH on 8 orders and, when refused, submits them
// at normal priority. Among the first 12 shipments the fourth member gets
// no more than its fair share (3, plus 2 for the order of arrival), and a
// refusal is 403 naming the field priority. A member whose token carries
// the priority role may submit PRIORITY_HIGH.
func TestPlainMemberCannotTakeMoreThanItsShare(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{
		Services: []string{stacktest.Gateway, stacktest.SplitWorker, stacktest.Fulfilment},
		ServiceEnv: map[string]map[string]string{
			stacktest.Fulfilment: {
				"ORDERFLOW_FULFILMENT_CAPACITY": "1",
				"ORDERFLOW_FULFILMENT_JOB_MIN":  "150ms",
				"ORDERFLOW_FULFILMENT_JOB_MAX":  "150ms",
			},
			stacktest.SplitWorker: {
				"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS":   "1",
				"ORDERFLOW_SPLITWORKER_POLL_INITIAL":       "20ms",
				"ORDERFLOW_SPLITWORKER_POLL_MAX":           "100ms",
				"ORDERFLOW_SPLITWORKER_MEMBER_CONCURRENCY": "4",
			},
		},
	})
	gw := s.URL(stacktest.Gateway)
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	type order struct{ tok, id string }
	var orders []order
	submit := func(tok, code, priority string) (int, map[string]any) {
		t.Helper()
		st, body := call(t, "POST", gw+"/v1/order-splits", tok, map[string]any{
			"orderCode": code, "priority": priority,
			"items": []map[string]any{{"itemCode": "I", "sku": "SKU-MUG", "quantity": 1}},
		})
		if st == 200 {
			orders = append(orders, order{tok, body["taskId"].(string)})
		}
		return st, body
	}
	for i := range 6 {
		for _, m := range []string{"normal-a", "normal-b", "normal-c"} {
			if st, body := submit(s.DevToken(t, m), fmt.Sprintf("%s-%s-%d", m, suffix, i), "PRIORITY_NORMAL"); st != 200 {
				t.Fatalf("POST /v1/order-splits for %s = %d %v", m, st, body)
			}
		}
	}
	greedy := s.DevToken(t, "greedy")
	refused := 0
	for i := range 8 {
		code := fmt.Sprintf("greedy-%s-%d", suffix, i)
		st, body := submit(greedy, code, "PRIORITY_HIGH")
		if st == 200 {
			continue
		}
		refused++
		if st != 403 || fieldOf(body) != "priority" {
			t.Fatalf("PRIORITY_HIGH without the role = %d %v, want 403 naming priority", st, body)
		}
		if st, body := submit(greedy, code, "PRIORITY_NORMAL"); st != 200 {
			t.Fatalf("POST /v1/order-splits %s at normal priority = %d %v", code, st, body)
		}
	}
	type done struct {
		greedy bool
		at     time.Time
	}
	var finished []done
	until(t, "every order to finish", 90*time.Second, func() bool {
		finished = finished[:0]
		for _, o := range orders {
			_, body := call(t, "GET", gw+"/v1/tasks/"+o.id, o.tok, nil)
			if body["status"] != "TASK_STATUS_SUCCEEDED" {
				return false
			}
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(body["updateTime"]))
			if err != nil {
				t.Fatalf("task %s updateTime %v: %v", o.id, body["updateTime"], err)
			}
			finished = append(finished, done{greedy: o.tok == greedy, at: at})
		}
		return true
	})
	slices.SortFunc(finished, func(a, b done) int { return a.at.Compare(b.at) })
	taken := 0
	for _, d := range finished[:12] {
		if d.greedy {
			taken++
		}
	}
	t.Logf("the member without the priority role shipped %d of the first 12 orders (%d of its 8 PRIORITY_HIGH submissions refused)", taken, refused)
	if taken > 5 {
		t.Errorf("the member without the priority role shipped %d of the first 12 orders, want at most 5", taken)
	}

	st, body := call(t, "POST", gw+"/v1/dev/login", "", map[string]any{"memberId": "entitled", "roles": []string{"priority"}})
	tok, _ := body["token"].(string)
	if st != 200 || tok == "" {
		t.Fatalf("dev login with the priority role = %d %v", st, body)
	}
	if st, body := submit(tok, "entitled-"+suffix, "PRIORITY_HIGH"); st != 200 || body["priority"] != "PRIORITY_HIGH" {
		t.Errorf("PRIORITY_HIGH with the priority role = %d %v, want 200 PRIORITY_HIGH", st, body)
	}
}

// fieldOf returns the field an error answer names in its ErrorInfo.
func fieldOf(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		m, _ := d.(map[string]any)
		if md, ok := m["metadata"].(map[string]any); ok {
			if f, ok := md["field"].(string); ok {
				return f
			}
		}
	}
	return ""
}
