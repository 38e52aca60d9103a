package slotpool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestShardedPoolSpreadsOverMastersOnRedisCluster runs the production pool
// name split in 4 shards on a three-master Redis Cluster: the shards' keys
// live on every master, the jobs' scripts run on more than one, and never
// more than N jobs hold a slot across the shards under concurrent acquires
// and releases from three replicas.
func TestShardedPoolSpreadsOverMastersOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const name, capacity, shards, jobs = "orderflow:fulfilment", 6, 4, 80
	var pools []*Sharded
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = rdb.Close() })
		p := NewSharded(rdb, Options{Name: name, Capacity: capacity, Lease: 2 * time.Second}, shards)
		pools = append(pools, p)
		wg.Go(func() { _ = p.Run(runCtx) })
	}
	defer func() { stop(); wg.Wait() }()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })

	keyMasters := map[string]bool{}
	for _, p := range pools[0].Shards() {
		node, err := rdb.MasterForKey(ctx, p.keys[keyHolders])
		if err != nil {
			t.Fatal(err)
		}
		keyMasters[node.Options().Addr] = true
	}
	if len(keyMasters) != 3 {
		t.Errorf("the %d shards' keys are on %d masters, want 3", shards, len(keyMasters))
	}

	var running, maxRunning, done atomic.Int64
	var jobsWG sync.WaitGroup
	for i := range jobs {
		jobsWG.Go(func() {
			p := pools[i%len(pools)]
			s, err := p.AcquireClass(ctx, fmt.Sprintf("order-%d/%d", i/2, i%2+1), Class{Group: fmt.Sprintf("m-%d", i%5)})
			if err != nil {
				t.Errorf("Acquire = %v", err)
				return
			}
			n := running.Add(1)
			for {
				m := maxRunning.Load()
				if n <= m || maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			running.Add(-1)
			if err := s.Release(ctx, Completed, "ok"); err != nil {
				t.Errorf("Release = %v", err)
			}
			done.Add(1)
		})
	}
	jobsWG.Wait()
	if got := maxRunning.Load(); got > capacity {
		t.Errorf("max concurrent holders = %d, want ≤ %d", got, capacity)
	}
	if got := done.Load(); got != jobs {
		t.Errorf("jobs done = %d, want %d", got, jobs)
	}

	// Each finished job is one acquire and one release on its shard's
	// master: count them per master.
	perMaster := map[string]int64{}
	for _, p := range pools[0].Shards() {
		k := p.keys[keyFinished]
		n, err := rdb.XLen(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		node, err := rdb.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		perMaster[node.Options().Addr] += n
	}
	busy := 0
	for _, n := range perMaster {
		if n > 0 {
			busy++
		}
		if n == jobs {
			t.Errorf("every job ran on one master: %v", perMaster)
		}
	}
	if busy < 2 {
		t.Errorf("jobs ran on %d masters (%v), want at least 2", busy, perMaster)
	}
	snap, err := pools[2].Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Capacity != capacity || len(snap.Holders) != 0 || len(snap.Pending) != 0 || len(snap.Shards) != shards {
		t.Errorf("Snapshot() after the run = %+v, want capacity %d and nothing held or pending", snap, capacity)
	}
}
