package eventrate_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestCountsAreClusterWide has several counters (replicas, each with its
// own connection) add at once and every one of them read the same sums.
func TestCountsAreClusterWide(t *testing.T) {
	ctx := context.Background()
	_, prefix := testenv.Redis(t)
	const replicas, adds = 4, 50
	counters := make([]*eventrate.Counter, replicas)
	for i := range counters {
		rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
		t.Cleanup(func() { rdb.Close() })
		counters[i] = eventrate.New(rdb, prefix)
	}
	var wg sync.WaitGroup
	for _, c := range counters {
		wg.Go(func() {
			for range adds {
				if err := c.AddAll(ctx, map[string]int64{"task.finished": 1, "task.failed.10009": 1}); err != nil {
					t.Error(err)
					return
				}
			}
			if err := c.Add(ctx, "task.failed.-1", 2); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	want := map[string]int64{"task.finished": replicas * adds, "task.failed.10009": replicas * adds, "task.failed.-1": 2 * replicas}
	for i, c := range counters {
		ws, err := c.Windows(ctx, 5, 60)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if diff := cmp.Diff(want, w.Counts); diff != "" {
				t.Errorf("replica %d, window of %d min: counts (-want +got):\n%s", i, w.Minutes, diff)
			}
			if got, want := w.Sum("task.failed."), int64((adds+2)*replicas); got != want {
				t.Errorf("Sum(task.failed.) = %d, want %d", got, want)
			}
			if span := w.End.Sub(w.Start); span <= time.Duration(w.Minutes-1)*time.Minute || span > time.Duration(w.Minutes)*time.Minute {
				t.Errorf("window of %d min spans %v (from %v to %v)", w.Minutes, span, w.Start, w.End)
			}
		}
	}
	if got := ws0(t, counters[0]).Names("task.failed."); !cmp.Equal(got, []string{"task.failed.10009", "task.failed.-1"}) {
		t.Errorf("Names(task.failed.) = %q, want the largest count first", got)
	}
}

func ws0(t *testing.T, c *eventrate.Counter) eventrate.Window {
	t.Helper()
	ws, err := c.Windows(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	return ws[0]
}

// TestWindowsAreRedisTimeMinutes puts counts into older minutes (as
// written earlier) and checks which windows hold them, and that a bucket
// older than Keep is dropped by the next Add.
func TestWindowsAreRedisTimeMinutes(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	c := eventrate.New(rdb, prefix)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	minute := now.Unix() / 60
	old := func(ago int64, name string, n int64) string {
		f := strconv.FormatInt(minute-ago, 10) + ":" + name
		rdb.HIncrBy(ctx, prefix+":{rates}:counts", f, n)
		rdb.ZAdd(ctx, prefix+":{rates}:buckets", redis.Z{Score: float64(minute - ago), Member: f})
		return f
	}
	old(3, "dead", 1)
	old(30, "dead", 10)
	gone := old(int64(eventrate.Keep/time.Minute)+1, "dead", 100)
	if err := c.Add(ctx, "dead", 1000); err != nil {
		t.Fatal(err)
	}
	ws, err := c.Windows(ctx, 1, 5, 60, int(eventrate.Keep/time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{1000, 1001, 1011, 1011} {
		if got := ws[i].Counts["dead"]; got != want {
			t.Errorf("window of %d min: dead = %d, want %d", ws[i].Minutes, got, want)
		}
	}
	if ok, _ := rdb.HExists(ctx, prefix+":{rates}:counts", gone).Result(); ok {
		t.Errorf("bucket %s older than Keep still there after Add", gone)
	}
	if _, err := c.Windows(ctx, 0); err == nil {
		t.Error("Windows(0) = nil error, want an error")
	}
}
