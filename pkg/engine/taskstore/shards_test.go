package taskstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// hashTag is the part of key Redis Cluster hashes: the text between the
// first "{" and the next "}", or the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// entrySets returns, for every key under prefix holding member in a sorted
// set, the key.
func entrySets(ctx context.Context, t *testing.T, rdb *redis.Client, prefix, member string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(ctx, 0, prefix+":{outbox*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if err := rdb.ZScore(ctx, k, member).Err(); err == nil {
			out = append(out, k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestOutboxAndRepairEntriesSpreadOverHashTags: one hash tag lives on one
// master of a Redis Cluster, so the outbox and repair entries of many
// tasks must not all share one tag, while a task's outbox entry and its
// repair entry share theirs (one script adds both).
func TestOutboxAndRepairEntriesSpreadOverHashTags(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, RepairGrace: time.Hour})
	tags := map[string]bool{}
	for range 64 {
		task := newTask(t, "")
		if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), time.Minute); err != nil {
			t.Fatal(err)
		}
		keys := entrySets(ctx, t, rdb, prefix, "alice\n"+task.GetTaskId())
		if len(keys) != 2 {
			t.Fatalf("task %s has entries in %v, want an outbox and a repair set", task.GetTaskId(), keys)
		}
		if hashTag(keys[0]) != hashTag(keys[1]) {
			t.Errorf("task %s: outbox and repair entries in %v, want one hash tag", task.GetTaskId(), keys)
		}
		tags[hashTag(keys[0])] = true
	}
	if len(tags) < 4 {
		t.Errorf("the entries of 64 tasks use %d hash tags (%v), want them spread over several", len(tags), tags)
	}
}

// TestSweepsFindDueEntriesInEveryShard: a claim of the outbox and of the
// repair set hands out every due entry, whichever shard it is in, once.
func TestSweepsFindDueEntriesInEveryShard(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	const grace = 30 * time.Millisecond
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, RepairGrace: grace})
	want := map[string]bool{}
	for range 64 {
		task := newTask(t, "")
		if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job-"+task.GetTaskId()), grace); err != nil {
			t.Fatal(err)
		}
		want[task.GetTaskId()] = true
	}
	time.Sleep(3 * grace)
	outbox, err := s.OutboxClaim(ctx, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range outbox {
		if got[e.TaskID] || !want[e.TaskID] || string(e.Job) != "job-"+e.TaskID {
			t.Errorf("OutboxClaim() handed out %+v (again, unknown or with another job)", e)
		}
		got[e.TaskID] = true
	}
	if len(got) != len(want) {
		t.Errorf("OutboxClaim() handed out %d of %d due entries", len(got), len(want))
	}
	if again, err := s.OutboxClaim(ctx, 100, time.Minute); err != nil || len(again) != 0 {
		t.Errorf("OutboxClaim() again = %d entries, %v; want none until the retry", len(again), err)
	}
	repair, err := s.RepairClaim(ctx, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]bool{}
	for _, e := range repair {
		if got[e.TaskID] || !want[e.TaskID] || e.Repairs != 1 {
			t.Errorf("RepairClaim() handed out %+v (again, unknown or not its first repair)", e)
		}
		got[e.TaskID] = true
	}
	if len(got) != len(want) {
		t.Errorf("RepairClaim() handed out %d of %d due entries", len(got), len(want))
	}
	// Done and RepairDone find each entry in its shard.
	for _, e := range outbox {
		if err := s.OutboxDone(ctx, e.Member, e.TaskID); err != nil {
			t.Fatal(err)
		}
		if err := s.RepairDone(ctx, e.Member, e.TaskID); err != nil {
			t.Fatal(err)
		}
		if keys := entrySets(ctx, t, rdb, prefix, e.Member+"\n"+e.TaskID); len(keys) != 0 {
			t.Errorf("task %s still has entries in %v after OutboxDone and RepairDone", e.TaskID, keys)
		}
	}
}

// TestSweepsDrainTheSingleTagSetsOfEarlierVersions: entries an earlier
// version left in the single-tag sets (a rolling upgrade) are still
// republished and repaired, and leave those sets once handled.
func TestSweepsDrainTheSingleTagSetsOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, RepairGrace: time.Hour})
	legacyOutbox, legacyRepair := prefix+":{outbox}", prefix+":{outbox}:repair"
	past := float64(time.Now().Add(-time.Minute).UnixMilli())
	var tasks []string
	for i := range 5 {
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, "bob", task, []byte("old-job")); err != nil {
			t.Fatal(err)
		}
		m := "bob\n" + task.GetTaskId()
		if i < 3 {
			rdb.ZAdd(ctx, legacyOutbox, redis.Z{Score: past, Member: m})
		}
		rdb.ZAdd(ctx, legacyRepair, redis.Z{Score: past, Member: m})
		tasks = append(tasks, task.GetTaskId())
	}
	outbox, err := s.OutboxClaim(ctx, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range outbox {
		got = append(got, e.TaskID)
		if err := s.OutboxDone(ctx, e.Member, e.TaskID); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(tasks[:3])); !slices.Equal(got, want) {
		t.Errorf("OutboxClaim() with entries of an earlier version = %v, want %v", got, want)
	}
	if n := rdb.ZCard(ctx, legacyOutbox).Val(); n != 0 {
		t.Errorf("single-tag outbox holds %d entries after they were republished and done, want 0", n)
	}
	repair, err := s.RepairClaim(ctx, 100, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, e := range repair {
		got = append(got, e.TaskID)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(tasks)); !slices.Equal(got, want) {
		t.Errorf("RepairClaim() with entries of an earlier version = %v, want %v", got, want)
	}
	// The next look at each (after a doubled retry) and RepairDone find
	// the entries where the claim put them.
	time.Sleep(150 * time.Millisecond)
	repair, err = s.RepairClaim(ctx, 100, 50*time.Millisecond)
	if err != nil || len(repair) != len(tasks) {
		t.Fatalf("RepairClaim() after the retry = %d entries, %v; want %d", len(repair), err, len(tasks))
	}
	for _, e := range repair {
		if e.Repairs != 2 {
			t.Errorf("RepairClaim() after the retry = %+v, want its second repair", e)
		}
		if err := s.RepairDone(ctx, e.Member, e.TaskID); err != nil {
			t.Fatal(err)
		}
		if keys := entrySets(ctx, t, rdb, prefix, e.Member+"\n"+e.TaskID); len(keys) != 0 {
			t.Errorf("task %s still has entries in %v after RepairDone", e.TaskID, keys)
		}
	}
}
