package chaos_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// Rows of operators' actions racing the system: a dead-letter replay
// after the shopper submitted the order again, and a pause (N = 0) across
// split-worker restarts.

// adminCall sends an operations request as an admin (a development
// sign-in with the admin role) and decodes the answer into out.
func adminCall(r *run, method, path string, in, out any) error {
	token := r.s.AdminToken(r.t, "chaos-operator")
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.s.URL(stacktest.Gateway)+path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: clientTimeout}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// replayAfterResubmit stops the fulfilment system long enough for the
// jobs submitted meanwhile to run out of deliveries (limit 2) and be
// dead-lettered, brings it back, submits half of those orders again as
// their shoppers would, and then replays every dead letter. The replays
// of the orders submitted again are refused (or their new task fails
// 10010 when the replay took the code first); the others run to success.
// No order may succeed in two tasks.
func replayAfterResubmit() scenario {
	return scenario{
		name: "dead-letter replay after the order was submitted again",
		setup: func(_ *suite, o *stacktest.Options) {
			for k, v := range map[string]string{
				"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT":     "2",
				"ORDERFLOW_SPLITWORKER_REQUEUE_BACKOFF":    "50ms",
				"ORDERFLOW_SPLITWORKER_FULFILMENT_TIMEOUT": "500ms",
				"ORDERFLOW_SPLITWORKER_OUTAGE_HOLD":        "200ms",
				"ORDERFLOW_SPLITWORKER_LEASE":              "3s",
				"ORDERFLOW_SPLITWORKER_LEASE_WAIT":         "2s",
			} {
				o.ServiceEnv[stacktest.SplitWorker][k] = v
			}
			// The queue's delivery limit is declared by both.
			o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT"] = "2"
		},
		fault: func(r *run) {
			r.s.Stop(stacktest.Fulfilment)
			time.Sleep(span(10*time.Second, 5*time.Second))
			r.s.Start(stacktest.Fulfilment)
			var page struct {
				Total       string `json:"total"`
				DeadLetters []struct {
					MemberID string `json:"memberId"`
					TaskID   string `json:"taskId"`
				} `json:"deadLetters"`
			}
			// The dead letters are recorded as the held deliveries run out.
			last, stable := -1, 0
			for deadline := time.Now().Add(30 * time.Second); stable < 3 && time.Now().Before(deadline); {
				if err := adminCall(r, http.MethodGet, "/v1/ops/dead-letters?pageSize=100", nil, &page); err != nil {
					r.t.Fatalf("list dead letters: %v", err)
				}
				if len(page.DeadLetters) == last && last > 0 {
					stable++
				} else {
					stable = 0
				}
				last = len(page.DeadLetters)
				time.Sleep(500 * time.Millisecond)
			}
			r.l.mu.Lock()
			byTask := map[string]*submission{}
			for _, s := range r.l.subs {
				if s.taskID != "" {
					byTask[s.taskID] = s
				}
			}
			r.l.mu.Unlock()
			again := 0
			for i, d := range page.DeadLetters {
				if s := byTask[d.TaskID]; s != nil && i%2 == 0 {
					r.l.again(s)
					again++
				}
			}
			// The new tasks run first, claiming their codes.
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
				tasks, err := r.l.tasks()
				if err != nil {
					r.t.Fatalf("list tasks: %v", err)
				}
				running := 0
				for rid, t := range tasks {
					if strings.HasSuffix(rid, "-again") && !t.terminal() {
						running++
					}
				}
				if running == 0 {
					break
				}
			}
			var replay struct {
				Replayed int `json:"replayed"`
				Skipped  int `json:"skipped"`
				Refused  []struct {
					Reason string `json:"reason"`
				} `json:"refused"`
			}
			if err := adminCall(r, http.MethodPost, "/v1/ops/dead-letters:replay", map[string]any{}, &replay); err != nil {
				r.t.Fatalf("replay all: %v", err)
			}
			reasons := map[string]int{}
			for _, x := range replay.Refused {
				reasons[x.Reason]++
			}
			r.note("%s dead letters, %d of their orders submitted again; replay all: %d replayed, %d skipped %v",
				page.Total, again, replay.Replayed, replay.Skipped, reasons)
			if again == 0 {
				r.t.Errorf("no dead-lettered order was submitted again: the row needs some")
			}
		},
		check: func(r *run, _ *result) {
			tasks, err := r.l.tasks()
			if err != nil {
				r.t.Fatalf("list tasks: %v", err)
			}
			succeeded := map[string]int{}
			for _, t := range tasks {
				if t.Status == "TASK_STATUS_SUCCEEDED" {
					succeeded[t.OrderCode]++
				}
			}
			twice := 0
			for code, k := range succeeded {
				if k > 1 {
					twice++
					r.note("order %s succeeded in %d tasks", code, k)
				}
			}
			r.note("orders that succeeded in two tasks: %d", twice)
			if twice > 0 {
				r.t.Errorf("orders that succeeded in two tasks = %d, want 0: a replay shipped an order again", twice)
			}
		},
	}
}

