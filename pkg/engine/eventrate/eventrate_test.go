package eventrate_test

import (
	"context"
	"math"
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
	old := func(ago int64, name string, n int64) string { return putOld(t, rdb, prefix, minute-ago, name, n) }
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

// TestSeriesIsMinuteByMinute puts counts into older minutes (as written
// earlier) and the current one, observes gauges, and checks that Series
// returns each in its minute, oldest first, with the gauges' peaks and
// NaN where nothing was observed.
func TestSeriesIsMinuteByMinute(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	c := eventrate.New(rdb, prefix)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	minute := now.Unix() / 60
	old := func(ago int64, name string, n int64) { putOld(t, rdb, prefix, minute-ago, name, n) }
	old(3, eventrate.TaskFinished, 7)
	old(30, eventrate.TaskFailed+"10009", 2)
	old(30, eventrate.TaskFailed+"10011", 3)
	old(90, eventrate.TaskFinished, 100) // outside the hour read
	if err := c.AddAll(ctx, map[string]int64{eventrate.TaskSubmitted: 5, eventrate.TaskFinished: 1}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []float64{0.5, 0.75, 0.25} {
		if err := c.Observe(ctx, map[string]float64{"slot.utilisation": v}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Series(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if s.Minutes != 60 || s.Start.Unix()%60 != 0 || s.End.Sub(s.Start) <= 59*time.Minute || s.End.Sub(s.Start) > time.Hour {
		t.Fatalf("Series(60) spans %d minutes from %v to %v, want 60 whole minutes ending now", s.Minutes, s.Start, s.End)
	}
	// Indexes from the series' own start, in case a minute turned since
	// TIME was read above.
	at := func(ago int64) int { return int(minute - ago - s.Start.Unix()/60) }
	want := map[string][]int64{eventrate.TaskFinished: make([]int64, 60), eventrate.TaskSubmitted: make([]int64, 60)}
	want[eventrate.TaskFinished][at(3)] = 7
	wantFailed := make([]int64, 60)
	wantFailed[at(30)] = 5
	last := 59
	want[eventrate.TaskFinished][last]++
	want[eventrate.TaskSubmitted][last] = 5
	got := map[string][]int64{eventrate.TaskFinished: s.Counts[eventrate.TaskFinished], eventrate.TaskSubmitted: s.Counts[eventrate.TaskSubmitted]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Series counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantFailed, s.Sum(eventrate.TaskFailed)); diff != "" {
		t.Errorf("Series Sum(task.failed.) (-want +got):\n%s", diff)
	}
	// The peak of the minute (or, when a minute turned between the
	// observations, of the last two).
	g := s.Gauge("slot.utilisation")
	if len(g) != 60 || g[last] != 0.75 && g[last-1] != 0.75 {
		t.Errorf("Gauge(slot.utilisation) ends %v, want a peak of 0.75 in the last minute", g[len(g)-2:])
	}
	observed := 0
	for _, v := range g {
		if !math.IsNaN(v) {
			observed++
		}
	}
	if observed < 1 || observed > 2 {
		t.Errorf("Gauge(slot.utilisation) has %d minutes observed, want 1 (2 if a minute turned)", observed)
	}
	if u := s.Gauge("check.lateness"); len(u) != 60 || !math.IsNaN(u[last]) {
		t.Errorf("Gauge of a name never observed = %v..., want 60 NaNs", u[last])
	}
	if err := c.Observe(ctx, map[string]float64{"x": math.NaN()}); err == nil {
		t.Error("Observe(NaN) = nil error, want an error")
	}
	if _, err := c.Series(ctx, 0); err == nil {
		t.Error("Series(0) = nil error, want an error")
	}
}

// putOld adds n to the single pair's bucket of name in minute, as an
// earlier write would have, and returns its field.
func putOld(t *testing.T, rdb redis.UniversalClient, prefix string, minute int64, name string, n int64) string {
	t.Helper()
	ctx := context.Background()
	f := strconv.FormatInt(minute, 10) + ":" + name
	if err := rdb.HIncrBy(ctx, prefix+":{rates}:counts", f, n).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, prefix+":{rates}:buckets", redis.Z{Score: float64(minute), Member: f}).Err(); err != nil {
		t.Fatal(err)
	}
	return f
}
