package delayq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// BenchmarkDelayQueueCluster prints firings per second of a burst of jobs
// all due at once on a 3-master Redis Cluster of its own, fired by two
// replicas (Concurrency 64, no-op handler): the jobs in the single-tag
// layout of earlier versions (one master does all the queue's work) and
// the same jobs spread over the queue's shards. It runs once whatever
// b.N is. Beside each rate it prints the share of the masters' CPU time
// the busiest master spent (INFO cpu), the figure that bounds a queue on a
// cluster whose masters have cores of their own.
func BenchmarkDelayQueueCluster(b *testing.B) {
	const burst, replicas = 20_000, 2
	addrs := testenv.StartRedisCluster(b, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64})
	defer rdb.Close()
	fmt.Printf("\ndelay queue on a 3-master Redis Cluster (own redis-servers), %d replicas, %d due at once\n", replicas, burst)
	for _, layout := range []string{"single tag", "sharded"} {
		name := "bench-" + map[string]string{"single tag": "one", "sharded": "sharded"}[layout]
		q := New(rdb, Options{Name: name})
		pick := q.shardFor
		if layout == "single tag" {
			pick = func(string) *shard { return q.legacy }
		}
		loadInto(b, q, pick, "now", burst, time.Now().Add(-25*time.Hour)) // due 25 h to 1 h ago
		before := mastersCPU(b, addrs)
		rate := clusterThroughput(b, addrs, name, replicas, burst)
		after := mastersCPU(b, addrs)
		var total, busiest float64
		for i := range after {
			d := after[i] - before[i]
			total += d
			busiest = max(busiest, d)
		}
		fmt.Printf("  %-10s %8.0f firings/s, busiest master %.0f %% of the masters' %.2f CPU s\n", layout, rate, 100*busiest/total, total)
		b.ReportMetric(rate, "fire/s-"+map[string]string{"single tag": "one", "sharded": "sharded"}[layout])
	}
}

// clusterThroughput runs replicas queues named name (own cluster clients)
// with a no-op handler until n jobs have fired; it returns firings per
// second.
func clusterThroughput(b *testing.B, addrs []string, name string, replicas, n int) float64 {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	for range replicas {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64})
		defer c.Close()
		r := New(c, Options{Name: name, Concurrency: 64})
		wg.Go(func() {
			_ = r.Run(ctx, func(context.Context, Job) error {
				if done.Add(1) == int64(n) {
					close(all)
				}
				return nil
			})
		})
	}
	select {
	case <-all:
	case <-time.After(120 * time.Second):
		b.Errorf("only %d of %d jobs fired", done.Load(), n)
	}
	elapsed := time.Since(t0)
	cancel()
	wg.Wait()
	return float64(n) / elapsed.Seconds()
}

// mastersCPU returns each node's CPU seconds (user + sys) so far.
func mastersCPU(b *testing.B, addrs []string) []float64 {
	b.Helper()
	out := make([]float64, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.Info(context.Background(), "cpu").Result()
		_ = c.Close()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, _ := strconv.ParseFloat(v, 64)
				out[i] += f
			}
		}
	}
	return out
}
