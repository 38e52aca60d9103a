package slotpool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
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
			notePeak(&maxRunning, running.Add(1))
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

// BenchmarkShardedPoolOnRedisCluster measures, on a three-master Redis
// Cluster, how acquire + release pairs (from 3 replicas, 12 or 48 callers,
// N = 4 × callers so that no job waits) load the masters with the
// single-tag pool (shards=1) and split over 4 shards:
// busiest-master-cpu-share is the busiest master's part of the masters'
// CPU time (1 when all the pool's work runs on one master),
// master-cpu-us/pair the masters' CPU time per pair, scripts/pair the
// script calls per pair (a batch of calls is one).
func BenchmarkShardedPoolOnRedisCluster(b *testing.B) {
	addrs := testenv.StartRedisCluster(b, 3)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	b.Cleanup(func() { _ = rdb.Close() })
	// cpu returns each master's CPU seconds and the script calls of all.
	cpu := func() (map[string]float64, int64) {
		out := map[string]float64{}
		var scripts int64
		var mu sync.Mutex
		_ = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "cpu", "commandstats").Result()
			if err != nil {
				return err
			}
			var user, sys float64
			var calls int64
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
					user, _ = strconv.ParseFloat(v, 64)
				}
				if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
					sys, _ = strconv.ParseFloat(v, 64)
				}
				for _, cmd := range []string{"cmdstat_fcall:calls="} {
					if v, ok := strings.CutPrefix(line, cmd); ok {
						v, _, _ = strings.Cut(v, ",")
						n, _ := strconv.ParseInt(v, 10, 64)
						calls += n
					}
				}
			}
			mu.Lock()
			out[c.Options().Addr] = user + sys
			scripts += calls
			mu.Unlock()
			return nil
		})
		return out, scripts
	}
	run := 0
	for _, c := range []struct{ callers, shards int }{{12, 1}, {12, 4}, {48, 1}, {48, 4}} {
		callers, shards := c.callers, c.shards
		b.Run(fmt.Sprintf("callers=%d/shards=%d", callers, shards), func(b *testing.B) {
			run++
			name := fmt.Sprintf("bench%d:fulfilment", run)
			var pools []*Sharded
			for range 3 {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
				b.Cleanup(func() { _ = c.Close() })
				pools = append(pools, NewSharded(c, Options{Name: name, Capacity: 4 * callers, Lease: 10 * time.Second}, shards))
			}
			if err := pools[0].SetCapacity(ctx, 4*callers); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			before, scriptsBefore := cpu()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						s, err := pools[g%3].Acquire(ctx, fmt.Sprintf("order-%d/1", i))
						if err != nil {
							b.Error(err)
							return
						}
						if err := s.Release(ctx, Completed, ""); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			after, scriptsAfter := cpu()
			var total, busiest float64
			for addr, v := range after {
				d := v - before[addr]
				total += d
				busiest = max(busiest, d)
			}
			if total > 0 {
				b.ReportMetric(busiest/total, "busiest-master-cpu-share")
				b.ReportMetric(total*1e6/float64(b.N), "master-cpu-us/pair")
				b.ReportMetric(float64(scriptsAfter-scriptsBefore)/float64(b.N), "scripts/pair")
			}
		})
	}
}
