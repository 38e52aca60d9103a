package slotpool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// downstream stands in for the N-slot system the pool guards: a job runs
// there for its whole duration once started, whatever happens to the
// worker that started it, and the most jobs seen running at once is kept.
type downstream struct {
	wg      sync.WaitGroup
	running atomic.Int64
	peak    atomic.Int64
}

// start runs a job of duration d there.
func (d *downstream) start(dur time.Duration) {
	n := d.running.Add(1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	d.wg.Go(func() {
		time.Sleep(dur)
		d.running.Add(-1)
	})
}

// TestRedisLostPastSlotLeaseKeepsN blocks one replica's Redis (through a
// netfault.Toxic) for longer than the slot lease while its jobs, longer than
// the lease, run at the downstream; another replica waits for slots
// meanwhile. The blocked replica's holders give their slots up, the pool
// keeps them counted against N as orphans until the job limit has passed,
// and the downstream never sees more than N jobs.
func TestRedisLostPastSlotLeaseKeepsN(t *testing.T) {
	const (
		n        = 2
		lease    = 1500 * time.Millisecond
		jobRun   = 5 * time.Second // at the downstream, longer than the lease
		jobLimit = jobRun          // bounds a job's run
		blocked  = 2 * lease
	)
	rdb, prefix := testenv.Redis(t)
	opts := Options{Name: prefix + ":pool", Capacity: n, Lease: lease, CheckInterval: 200 * time.Millisecond, JobLimit: jobLimit}
	t.Cleanup(func() { testenv.DeletePrefix(context.Background(), rdb, "{"+opts.Name+"}") })
	proxy, err := netfault.NewToxic(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	// Read timeouts well inside the lease, as the split-worker's
	// configuration requires (lease ≥ 4 × read timeout).
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = cut.Close() })
	direct := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = direct.Close() })
	a, b := New(cut, opts), New(direct, opts)
	runJanitors(t, b)

	var ds downstream
	defer ds.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Replica a holds every slot and runs its jobs, renewing its leases.
	var keep sync.WaitGroup
	var gaveUp atomic.Int64
	for _, job := range []string{"a1", "a2"} {
		s := mustAcquire(t, a, job)
		ds.start(jobRun)
		keep.Go(func() { s.KeepAlive(ctx, func() { gaveUp.Add(1) }) })
	}
	// Replica b's jobs wait for slots.
	var bs sync.WaitGroup
	for _, job := range []string{"b1", "b2"} {
		bs.Go(func() {
			s, err := b.Acquire(ctx, job)
			if err != nil {
				t.Errorf("Acquire(%q) = %v", job, err)
				return
			}
			ds.start(jobRun)
			kctx, stop := context.WithTimeout(ctx, jobRun)
			defer stop()
			s.KeepAlive(kctx, func() { t.Errorf("KeepAlive(%q) lost the slot", job) })
			if err := s.Release(context.Background(), Completed, ""); err != nil {
				t.Errorf("Release(%q) = %v", job, err)
			}
		})
	}
	waitFor(t, "b's waiters", func() bool { return len(mustSnapshot(t, b).Pending) == 2 })

	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	blockedAt := time.Now()
	waitFor(t, "a's leases to expire", func() bool { return mustSnapshot(t, b).Reclaimed == 2 })
	if got := mustSnapshot(t, b); len(got.Orphaned) != 2 || len(got.Holders) != 0 {
		t.Errorf("Snapshot() once a's leases expired: %d orphaned, %d holders, want 2 orphaned and none held", len(got.Orphaned), len(got.Holders))
	}
	time.Sleep(blocked - time.Since(blockedAt))
	proxy.Heal()
	t.Logf("replica a's Redis blocked for %v (lease %v, jobs run %v)", time.Since(blockedAt).Round(time.Millisecond), lease, jobRun)

	bs.Wait()
	cancel()
	keep.Wait()
	ds.wg.Wait()
	if got := ds.peak.Load(); got > n {
		t.Errorf("the downstream ran %d jobs at once, want at most N = %d", got, n)
	}
	if got := gaveUp.Load(); got != 2 {
		t.Errorf("KeepAlive called lost for %d of a's 2 slots, want 2", got)
	}
}
