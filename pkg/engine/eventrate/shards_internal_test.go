package eventrate

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// BenchmarkWindowsShards measures what a read of the 5- and 60-minute
// windows (the operations overview's) costs a Redis of its own when the
// counts are one pair of keys and when they are Shards pairs, each holding
// every name's bucket of every kept minute (a busy deployment: 9 names,
// Keep of minutes). It reports the Redis CPU per read (INFO commandstats,
// the scripts' usec) beside the wall time.
func BenchmarkWindowsShards(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartRedis(b, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	minute := now.Unix() / 60
	names := []string{TaskFinished, TaskFailed + "10009", TaskFailed + "10011", TaskFailed + "-1", TaskFailed + "20001", DeadLettered, ProviderAnswer, ProviderUncertain, "other"}
	for _, shards := range []int{0, Shards} {
		c := newCounter(rdb, "bench"+strconv.Itoa(shards), shards)
		keys := c.readKeys()
		if shards > 0 {
			keys = keys[:shards]
		}
		for _, k := range keys {
			pipe := rdb.Pipeline()
			for ago := range int64(Keep / time.Minute) {
				for _, n := range names {
					f := strconv.FormatInt(minute-ago, 10) + ":" + n
					pipe.HSet(ctx, k[0], f, 7)
					pipe.ZAdd(ctx, k[1], redis.Z{Score: float64(minute - ago), Member: f})
				}
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("shards="+strconv.Itoa(shards), func(b *testing.B) {
			if _, err := c.Windows(ctx, 5, 60); err != nil {
				b.Fatal(err)
			}
			before := scriptUsec(ctx, b, rdb)
			b.ResetTimer()
			for range b.N {
				if _, err := c.Windows(ctx, 5, 60); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((scriptUsec(ctx, b, rdb)-before)/float64(b.N), "redis-µs/read")
		})
	}
}

// scriptUsec is the Redis time spent in EVAL and EVALSHA so far (µs).
func scriptUsec(ctx context.Context, b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var us float64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				us += n
			}
		}
	}
	return us
}

// TestShardedCountsOnOneRedis runs the sharded counts (as on a Redis
// Cluster) on one Redis: adds spread over the shards and a read sums every
// shard and the single pair, and prunes nothing it should keep.
func TestShardedCountsOnOneRedis(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	c := newCounter(rdb, prefix, Shards)
	if err := rdb.HIncrBy(ctx, prefix+":{rates}:counts", "0:ignored", 1).Err(); err != nil {
		t.Fatal(err)
	}
	old := New(rdb, prefix) // one Redis: the single pair, as earlier versions
	if err := old.Add(ctx, DeadLettered, 3); err != nil {
		t.Fatal(err)
	}
	for range 2 * Shards {
		if err := c.AddAll(ctx, map[string]int64{TaskFinished: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range Shards {
		k := c.keys(i)[0]
		if n, err := rdb.HLen(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("HLEN(%s) = %d, %v; want 1 (every shard written)", k, n, err)
		}
	}
	ws, err := c.Windows(ctx, 1, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Counts[TaskFinished] != 2*Shards || w.Counts[DeadLettered] != 3 || len(w.Counts) != 2 {
			t.Errorf("window of %d min = %v, want %s %d and %s 3", w.Minutes, w.Counts, TaskFinished, 2*Shards, DeadLettered)
		}
	}
}
