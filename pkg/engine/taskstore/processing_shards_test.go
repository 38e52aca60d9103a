package taskstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// processingSets returns the processing index sets under prefix that hold
// member.
func processingSets(ctx context.Context, t *testing.T, rdb *redis.Client, prefix, member string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(ctx, 0, prefix+":{processing*", 100).Iterator()
	for iter.Next(ctx) {
		if err := rdb.ZScore(ctx, iter.Val(), member).Err(); err == nil {
			out = append(out, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestProcessingIndexSpreadsOverHashTags: the processing index entries of
// many tasks do not all share one hash tag (one master of a Redis
// Cluster), and the readers list and count them all, oldest first.
func TestProcessingIndexSpreadsOverHashTags(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clk})
	tags := map[string]bool{}
	var want []string
	for range 64 {
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, "alice", task, []byte("j")); err != nil {
			t.Fatal(err)
		}
		keys := processingSets(ctx, t, rdb, prefix, "alice\n"+task.GetTaskId())
		if len(keys) != 1 {
			t.Fatalf("task %s is in the processing index sets %v, want one", task.GetTaskId(), keys)
		}
		tags[hashTag(keys[0])] = true
		want = append(want, task.GetTaskId())
		clk.Advance(time.Second)
	}
	if len(tags) < 4 {
		t.Errorf("the processing index entries of 64 tasks use %d hash tags (%v), want them spread over several", len(tags), tags)
	}
	// Pages of 10 through every shard, oldest first.
	var got []string
	for off := 0; ; off += 10 {
		refs, total, err := s.Processing(ctx, off, 10)
		if err != nil {
			t.Fatal(err)
		}
		if total != 64 {
			t.Errorf("Processing(%d, 10) total = %d, want 64", off, total)
		}
		if len(refs) == 0 {
			break
		}
		for _, r := range refs {
			got = append(got, r.TaskID)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Processing() pages = %v, want every task oldest first %v", got, want)
	}
	counts, oldest, err := s.ProcessingByAge(ctx, []time.Duration{0, 30 * time.Second, time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(counts, []int64{64, 35, 0}) || !oldest.Equal(clk.Now().Add(-64*time.Second)) {
		t.Errorf("ProcessingByAge() = %v, %v; want [64 35 0], created 64s ago", counts, oldest)
	}
	for _, id := range want[:10] {
		if _, err := s.Finish(ctx, "alice", id, nil, succeed); err != nil {
			t.Fatal(err)
		}
		if keys := processingSets(ctx, t, rdb, prefix, "alice\n"+id); len(keys) != 0 {
			t.Errorf("finished task %s still in %v", id, keys)
		}
	}
	if counts, _, _ := s.ProcessingByAge(ctx, []time.Duration{0}); counts[0] != 54 {
		t.Errorf("ProcessingByAge() after 10 finished = %v, want [54]", counts)
	}
}

// TestProcessingIndexReadsTheSingleTagIndexOfEarlierVersions: entries an
// earlier version left in the single-tag index (a rolling upgrade) are
// still listed and counted; a reader moves those of tasks still
// PROCESSING to their shards, so they leave the index when the task
// finishes, and drops those of tasks that have finished.
func TestProcessingIndexReadsTheSingleTagIndexOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clk})
	legacy := prefix + ":{processing}"
	var ids []string
	for i := range 6 {
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, "bob", task, []byte("j")); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.GetTaskId())
		if i < 4 {
			// Created by an earlier version: its entry is in the
			// single-tag index only.
			m := "bob\n" + task.GetTaskId()
			rdb.ZRem(ctx, s.ProcessingKey(task.GetTaskId()), m)
			rdb.ZAdd(ctx, legacy, redis.Z{Score: float64(clk.Now().UnixMilli()), Member: m})
		}
		clk.Advance(time.Minute)
	}
	// One of them finished under the earlier version, which removed its
	// entry; another finished under this one (which removes it from its
	// shard only) before any reader looked.
	rdb.ZRem(ctx, legacy, "bob\n"+ids[0])
	if _, err := s.Finish(ctx, "bob", ids[0], nil, succeed); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, "bob", ids[1], nil, succeed); err != nil {
		t.Fatal(err)
	}
	refs, total, err := s.Processing(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range refs {
		got = append(got, r.TaskID)
	}
	if want := ids[1:]; total != 5 || !slices.Equal(got, want) {
		t.Errorf("Processing() = %v (total %d), want %v (total 5: the finished task's entry is dropped by readers)", got, total, want)
	}
	if n := rdb.ZCard(ctx, legacy).Val(); n != 0 {
		t.Errorf("single-tag index holds %d entries after a reader looked, want 0", n)
	}
	for _, id := range ids[2:4] {
		if keys := processingSets(ctx, t, rdb, prefix, "bob\n"+id); len(keys) != 1 || keys[0] != s.ProcessingKey(id) {
			t.Errorf("task %s of an earlier version is in %v after a reader looked, want its shard %s", id, keys, s.ProcessingKey(id))
		}
	}
	counts, oldest, err := s.ProcessingByAge(ctx, []time.Duration{0, 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(counts, []int64{4, 2}) || !oldest.Equal(clk.Now().Add(-4*time.Minute)) {
		t.Errorf("ProcessingByAge() = %v, %v; want [4 2], oldest created 4m ago", counts, oldest)
	}
	if _, err := s.Finish(ctx, "bob", ids[2], nil, succeed); err != nil {
		t.Fatal(err)
	}
	if counts, _, _ := s.ProcessingByAge(ctx, []time.Duration{0}); counts[0] != 3 {
		t.Errorf("ProcessingByAge() after an earlier version's task finished = %v, want [3]", counts)
	}
	// A reader that finds a finished task's entry drops it wherever it is.
	rdb.ZAdd(ctx, legacy, redis.Z{Score: float64(clk.Now().UnixMilli()), Member: "bob\n" + ids[2]})
	if ok, err := s.DropStale(ctx, "bob", ids[2]); ok || err != nil {
		t.Fatalf("DropStale(finished) = %v, %v", ok, err)
	}
	if keys := processingSets(ctx, t, rdb, prefix, "bob\n"+ids[2]); len(keys) != 0 {
		t.Errorf("DropStale left the finished task in %v", keys)
	}
}

// TestProcessingIndexOnRedisCluster: on a Redis Cluster the processing
// index entries of different shards live on different masters, and the
// readers see every shard and the single-tag index of earlier versions.
func TestProcessingIndexOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	prefix := testenv.Prefix(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clk})
	masters := map[string]bool{}
	var ids []string
	for range 32 {
		task := newTask(t, "")
		if _, _, err := s.CreateQueued(ctx, "carol", task, []byte("j"), time.Minute); err != nil {
			t.Fatal(err)
		}
		id := task.GetTaskId()
		ids = append(ids, id)
		if err := rdb.ZScore(ctx, s.ProcessingKey(id), "carol\n"+id).Err(); err != nil {
			t.Fatalf("ZSCORE(%s) of task %s: %v", s.ProcessingKey(id), id, err)
		}
		node, err := rdb.MasterForKey(ctx, s.ProcessingKey(id))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
		clk.Advance(time.Second)
	}
	if len(masters) < 2 {
		t.Errorf("the processing index entries of 32 tasks are on %d master(s) %v, want several", len(masters), masters)
	}
	// A task of an earlier version, indexed in the single-tag index.
	old := newTask(t, "")
	if _, _, err := s.Create(ctx, "carol", old, []byte("j")); err != nil {
		t.Fatal(err)
	}
	rdb.ZRem(ctx, s.ProcessingKey(old.GetTaskId()), "carol\n"+old.GetTaskId())
	rdb.ZAdd(ctx, prefix+":{processing}", redis.Z{Score: float64(clk.Now().Add(-time.Hour / 2).UnixMilli()), Member: "carol\n" + old.GetTaskId()})
	refs, total, err := s.Processing(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if total != 33 || len(refs) != 33 || refs[0].TaskID != old.GetTaskId() {
		t.Fatalf("Processing() = %d refs (total %d), first %+v; want 33, the earlier version's task first", len(refs), total, refs[0])
	}
	for _, id := range ids[:8] {
		if _, err := s.Finish(ctx, "carol", id, nil, succeed); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Finish(ctx, "carol", old.GetTaskId(), nil, succeed); err != nil {
		t.Fatal(err)
	}
	counts, _, err := s.ProcessingByAge(ctx, []time.Duration{0})
	if err != nil || counts[0] != 24 {
		t.Errorf("ProcessingByAge() after 9 finished = %v, %v; want [24]", counts, err)
	}
	if _, err := s.Finish(ctx, "carol", ids[8], nil, func(t *taskv1.Task) { t.Status = taskv1.TaskStatus_TASK_STATUS_FAILED }); err != nil {
		t.Fatal(err)
	}
	if _, total, err := s.Processing(ctx, 0, 5); err != nil || total != 23 {
		t.Errorf("Processing() total after 10 finished = %d, %v; want 23", total, err)
	}
}
