package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// commandLog records the commands a Redis client sends (a pipeline's each).
type commandLog struct {
	mu   sync.Mutex
	cmds []string
	on   atomic.Bool
}

func (h *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.add(c)
		}
		return next(ctx, cmds)
	}
}
func (h *commandLog) add(c redis.Cmder) {
	if h.on.Load() {
		h.mu.Lock()
		h.cmds = append(h.cmds, fmt.Sprint(c.Args()...))
		h.mu.Unlock()
	}
}

// TestJobOfATaskGoneOrFinishedIsOneRoundTrip hands the worker jobs of a
// task that never existed, one that expired and one already finished:
// each is acknowledged after one Redis command (the script that reads the
// status), with no lease taken and so none to release, and the finished
// task is left as it was.
func TestJobOfATaskGoneOrFinishedIsOneRoundTrip(t *testing.T) {
	e := newEnv(t, fastSim())
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	log := &commandLog{}
	rdb.AddHook(log)
	store := taskstore.New(rdb, taskstore.Options{Prefix: e.prefix, TTL: time.Hour})
	pool := slotpool.New(rdb, slotpool.Options{Name: e.poolName(), Capacity: e.slots, Lease: 2 * time.Second})
	w := worker.New(store, e.fc, worker.PoolSlots{Pool: pool}, e.log, nil, worker.Options{Lease: 2 * time.Second, LeaseWait: time.Second})

	id, err := taskstore.NewID()
	if err != nil {
		t.Fatal(err)
	}
	never := &jobv1.SplitJob{TaskId: id, MemberId: "demo", OrderCode: "ORDER-N", Items: []*taskv1.OrderItem{item("M", "SKU-MUG", 1)}}
	expired := e.create("demo", "ORDER-X", item("M", "SKU-MUG", 1))
	if err := e.rdb.Del(ctx, e.store.TaskKey("demo", expired.GetTaskId())).Err(); err != nil {
		t.Fatal(err)
	}
	finished := e.create("demo", "ORDER-F", item("M", "SKU-MUG", 1))
	if _, err := e.store.Cancel(ctx, "demo", finished.GetTaskId(), 10007, "cancelled"); err != nil {
		t.Fatal(err)
	}
	before, err := e.store.Get(ctx, "demo", finished.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(job *jobv1.SplitJob) amqpbus.Outcome {
		msg, err := jobqueue.Encode(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		return w.Handle(ctx, amqp.Delivery{Body: msg.Body, Headers: msg.Headers, Type: msg.Type, MessageId: msg.MessageId})
	}
	// Once, so that Redis has the script.
	_ = deliver(never)
	log.on.Store(true)
	for _, tc := range []struct {
		name string
		job  *jobv1.SplitJob
	}{{"never created", never}, {"expired", expired}, {"finished", finished}} {
		log.mu.Lock()
		log.cmds = nil
		log.mu.Unlock()
		if o := deliver(tc.job); o != amqpbus.Ack {
			t.Errorf("job of the %s task: outcome %v, want Ack", tc.name, o)
		}
		log.mu.Lock()
		cmds := append([]string(nil), log.cmds...)
		log.mu.Unlock()
		if len(cmds) != 1 {
			t.Errorf("job of the %s task sent %d Redis commands, want 1: %q", tc.name, len(cmds), cmds)
		}
		if n := e.rdb.Exists(ctx, e.store.LeaseKey("demo", tc.job.GetTaskId())).Val(); n != 0 {
			t.Errorf("lease of the %s task left behind", tc.name)
		}
	}
	after, err := e.store.Get(ctx, "demo", finished.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	if after.GetStatus() != before.GetStatus() || after.GetErrorCode() != before.GetErrorCode() {
		t.Errorf("finished task changed: %v → %v", before, after)
	}
}
