package app

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestAmbiguousPublishKeepsTheTask submits while the broker's answers are
// slowed down, so the job reaches the queue but its confirm arrives late,
// and checks the invariant: every job in the queue has its task. A task
// is only rolled back when the broker certainly did not queue its job.
func TestAmbiguousPublishKeepsTheTask(t *testing.T) {
	tests := []struct {
		name           string
		publishTimeout time.Duration
		clientTimeout  time.Duration
		cut            bool // drop the connection while the confirm is pending
		want200        bool
	}{
		{name: "client gives up before the confirm", publishTimeout: 5 * time.Second, clientTimeout: 200 * time.Millisecond},
		{name: "confirm slower than the publish timeout", publishTimeout: 300 * time.Millisecond, want200: true},
		{name: "connection drops before the confirm", publishTimeout: 5 * time.Second, cut: true, want200: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toxic, err := netfault.NewToxic(strings.TrimSuffix(strings.TrimPrefix(testenv.AMQPURL(), "amqp://guest:guest@"), "/"))
			if err != nil {
				t.Fatal(err)
			}
			defer toxic.Close()
			s := startGateway(t, func(c *Config) {
				c.AMQP.URL = config.Secret("amqp://guest:guest@" + toxic.Addr() + "/")
				c.AMQP.PublishTimeout = tt.publishTimeout
			})
			// The topology is declared and a publishing channel is open
			// before the broker slows down.
			if code, body := s.do(t, "POST", "/v1/order-splits", s.token(t, "warm"), goodOrder); code != 200 {
				t.Fatalf("POST before the fault = %d %v", code, body)
			}
			s.queuedTaskIDs(t, 1, 5*time.Second)
			if err := toxic.Latency(time.Second); err != nil {
				t.Fatal(err)
			}
			if tt.cut {
				go func() {
					// The job reaches the broker after 500 ms, the confirm
					// would be back after 1 s.
					time.Sleep(750 * time.Millisecond)
					toxic.Cut()
				}()
			}
			req, _ := http.NewRequest("POST", "http://"+s.addrs.HTTP+"/v1/order-splits", strings.NewReader(goodOrder))
			req.Header.Set("Authorization", "Bearer "+s.token(t, "alice"))
			client := &http.Client{Timeout: tt.clientTimeout}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if tt.want200 && (err != nil || resp.StatusCode != http.StatusOK) {
				t.Errorf("POST with a late confirm = %v %v, want 200 with the PROCESSING task", statusOf(resp), err)
			}
			toxic.Heal()
			if tt.cut {
				if err := toxic.Restore(); err != nil {
					t.Fatal(err)
				}
			}
			// The job reached the queue: its task must exist.
			ids := s.queuedTaskIDs(t, 1, 5*time.Second)
			if len(ids) == 0 {
				t.Fatal("no job reached the queue; the fault was not the one under test")
			}
			for _, id := range ids {
				if _, err := s.store.Get(context.Background(), "alice", id); err != nil {
					t.Errorf("task %s of a queued job: Get() = %v, want the task (a worker may own it)", id, err)
				}
			}
		})
	}
}

func statusOf(resp *http.Response) any {
	if resp == nil {
		return nil
	}
	return resp.StatusCode
}

// queuedTaskIDs takes the jobs from the split queue, waiting up to wait
// for at least min of them, and returns their task ids.
func (s *stack) queuedTaskIDs(t *testing.T, min int, wait time.Duration) []string {
	t.Helper()
	ch, err := s.amqp.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var ids []string
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(s.names.Queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if len(ids) >= min {
				return ids
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		_, job, err := jobqueue.Decode(context.Background(), d)
		if err != nil {
			t.Fatalf("Decode(job) = %v", err)
		}
		ids = append(ids, job.GetTaskId())
	}
	return ids
}

// TestRepairRepublishesADroppedJobThenFails drops the job of a task (as a
// broker policy or a lost queue would): after the repair grace the job is
// published again from the task, each time it is dropped again, until the
// repair gives up and fails the task with 10009 instead of leaving it
// PROCESSING until its TTL. A task whose lease is live is never
// republished.
func TestRepairRepublishesADroppedJobThenFails(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.RepairGrace = time.Second })
	ctx := context.Background()
	tok := s.token(t, "alice")
	submit := func(order string) string {
		code, body := s.do(t, "POST", "/v1/order-splits", tok, strings.Replace(goodOrder, "ORD-1", order, 1))
		if code != http.StatusOK {
			t.Fatalf("POST = %d %v", code, body)
		}
		return body["taskId"].(string)
	}
	dropped, leased := submit("ORD-DROP"), submit("ORD-LEASED")
	rdb := redisconn.New(s.cfg.Redis)
	defer rdb.Close()
	if err := rdb.Set(ctx, s.store.LeaseKey("alice", leased), "worker-token", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range s.queuedTaskIDs(t, 0, 200*time.Millisecond) {
			seen[id]++ // taken from the queue: the job is dropped
		}
		task, err := s.store.Get(ctx, "alice", dropped)
		if err != nil {
			t.Fatal(err)
		}
		if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_FAILED || task.GetErrorCode() != int32(errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT) {
				t.Errorf("task whose job kept being dropped = %v %d, want FAILED 10009", task.GetStatus(), task.GetErrorCode())
			}
			break
		}
	}
	if want := 1 + taskstore.MaxRepairs; seen[dropped] != want {
		t.Errorf("jobs of the dropped task seen = %d, want %d (the submit and %d republishes)", seen[dropped], want, taskstore.MaxRepairs)
	}
	if seen[leased] != 1 {
		t.Errorf("jobs of the leased task seen = %d, want 1 (a task with a live lease is not republished)", seen[leased])
	}
	if st, err := s.store.Status(ctx, "alice", leased); err != nil || st != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		t.Errorf("leased task = %v, %v; want PROCESSING", st, err)
	}
}

// TestRepairGivesAQueuedJobTimeToReachAWorker leaves a task's job in the
// queue with no worker to take it (as a stopped replica's prefetch or a
// backlog would hold it): the repair republishes it, but the task is not
// failed with 10009 while the copies may still be on their way, since each
// look comes twice as late as the one before, or up to half as much again
// (grace 1 s, swept every 0.5 s: republished at 1, 2–2.5 and 4–5.5 s and
// by 6 s, failed at 8–11.5 s; it was failed at 4 s).
func TestRepairGivesAQueuedJobTimeToReachAWorker(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.RepairGrace = time.Second })
	ctx := context.Background()
	code, body := s.do(t, "POST", "/v1/order-splits", s.token(t, "alice"), strings.Replace(goodOrder, "ORD-1", "ORD-WAIT", 1))
	if code != http.StatusOK {
		t.Fatalf("POST = %d %v", code, body)
	}
	id := body["taskId"].(string)
	// The republishes come after waits of 1, 2 and 4 graces, each drawn
	// up to 1.5 times longer: the third between 7 and 10.5 s. The task is
	// failed no sooner than 4 graces after it.
	time.Sleep(7 * time.Second)
	if got := len(s.queuedTaskIDs(t, 4, 5*time.Second)); got != 4 {
		t.Errorf("jobs queued = %d, want 4 (the submit and 3 republishes)", got)
	}
	task, err := s.store.Get(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		t.Errorf("task whose job waited 7 graces in the queue = %v %d, want PROCESSING", task.GetStatus(), task.GetErrorCode())
	}
}
