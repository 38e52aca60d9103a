package paystore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// holding returns the keys matching pattern that hold member (a set or a
// sorted set), each with the address of the Redis (the master, on a Redis
// Cluster) it lives on.
func holding(ctx context.Context, t *testing.T, rdb redis.UniversalClient, pattern, member string) map[string]string {
	t.Helper()
	var mu sync.Mutex
	out := map[string]string{}
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			found := false
			switch c.Type(ctx, k).Val() {
			case "set":
				found = c.SIsMember(ctx, k, member).Val()
			case "zset":
				found = c.ZScore(ctx, k, member).Err() == nil
			}
			if found {
				mu.Lock()
				out[k] = c.Options().Addr
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("holding: client %T", rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// onlyKey returns the one key of keys, failing the test when there is not
// exactly one.
func onlyKey(t *testing.T, what string, keys map[string]string) (key, addr string) {
	t.Helper()
	if len(keys) != 1 {
		t.Fatalf("%s is in %v, want one key", what, keys)
	}
	for k, a := range keys {
		key, addr = k, a
	}
	return key, addr
}

// pageAll reads the whole stuck list page by page (size entries), checking
// the total of every page.
func pageAll(ctx context.Context, t *testing.T, s *Store, size int, total int64) []StuckRef {
	t.Helper()
	var out []StuckRef
	for off := 0; ; off += size {
		page, n, err := s.Stuck(ctx, off, size)
		if err != nil {
			t.Fatal(err)
		}
		if n != total {
			t.Errorf("Stuck(%d, %d) total = %d, want %d", off, size, n, total)
		}
		if want := min(size, max(int(total)-off, 0)); len(page) != want {
			t.Errorf("Stuck(%d, %d) = %d entries, want %d", off, size, len(page), want)
		}
		out = append(out, page...)
		if len(page) < size || off > int(total) {
			return out
		}
	}
}

// stuckFixture lists n payments as stuck under s, at since times one
// second apart (pairs sharing a time), in a shuffled order, and returns
// them oldest first (ties by code, the order of one sorted set).
func stuckFixture(ctx context.Context, t *testing.T, s *Store, base time.Time, n int, name string) []StuckRef {
	t.Helper()
	want := make([]StuckRef, n)
	for i := range n {
		want[i] = StuckRef{TradeNo: fmt.Sprintf("%s%04d", name, i), Since: base.Add(time.Duration(i/2) * time.Second).UTC()}
	}
	for _, i := range shuffled(n) {
		if err := s.MarkStuck(ctx, want[i].TradeNo, want[i].Since); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// shuffled returns 0..n-1 in a fixed scrambled order.
func shuffled(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (i*37 + 11) % n
	}
	if n%37 == 0 {
		slices.Reverse(out)
	}
	return out
}

// TestDayCountsSpreadOverHashTags: the day sets of many finished payments
// do not all share one hash tag (one master of a Redis Cluster), and a
// day's counts are exact over every shard and the single-tag sets that
// earlier versions wrote.
func TestDayCountsSpreadOverHashTags(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	day := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	tags := map[string]bool{}
	for i := range 64 {
		code, st := fmt.Sprintf("P%04d", i), StatusPaid
		if i%4 == 0 {
			code, st = fmt.Sprintf("C%04d", i), StatusClosed
		}
		if err := s.Finished(ctx, code, st, day.Add(time.Duration(i)*time.Minute), false); err != nil {
			t.Fatal(err)
		}
		// Recording it again changes nothing.
		if err := s.Finished(ctx, code, st, day.Add(time.Duration(i)*time.Minute), false); err != nil {
			t.Fatal(err)
		}
		key, _ := onlyKey(t, code, holding(ctx, t, rdb, prefix+":{paydone*", code))
		if ttl := rdb.TTL(ctx, key).Val(); ttl <= 0 || ttl > statsTTL {
			t.Errorf("TTL(%s) = %v, want at most %v", key, ttl, statsTTL)
		}
		tags[hashTag(key)] = true
	}
	if len(tags) < 4 {
		t.Errorf("the day sets of 64 payments use %d hash tags (%v), want them spread over several", len(tags), tags)
	}
	// The next day's payments count on the next day only.
	if err := s.Finished(ctx, "P-NEXT", StatusPaid, day.Add(24*time.Hour), false); err != nil {
		t.Fatal(err)
	}
	// Sets written by earlier versions, counted as well.
	for _, code := range []string{"OLD-P1", "OLD-P2", "OLD-P3"} {
		rdb.SAdd(ctx, prefix+":{paydone}:PAID:20260314", code)
	}
	rdb.SAdd(ctx, prefix+":{paydone}:CLOSED:20260314", "OLD-C1")
	rdb.SAdd(ctx, prefix+":{paydone}:PAID:20260315", "OLD-NEXT")

	for _, tc := range []struct {
		day                  time.Time
		wantPaid, wantClosed int64
	}{
		{day, 48 + 3, 16 + 1},
		{day.Add(24 * time.Hour), 2, 0},
		{day.Add(-24 * time.Hour), 0, 0},
	} {
		paid, closed, err := s.TransitionsOn(ctx, tc.day)
		if err != nil {
			t.Fatal(err)
		}
		if paid != tc.wantPaid || closed != tc.wantClosed {
			t.Errorf("TransitionsOn(%s) = %d paid, %d closed; want %d, %d", tc.day.Format(time.DateOnly), paid, closed, tc.wantPaid, tc.wantClosed)
		}
	}
}

// TestStuckListSpreadsOverHashTags: the stuck list's entries of many
// payments do not all share one hash tag, paging through them gives every
// entry once, oldest first, with the list's total on every page, and a
// payment that finishes or is cleared leaves the list.
func TestStuckListSpreadsOverHashTags(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	base := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	want := stuckFixture(ctx, t, s, base, 50, "S")
	tags := map[string]bool{}
	for _, r := range want {
		key, _ := onlyKey(t, r.TradeNo, holding(ctx, t, rdb, prefix+":{paystuck*", r.TradeNo))
		tags[hashTag(key)] = true
	}
	if len(tags) < 4 {
		t.Errorf("the stuck entries of 50 payments use %d hash tags (%v), want them spread over several", len(tags), tags)
	}
	// Listed again later: it keeps its first time.
	if err := s.MarkStuck(ctx, want[0].TradeNo, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 7, 20, 100} {
		if diff := cmp.Diff(want, pageAll(ctx, t, s, size, 50)); diff != "" {
			t.Errorf("stuck list in pages of %d (-want +got):\n%s", size, diff)
		}
	}
	if n, err := s.StuckCount(ctx); err != nil || n != 50 {
		t.Errorf("StuckCount() = %d, %v; want 50", n, err)
	}
	if page, n, err := s.Stuck(ctx, 60, 10); err != nil || len(page) != 0 || n != 50 {
		t.Errorf("Stuck(60, 10) = %v, %d, %v; want no entry of 50", page, n, err)
	}

	// Finished and cleared payments leave the list.
	for i, r := range want[:20] {
		var err error
		switch i % 3 {
		case 0:
			err = s.Finished(ctx, r.TradeNo, StatusPaid, base, true)
		case 1:
			err = s.Finished(ctx, r.TradeNo, StatusClosed, base, true)
		default:
			err = s.ClearStuck(ctx, r.TradeNo)
		}
		if err != nil {
			t.Fatal(err)
		}
		if keys := holding(ctx, t, rdb, prefix+":{paystuck*", r.TradeNo); len(keys) != 0 {
			t.Errorf("%s still in %v after it left the list", r.TradeNo, keys)
		}
	}
	if diff := cmp.Diff(want[20:], pageAll(ctx, t, s, 8, 30)); diff != "" {
		t.Errorf("stuck list after 20 left (-want +got):\n%s", diff)
	}
	if n, err := s.StuckCount(ctx); err != nil || n != 30 {
		t.Errorf("StuckCount() = %d, %v; want 30", n, err)
	}
}

// TestStuckListReadsTheSingleTagListOfEarlierVersions: entries an earlier
// version left in the single-tag stuck list (a rolling upgrade) are still
// listed and counted, in order among the others; a read moves them to
// their shards (a payment in both keeps its earliest time, listed once),
// where clearing or finishing the payment removes them.
func TestStuckListReadsTheSingleTagListOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	legacy := prefix + ":{paystuck}"
	base := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	want := stuckFixture(ctx, t, s, base, 30, "N")
	// Earlier entries between (and beside) the new ones; OLD-DUP is also
	// listed, later, in its shard.
	for i, at := range []time.Duration{-time.Minute, 2500 * time.Millisecond, 7 * time.Second, 7 * time.Second, time.Hour} {
		r := StuckRef{TradeNo: fmt.Sprintf("OLD-%d", i), Since: base.Add(at)}
		rdb.ZAdd(ctx, legacy, redis.Z{Score: float64(r.Since.UnixMilli()), Member: r.TradeNo})
		want = append(want, r)
	}
	dup := StuckRef{TradeNo: "OLD-DUP", Since: base.Add(3 * time.Second)}
	rdb.ZAdd(ctx, legacy, redis.Z{Score: float64(dup.Since.UnixMilli()), Member: dup.TradeNo})
	if err := s.MarkStuck(ctx, dup.TradeNo, base.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	want = append(want, dup)
	slices.SortFunc(want, func(a, b StuckRef) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.TradeNo, b.TradeNo)
	})

	if diff := cmp.Diff(want, pageAll(ctx, t, s, 4, int64(len(want)))); diff != "" {
		t.Errorf("stuck list with entries of an earlier version (-want +got):\n%s", diff)
	}
	if n, err := s.StuckCount(ctx); err != nil || n != int64(len(want)) {
		t.Errorf("StuckCount() = %d, %v; want %d", n, err, len(want))
	}
	if n := rdb.Exists(ctx, legacy).Val(); n != 0 {
		t.Errorf("single-tag stuck list after a read: %v, want it moved to the shards", rdb.ZRange(ctx, legacy, 0, -1).Val())
	}
	for _, code := range []string{"OLD-0", "OLD-DUP"} {
		key, _ := onlyKey(t, code, holding(ctx, t, rdb, prefix+":{paystuck*", code))
		if hashTag(key) == "paystuck" {
			t.Errorf("%s is in %s, want its shard", code, key)
		}
	}
	if err := s.ClearStuck(ctx, "OLD-0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Finished(ctx, "OLD-DUP", StatusPaid, base, true); err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"OLD-0", "OLD-DUP"} {
		if keys := holding(ctx, t, rdb, prefix+":{paystuck*", code); len(keys) != 0 {
			t.Errorf("%s still in %v after it left the list", code, keys)
		}
	}
	if n, err := s.StuckCount(ctx); err != nil || n != int64(len(want)-2) {
		t.Errorf("StuckCount() = %d, %v; want %d", n, err, len(want)-2)
	}
}

// TestStuckCountReadsTheSingleTagListOfEarlierVersions: the overview's
// count alone (no page read) counts the entries of an earlier version
// once, a payment listed in both the single-tag list and its shard
// included.
func TestStuckCountReadsTheSingleTagListOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	base := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	stuckFixture(ctx, t, s, base, 10, "N")
	for _, code := range []string{"OLD-1", "OLD-2", "N0003"} {
		rdb.ZAdd(ctx, prefix+":{paystuck}", redis.Z{Score: float64(base.UnixMilli()), Member: code})
	}
	if n, err := s.StuckCount(ctx); err != nil || n != 12 {
		t.Errorf("StuckCount() = %d, %v; want 12", n, err)
	}
	if _, n, err := s.Stuck(ctx, 0, 5); err != nil || n != 12 {
		t.Errorf("Stuck(0, 5) total = %d, %v; want 12", n, err)
	}
}

// TestPaymentViewsOnRedisCluster: on a Redis Cluster the day sets and the
// stuck list of different payments live on different masters, and the
// day's counts and the stuck list's pages are exact over every shard and
// the single-tag keys of earlier versions.
func TestPaymentViewsOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	prefix := testenv.Prefix(t)
	s := New(rdb, prefix, time.Hour)
	base := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

	want := stuckFixture(ctx, t, s, base, 32, "K")
	stuckMasters, doneMasters := map[string]bool{}, map[string]bool{}
	for _, r := range want {
		_, addr := onlyKey(t, r.TradeNo, holding(ctx, t, rdb, prefix+":{paystuck*", r.TradeNo))
		stuckMasters[addr] = true
	}
	for i := range 32 {
		code := fmt.Sprintf("D%04d", i)
		if err := s.Finished(ctx, code, StatusPaid, base, false); err != nil {
			t.Fatal(err)
		}
		_, addr := onlyKey(t, code, holding(ctx, t, rdb, prefix+":{paydone*", code))
		doneMasters[addr] = true
	}
	if len(stuckMasters) < 2 || len(doneMasters) < 2 {
		t.Errorf("the stuck entries of 32 payments are on masters %v, their day sets on %v; want several each", stuckMasters, doneMasters)
	}
	rdb.SAdd(ctx, prefix+":{paydone}:PAID:20260314", "OLD-P1")
	rdb.SAdd(ctx, prefix+":{paydone}:CLOSED:20260314", "OLD-C1", "OLD-C2")
	if paid, closed, err := s.TransitionsOn(ctx, base); err != nil || paid != 33 || closed != 2 {
		t.Errorf("TransitionsOn() = %d paid, %d closed, %v; want 33, 2", paid, closed, err)
	}

	old := StuckRef{TradeNo: "OLD-1", Since: base.Add(5500 * time.Millisecond)}
	rdb.ZAdd(ctx, prefix+":{paystuck}", redis.Z{Score: float64(old.Since.UnixMilli()), Member: old.TradeNo})
	want = slices.Insert(want, 12, old)
	if diff := cmp.Diff(want, pageAll(ctx, t, s, 5, 33)); diff != "" {
		t.Errorf("stuck list on a cluster (-want +got):\n%s", diff)
	}
	for _, r := range want[:10] {
		if err := s.Finished(ctx, r.TradeNo, StatusClosed, base, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ClearStuck(ctx, old.TradeNo); err != nil {
		t.Fatal(err)
	}
	if n, err := s.StuckCount(ctx); err != nil || n != 22 {
		t.Errorf("StuckCount() = %d, %v; want 22", n, err)
	}
}
