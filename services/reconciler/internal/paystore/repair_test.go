package paystore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// repairSets returns the repair sets under prefix (shards and the
// single-tag set) that hold code, on one Redis.
func repairSets(ctx context.Context, t *testing.T, rdb *redis.Client, prefix, code string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(ctx, 0, prefix+":{payrepair*", 100).Iterator()
	for iter.Next(ctx) {
		if err := rdb.ZScore(ctx, iter.Val(), code).Err(); err == nil {
			out = append(out, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// hashTag is the part of key Redis Cluster hashes.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TestRepairSetSpreadsOverHashTags: the repair entries of many payments do
// not all share one hash tag (one master of a Redis Cluster), and a claim
// hands out every due code, whichever shard it is in, once.
func TestRepairSetSpreadsOverHashTags(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	now := time.Now()
	tags := map[string]bool{}
	var want []string
	for i := range 64 {
		code := fmt.Sprintf("T%04d", i)
		if err := s.MarkCreating(ctx, code, now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		keys := repairSets(ctx, t, rdb, prefix, code)
		if len(keys) != 1 {
			t.Fatalf("code %s is in the repair sets %v, want one", code, keys)
		}
		tags[hashTag(keys[0])] = true
		want = append(want, code)
	}
	if len(tags) < 4 {
		t.Errorf("the repair entries of 64 payments use %d hash tags (%v), want them spread over several", len(tags), tags)
	}
	got, err := s.ClaimCreating(ctx, now, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("ClaimCreating() = %v, want every due code once %v", got, want)
	}
	if again, err := s.ClaimCreating(ctx, now, time.Minute, 100); err != nil || len(again) != 0 {
		t.Errorf("ClaimCreating() again = %v, %v; want none until the retry", again, err)
	}
	for _, code := range want {
		if err := s.DoneCreating(ctx, code); err != nil {
			t.Fatal(err)
		}
		if keys := repairSets(ctx, t, rdb, prefix, code); len(keys) != 0 {
			t.Errorf("code %s still in %v after DoneCreating", code, keys)
		}
	}
}

// TestRepairClaimsTheSingleTagSetOfEarlierVersions: codes an earlier
// version left in the single-tag repair set (a rolling upgrade) are still
// claimed when due, and move to their shard, where the next claim and
// DoneCreating find them.
func TestRepairClaimsTheSingleTagSetOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	legacy := prefix + ":{payrepair}"
	now := time.Now()
	due := []string{"OLD-1", "OLD-2", "OLD-3", "OLD-4", "OLD-5"}
	for _, code := range due {
		rdb.ZAdd(ctx, legacy, redis.Z{Score: float64(now.Add(-time.Minute).UnixMilli()), Member: code})
	}
	rdb.ZAdd(ctx, legacy, redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: "OLD-LATER"})
	got, err := s.ClaimCreating(ctx, now, time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, due) {
		t.Errorf("ClaimCreating() with codes of an earlier version = %v, want %v", got, due)
	}
	if left := rdb.ZRange(ctx, legacy, 0, -1).Val(); !slices.Equal(left, []string{"OLD-LATER"}) {
		t.Errorf("single-tag repair set after the claim = %v, want only the code not yet due", left)
	}
	for _, code := range due {
		if keys := repairSets(ctx, t, rdb, prefix, code); len(keys) != 1 || keys[0] != s.repairKey(code) {
			t.Errorf("claimed code %s is in %v, want its shard %s", code, keys, s.repairKey(code))
		}
	}
	// Claimed for the retry, then due again in its shard.
	if again, err := s.ClaimCreating(ctx, now, time.Second, 100); err != nil || len(again) != 0 {
		t.Errorf("ClaimCreating() before the retry = %v, %v; want none", again, err)
	}
	got, err = s.ClaimCreating(ctx, now.Add(2*time.Second), time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, due) {
		t.Errorf("ClaimCreating() after the retry = %v, want %v", got, due)
	}
	for _, code := range due {
		if err := s.DoneCreating(ctx, code); err != nil {
			t.Fatal(err)
		}
		if keys := repairSets(ctx, t, rdb, prefix, code); len(keys) != 0 {
			t.Errorf("code %s still in %v after DoneCreating", code, keys)
		}
	}
}

// TestRepairSetOnRedisCluster: on a Redis Cluster the repair entries of
// different shards live on different masters, and a claim (one script per
// shard, each declaring its one key) hands out the due codes of every
// shard and of the single-tag set of earlier versions.
func TestRepairSetOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	prefix := testenv.Prefix(t)
	s := New(rdb, prefix, time.Hour)
	now := time.Now()
	masters := map[string]bool{}
	var want []string
	for i := range 32 {
		code := fmt.Sprintf("C%04d", i)
		if err := s.MarkCreating(ctx, code, now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZScore(ctx, s.repairKey(code), code).Err(); err != nil {
			t.Fatalf("ZSCORE(%s, %s): %v", s.repairKey(code), code, err)
		}
		node, err := rdb.MasterForKey(ctx, s.repairKey(code))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
		want = append(want, code)
	}
	if len(masters) < 2 {
		t.Errorf("the repair entries of 32 payments are on %d master(s) %v, want several", len(masters), masters)
	}
	rdb.ZAdd(ctx, prefix+":{payrepair}", redis.Z{Score: float64(now.Add(-time.Minute).UnixMilli()), Member: "OLD-1"})
	want = append(want, "OLD-1")
	got, err := s.ClaimCreating(ctx, now, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ClaimCreating() on a cluster = %v, want %v", got, want)
	}
	for _, code := range want {
		if err := s.DoneCreating(ctx, code); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.ClaimCreating(ctx, now.Add(time.Hour), time.Minute, 100); err != nil || len(got) != 0 {
		t.Errorf("ClaimCreating() after DoneCreating = %v, %v; want none", got, err)
	}
}
