package slotpool_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestPoolOnRedisCluster runs the pool's core promises against a
// three-master Redis Cluster: the cap holds across replicas with waiters of
// several fairness groups and both priorities, every job finishes, and a
// crashed holder's slot is reclaimed.
func TestPoolOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := testenv.Prefix(t) + ":fulfilment"
	const capacity = 3
	var pools []*slotpool.Pool
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	for range 3 {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = rdb.Close() })
		p := slotpool.New(rdb, slotpool.Options{Name: name, Capacity: capacity, Lease: time.Second})
		pools = append(pools, p)
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Run(runCtx) }()
	}
	defer func() { stop(); wg.Wait() }()

	var inUse, maxInUse, done atomic.Int64
	var jobs sync.WaitGroup
	for i := range 40 {
		jobs.Add(1)
		go func() {
			defer jobs.Done()
			p := pools[i%len(pools)]
			c := slotpool.Class{Group: fmt.Sprintf("m-%d", i%4)}
			if i%5 == 0 {
				c.Priority = slotpool.High
			}
			slot, err := p.AcquireClass(ctx, fmt.Sprintf("job-%d", i), c)
			if err != nil {
				t.Errorf("Acquire(job-%d) = %v", i, err)
				return
			}
			n := inUse.Add(1)
			for {
				m := maxInUse.Load()
				if n <= m || maxInUse.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			inUse.Add(-1)
			if err := slot.Release(ctx, slotpool.Completed, "ok"); err != nil {
				t.Errorf("Release(job-%d) = %v", i, err)
			}
			done.Add(1)
		}()
	}
	jobs.Wait()
	if got := maxInUse.Load(); got > capacity {
		t.Errorf("max concurrent holders = %d, want ≤ %d", got, capacity)
	}
	if got := done.Load(); got != 40 {
		t.Errorf("jobs done = %d, want 40", got)
	}

	// A holder that stops renewing is reclaimed and the waiter gets a slot.
	var held []*slotpool.Slot
	for i := range capacity {
		s, err := pools[0].Acquire(ctx, fmt.Sprintf("crash-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	start := time.Now()
	s, err := pools[1].Acquire(ctx, "waiter")
	if err != nil {
		t.Fatalf("Acquire(waiter) = %v, want a reclaimed slot", err)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Errorf("waiter got a slot after %v, before any lease could expire", waited)
	}
	_ = s.Release(ctx, slotpool.Completed, "")
	snap, err := pools[2].Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Pending) != 0 {
		t.Errorf("pending after the run = %v, want none", snap.Pending)
	}
	_ = held // abandoned without KeepAlive: the crashed holders

	// The pool's function library is on every primary, and a primary that
	// lost it (a restart without persistence) gets it back at the next call.
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer admin.Close()
	libraries := func() map[string]bool {
		has := map[string]bool{}
		var mu sync.Mutex
		if err := admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "slotpool_*"}).Result()
			mu.Lock()
			has[node.Options().Addr] = len(libs) == 1
			mu.Unlock()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return has
	}
	for addr, ok := range libraries() {
		if !ok {
			t.Errorf("primary %s has no slot pool library after the run", addr)
		}
	}
	if err := admin.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.FunctionFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	s, err = pools[2].Acquire(ctx, "after-flush")
	if err != nil {
		t.Fatalf("Acquire after the primaries lost the library = %v", err)
	}
	if err := s.Release(ctx, slotpool.Completed, ""); err != nil {
		t.Fatalf("Release after the primaries lost the library = %v", err)
	}
	for addr, ok := range libraries() {
		if !ok {
			t.Errorf("primary %s has no slot pool library after a call found it missing", addr)
		}
	}
}