// pauseAcrossRestarts sets N = 0 through the operations API (an
// incident's pause), restarts the split-worker twice (kill -9, as an
// autoscaler's or a crash's new pod starts with its configured N), and
// checks that no fulfilment job starts while the pause lasts; then the
// operator resets the pool to configuration and the load finishes.
func pauseAcrossRestarts() scenario {
	return scenario{
		name: "operator's pause (N = 0) across split-worker restarts",
		setup: func(_ *suite, o *stacktest.Options) {
			// The gateway knows the configured N for the reset.
			o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS"] = "4"
			o.ServiceEnv[stacktest.SplitWorker]["ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS"] = "4"
		},
		fault: func(r *run) {
			if err := adminCall(r, http.MethodPut, "/v1/ops/slot-pool/capacity", map[string]any{"capacity": 0}, nil); err != nil {
				r.t.Fatalf("pause: %v", err)
			}
			// Jobs granted before the pause may still be requested and
			// end; then nothing more starts.
			time.Sleep(3 * time.Second)
			before := simStats(r)
			for range 2 {
				r.s.Kill(stacktest.SplitWorker)
				r.s.Start(stacktest.SplitWorker)
				time.Sleep(span(10*time.Second, 3*time.Second))
			}
			after := simStats(r)
			var pool struct {
				Stats struct {
					Capacity int `json:"capacity"`
					Origin   struct {
						Source string `json:"source"`
					} `json:"capacityOrigin"`
				} `json:"stats"`
			}
			if err := adminCall(r, http.MethodGet, "/v1/ops/slot-pool", nil, &pool); err != nil {
				r.t.Errorf("read the slot pool: %v", err)
			}
			r.note("paused; 2 split-worker restarts; fulfilment jobs created during the pause: %d; N after the restarts: %d (%s)",
				after.Created-before.Created, pool.Stats.Capacity, pool.Stats.Origin.Source)
			if after.Created != before.Created || pool.Stats.Capacity != 0 {
				r.t.Errorf("after 2 restarts: %d jobs created during the pause, N = %d; want 0 and 0: a start undid the operator's pause",
					after.Created-before.Created, pool.Stats.Capacity)
			}
			if err := adminCall(r, http.MethodPost, "/v1/ops/slot-pool:resetToConfiguration", map[string]any{}, nil); err != nil {
				r.t.Fatalf("reset to configuration: %v", err)
			}
		},
	}
}

// simStats reads the fulfilment simulator's counters.
func simStats(r *run) fulfilment.Stats {
	var st fulfilment.Stats
	if err := r.l.get(r.s.URL(stacktest.Fulfilment), "/stats", "", &st); err != nil {
		r.t.Fatalf("fulfilment stats: %v", err)
	}
	return st
}
