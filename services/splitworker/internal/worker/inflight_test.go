package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/inflight"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// TestUnacknowledgedCountIsClusterWide: two replicas each hold three
// deliveries (their tasks' leases are held elsewhere, so they wait with
// them unacknowledged); the overview's sum of their reports is 6. One
// replica is killed (its Redis and RabbitMQ connections drop, its report
// is never removed): its count leaves the sum within the report's TTL,
// and its deliveries are back in the queue as ready messages while the
// other replica's 3 stay counted.
func TestUnacknowledgedCountIsClusterWide(t *testing.T) {
	e := newEnv(t, fastSim())
	ctx := context.Background()
	e.consume = worker.ConsumeOptions{Prefetch: 3, Concurrency: 3}
	const interval = 200 * time.Millisecond
	ttl := 3 * interval
	board := inflight.New(e.rdb, e.prefix)
	start := func(replica string) (*redis.Client, func()) {
		rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr})
		t.Cleanup(func() { _ = rdb.Close() })
		_, stop := e.start(worker.Options{LeaseWait: time.Minute, InFlight: inflight.New(rdb, e.prefix),
			Replica: replica, InFlightInterval: interval})
		return rdb, stop
	}
	rdbA, stopA := start("replica-a")
	start("replica-b")
	for i := range 6 {
		job := e.create("demo", "ORDER-"+string(rune('1'+i)), item("M", "SKU-MUG", 1))
		// A replica that holds the lease for a minute.
		if err := e.rdb.Set(ctx, e.store.LeaseKey("demo", job.GetTaskId()), "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		e.publish(job)
	}
	sum := func() inflight.Totals {
		tot, err := board.Sum(ctx)
		if err != nil {
			t.Fatalf("Sum() = %v", err)
		}
		return tot
	}
	waitFor(t, "6 unacknowledged deliveries reported by 2 replicas", func() bool {
		tot := sum()
		return tot.Held[inflight.Split] == 6 && tot.Replicas == 2
	})
	if n := queueDepth(t, e.names.Queue); n != 0 {
		t.Errorf("ready messages while both replicas hold 3 = %d, want 0", n)
	}

	_ = rdbA.Close() // the process dies: no report, and no removal, from now on
	killed := time.Now()
	stopA()
	waitFor(t, "the killed replica's count to leave the sum", func() bool {
		tot := sum()
		return tot.Held[inflight.Split] == 3 && tot.Replicas == 1
	})
	if took := time.Since(killed); took > ttl+2*time.Second {
		t.Errorf("the killed replica's count left the sum after %v, want within its report's TTL %v (+2s)", took, ttl)
	}
	// Its deliveries are back (the test's kill still lets its handlers
	// hand back copies as they stop, so there may be more).
	if n := queueDepth(t, e.names.Queue); n < 3 {
		t.Errorf("ready messages after the kill = %d, want at least 3 (the killed replica's deliveries)", n)
	}
}

// TestRedeliveredJobShowsAttempts: the worker records the delivery it took
// a task's lease with as the task's attempts: 1 for a first delivery, 2
// for a job the broker delivered once before and got back.
func TestRedeliveredJobShowsAttempts(t *testing.T) {
	e := newEnv(t, fastSim())
	ctx := context.Background()
	again := e.submit("demo", "ORDER-1", item("M", "SKU-MUG", 1))
	// A consumer takes the job and gives it back unacknowledged: RabbitMQ
	// delivers it again with x-delivery-count 1.
	ch := bareChannel(t)
	waitFor(t, "the job delivered and given back", func() bool {
		d, ok, err := ch.Get(e.names.Queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
		}
		return ok
	})
	first := e.submit("demo", "ORDER-2", item("M", "SKU-MUG", 1))
	e.start(worker.Options{})
	for _, tc := range []struct {
		name string
		job  *jobv1.SplitJob
		want int64
	}{
		{"delivered once", first, 1},
		{"given back once, then delivered again", again, 2},
	} {
		if task := e.wait(tc.job); task.GetStatus() != succeeded {
			t.Fatalf("%s: status = %v, want SUCCEEDED", tc.name, task.GetStatus())
		}
		if got, err := e.store.Attempts(ctx, "demo", tc.job.GetTaskId()); err != nil || got != tc.want {
			t.Errorf("%s: Attempts() = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
