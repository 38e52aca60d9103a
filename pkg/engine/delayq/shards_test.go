package delayq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// TestJobsSpreadOverHashTags: one hash tag lives on one master of a Redis
// Cluster, so the jobs of one queue for a Cluster must not all share one
// tag.
func TestJobsSpreadOverHashTags(t *testing.T) {
	q, rdb, name := testQueue(t, Options{Cluster: true})
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	for i := range 64 {
		if err := q.Schedule(ctx, fmt.Sprintf("pay-%d", i), due, nil); err != nil {
			t.Fatal(err)
		}
	}
	tags := map[string]int{}
	keys, err := rdb.Keys(ctx, "{"+name+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "}:z:") {
			n, err := rdb.ZCard(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			tags[hashTag(k)] += int(n)
		}
	}
	total := 0
	for _, n := range tags {
		total += n
	}
	if total != 64 {
		t.Fatalf("the queue's due-time sets hold %d jobs, want 64", total)
	}
	if len(tags) < 4 {
		t.Errorf("64 jobs live under %d hash tags (%v), want them spread over several", len(tags), tags)
	}
	if n, err := q.Len(ctx); err != nil || n != 64 {
		t.Errorf("Len() = %d, %v; want 64", n, err)
	}
}

// TestJobsOfTheSingleTagLayoutStillFire: on a Redis Cluster, jobs an
// earlier version scheduled in the single-tag layout ("{<Name>}", a rolling upgrade) fire once, never
// early; rescheduling one moves it to its shard (it fires once, at the
// new time), cancelling one removes it, and the layout ends up empty.
func TestJobsOfTheSingleTagLayoutStillFire(t *testing.T) {
	q, rdb, _ := testQueue(t, Options{Cluster: true})
	ctx := context.Background()
	old := q.legacy // the keys and scripts of an earlier version's queue
	base := time.Now()
	due := map[string]time.Time{}
	for i := range 20 {
		id := fmt.Sprintf("old-%d", i)
		due[id] = base.Add(time.Duration(200+10*i) * time.Millisecond)
		if err := old.Schedule(ctx, id, due[id], []byte("p")); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Schedule(ctx, "old-cancelled", base.Add(300*time.Millisecond), nil); err != nil {
		t.Fatal(err)
	}
	if err := old.Schedule(ctx, "old-moved", base.Add(250*time.Millisecond), nil); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Len(ctx); err != nil || n != 22 {
		t.Errorf("Len() with 22 jobs in the single-tag layout = %d, %v; want 22", n, err)
	}
	if st, err := q.Lookup(ctx, "old-3"); err != nil || !st.Scheduled || !st.Due.Equal(time.UnixMilli(ceilMs(due["old-3"]))) {
		t.Errorf("Lookup(old-3) = %+v, %v; want it scheduled at %v", st, err, due["old-3"])
	}
	moved := base.Add(900 * time.Millisecond)
	if err := q.Schedule(ctx, "old-moved", moved, nil); err != nil {
		t.Fatal(err)
	}
	due["old-moved"] = moved
	if ok, err := q.Cancel(ctx, "old-cancelled"); err != nil || !ok {
		t.Errorf("Cancel(old-cancelled) = %v, %v; want true", ok, err)
	}

	var mu sync.Mutex
	count := map[string]int{}
	got := make(chan fired, 64)
	start(t, q, func(_ context.Context, j Job) error {
		mu.Lock()
		count[j.ID]++
		mu.Unlock()
		got <- fired{at: time.Now(), job: j}
		return nil
	})
	for range len(due) {
		f := recv(t, got, 5*time.Second)
		want, ok := due[f.job.ID]
		if !ok {
			t.Errorf("job %s fired, want it not to", f.job.ID)
			continue
		}
		if f.at.Before(want) {
			t.Errorf("job %s fired %v before its due time", f.job.ID, want.Sub(f.at))
		}
	}
	none(t, got, 500*time.Millisecond)
	mu.Lock()
	for id, c := range count {
		if c != 1 {
			t.Errorf("job %s fired %d times, want 1", id, c)
		}
	}
	mu.Unlock()
	if n, err := rdb.ZCard(ctx, old.key("run")).Result(); err != nil || n != 0 {
		t.Errorf("single-tag layout has %d running jobs (%v), want 0", n, err)
	}
	if n, err := rdb.Get(ctx, old.key("n")).Int64(); err != nil || n != 0 {
		t.Errorf("single-tag layout holds %d pending jobs (%v), want 0", n, err)
	}
	if n, err := q.Len(ctx); err != nil || n != 0 {
		t.Errorf("Len() after every job fired = %d, %v; want 0", n, err)
	}
}

// claimCounter is a go-redis hook that counts the claim scripts sent and
// the hash tags they were sent to.
type claimCounter struct {
	n    atomic.Int64
	mu   sync.Mutex
	tags map[string]int
}

func (c *claimCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *claimCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *claimCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *claimCounter) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 3 && cmd.Name() == "evalsha" && args[1] == claimScript.Hash() {
		c.n.Add(1)
		key, _ := args[3].(string)
		c.mu.Lock()
		c.tags[hashTag(key)]++
		c.mu.Unlock()
	}
}

// TestQueueOnOneRedisUsesOneHashTag: on a single Redis (not a Cluster)
// shards only cost, so a queue keeps every key under the one tag
// "{<Name>}" of earlier versions and claims once per poll.
func TestQueueOnOneRedisUsesOneHashTag(t *testing.T) {
	_, rdb, name := testQueue(t, Options{})
	client := newClient(t)
	claims := &claimCounter{tags: map[string]int{}}
	client.AddHook(claims)
	q := New(client, Options{Name: name})
	ctx := context.Background()
	if err := claimScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour)
	for i := range 64 {
		if err := q.Schedule(ctx, fmt.Sprintf("pay-%d", i), due, nil); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := rdb.Keys(ctx, "{"+name+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]bool{}
	for _, k := range keys {
		tags[hashTag(k)] = true
	}
	if len(tags) != 1 || !tags[name] {
		t.Errorf("the queue's keys %v live under hash tags %v, want only %q", keys, tags, name)
	}
	if n, err := rdb.Get(ctx, "{"+name+"}:n").Int64(); err != nil || n != 64 {
		t.Errorf("GET {%s}:n = %d, %v; want 64", name, n, err)
	}
	if n, err := q.Len(ctx); err != nil || n != 64 {
		t.Errorf("Len() = %d, %v; want 64", n, err)
	}

	// Nothing is due for an hour: the first poll is one claim of the one
	// tag (the script calls of one claim, see maxClaimRounds), and the
	// next waits for the 5 s re-check.
	stop := start(t, q, func(context.Context, Job) error { return nil })
	time.Sleep(time.Second)
	stop()
	claims.mu.Lock()
	defer claims.mu.Unlock()
	if n := claims.n.Load(); n < 1 || n > maxClaimRounds || len(claims.tags) != 1 || claims.tags[name] != int(n) {
		t.Errorf("an idle queue's first second sent %d claim script calls to hash tags %v, want 1 to %d, all to %q",
			n, claims.tags, maxClaimRounds, name)
	}
}
