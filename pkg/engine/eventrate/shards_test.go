package eventrate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestCountsSpreadOverMastersOnRedisCluster: on a Redis Cluster the script
// calls of many adds do not all go to one hash tag (one master): they
// spread over the shards, whose keys are on different masters, and every
// reader sums every shard and the single-tag counts of earlier versions,
// so an upgrade loses no counts.
func TestCountsSpreadOverMastersOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	prefix := testenv.Prefix(t)
	newClient := func() *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	rdb := newClient()
	// Counts an earlier version wrote under the single tag this minute.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := strconv.FormatInt(now.Unix()/60, 10) + ":" + eventrate.TaskFinished
	if err := rdb.HIncrBy(ctx, prefix+":{rates}:counts", f, 5).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, prefix+":{rates}:buckets", redis.Z{Score: float64(now.Unix() / 60), Member: f}).Err(); err != nil {
		t.Fatal(err)
	}
	// Two replicas, each with a client of its own.
	counters := []*eventrate.Counter{eventrate.New(rdb, prefix), eventrate.New(newClient(), prefix)}
	const adds = 32
	for i := range adds {
		if err := counters[i%2].AddAll(ctx, map[string]int64{eventrate.TaskFinished: 1, eventrate.TaskFailed + "10009": 1}); err != nil {
			t.Fatal(err)
		}
	}
	masters := map[string]bool{}
	shards := 0
	for i := range eventrate.Shards {
		k := prefix + ":{rates:" + strconv.Itoa(i) + "}:counts"
		if n, err := rdb.HLen(ctx, k).Result(); err != nil || n == 0 {
			continue
		}
		shards++
		node, err := rdb.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if shards < 4 || len(masters) < 2 {
		t.Errorf("%d adds wrote to %d shards on %d master(s), want several shards on several masters", adds, shards, len(masters))
	}
	want := map[string]int64{eventrate.TaskFinished: adds + 5, eventrate.TaskFailed + "10009": adds}
	for i, c := range counters {
		ws, err := c.Windows(ctx, 5, 60)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if diff := cmp.Diff(want, w.Counts); diff != "" {
				t.Errorf("replica %d, window of %d min: counts (-want +got):\n%s", i, w.Minutes, diff)
			}
		}
	}
}
