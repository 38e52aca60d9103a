package slotpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// shardedReplicas returns n Sharded pools of k shards on the same name, each
// with its own Redis client (as separate replicas have), whose keys are
// deleted when the test ends.
func shardedReplicas(t testing.TB, n, k int, opts Options) []*Sharded {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	opts.Name = prefix + ":pool"
	t.Cleanup(func() { testenv.DeletePrefix(context.Background(), rdb, "{"+opts.Name) })
	out := make([]*Sharded, n)
	for i := range out {
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = NewSharded(c, opts, k)
	}
	return out
}

func runShardedJanitors(t testing.TB, pools ...*Sharded) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() { _ = p.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// jobOnShard returns a job id "<order>/1" whose order hashes to shard i.
func jobOnShard(t testing.TB, s *Sharded, i int) string {
	t.Helper()
	for n := range 10000 {
		job := fmt.Sprintf("order-%d/1", n)
		if h, _ := s.homeShard(job); h == i {
			return job
		}
	}
	t.Fatalf("no job id hashes to shard %d", i)
	return ""
}

func shardCapacities(t testing.TB, s *Sharded) []int {
	t.Helper()
	var caps []int
	for _, p := range s.Shards() {
		caps = append(caps, mustSnapshot(t, p).Capacity)
	}
	return caps
}

func TestShardedWithOneShardIsTheUnshardedPool(t *testing.T) {
	p := shardedReplicas(t, 1, 1, Options{Capacity: 2, Lease: 5 * time.Second})[0]
	ctx := context.Background()
	if got := p.Shards()[0].Name(); got != p.Name() {
		t.Fatalf("the one shard is named %q, want %q", got, p.Name())
	}
	slot, err := p.Acquire(ctx, "order-1/1")
	if err != nil {
		t.Fatal(err)
	}
	rdb, _ := testenv.Redis(t)
	if _, err := rdb.ZScore(ctx, "{"+p.Name()+"}:holders", slot.Token).Result(); err != nil {
		t.Errorf("holder not under {%s}:holders: %v", p.Name(), err)
	}
	if keys, _ := rdb.Keys(ctx, "{"+p.Name()+":s*").Result(); len(keys) != 0 {
		t.Errorf("shard keys %v, want none", keys)
	}
	if err := slot.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	if s, err := p.Snapshot(ctx); err != nil || s.Capacity != 2 || len(s.Shards) != 0 {
		t.Errorf("Snapshot() = %+v, %v; want capacity 2 and no shards listed", s, err)
	}
}

func TestShardedNeverGrantsMoreThanNAcrossShards(t *testing.T) {
	const capacity, shards, jobs = 5, 3, 150
	pools := shardedReplicas(t, 3, shards, Options{Capacity: capacity, Lease: 5 * time.Second})
	runShardedJanitors(t, pools...)

	var running, maxRunning, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for i := range jobs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := pools[i%len(pools)]
			c := Class{Group: fmt.Sprintf("m-%d", i%4)}
			if i%7 == 0 {
				c.Priority = High
			}
			s, err := p.AcquireClass(ctx, fmt.Sprintf("order-%d/%d", i/2, i%2+1), c)
			if err != nil {
				errs <- err
				return
			}
			notePeak(&maxRunning, running.Add(1))
			time.Sleep(time.Duration(rand.IntN(6)) * time.Millisecond)
			running.Add(-1)
			if err := s.Release(ctx, Completed, "ok"); err != nil {
				errs <- err
				return
			}
			done.Add(1)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := maxRunning.Load(); got > capacity {
		t.Errorf("max concurrent holders = %d, want ≤ %d", got, capacity)
	}
	if got := done.Load(); got != jobs {
		t.Errorf("jobs done = %d, want %d", got, jobs)
	}
	// Every shard ran jobs, and an order's jobs ran on one shard.
	shardOfOrder := map[string]int{}
	for i, p := range pools[0].Shards() {
		fin, err := p.Finished(context.Background(), jobs)
		if err != nil {
			t.Fatal(err)
		}
		if len(fin) == 0 {
			t.Errorf("shard %d ran no job", i)
		}
		for _, f := range fin {
			order, _, _ := strings.Cut(f.JobID, "/")
			if j, ok := shardOfOrder[order]; ok && j != i {
				t.Errorf("order %s ran on shards %d and %d", order, j, i)
			}
			shardOfOrder[order] = i
		}
	}
	fin, err := pools[1].Finished(context.Background(), 1000)
	if err != nil || len(fin) != jobs {
		t.Errorf("Finished() = %d jobs, %v; want %d", len(fin), err, jobs)
	}
	for i := 1; i < len(fin); i++ {
		if fin[i].Time.After(fin[i-1].Time) {
			t.Fatalf("Finished() not newest first at %d", i)
		}
	}
}

func TestShardedSetCapacityResplits(t *testing.T) {
	pools := shardedReplicas(t, 2, 3, Options{Capacity: 7, Lease: 5 * time.Second})
	p, other := pools[0], pools[1]
	ctx := context.Background()
	if err := p.SetCapacity(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(shardCapacities(t, p)); got != "[3 2 2]" {
		t.Errorf("shards of 7 = %s, want [3 2 2]", got)
	}
	if err := p.SetCapacity(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(shardCapacities(t, p)); got != "[4 3 3]" {
		t.Errorf("shards of 10 = %s, want [4 3 3]", got)
	}
	if s, err := other.Snapshot(ctx); err != nil || s.Capacity != 10 || len(s.Shards) != 3 {
		t.Errorf("Snapshot() = capacity %d, %d shards, %v; want 10 over 3", s.Capacity, len(s.Shards), err)
	}

	// Fewer slots than shards: the last shards get none, and a job whose
	// order hashes to one of them is queued on a shard that has a slot.
	if err := p.SetCapacity(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(shardCapacities(t, p)); got != "[1 1 0]" {
		t.Errorf("shards of 2 = %s, want [1 1 0]", got)
	}
	if err := other.Tick(ctx); err != nil { // the other replica learns of it
		t.Fatal(err)
	}
	job := jobOnShard(t, other, 2)
	if s := other.shardOf(job); s == 2 {
		t.Fatalf("job %s still routed to shard 2, which has no slot", job)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	slot, err := other.Acquire(actx, job)
	if err != nil {
		t.Fatalf("Acquire(%s) with its shard at 0 slots = %v, want a slot of another shard", job, err)
	}
	_ = slot.Release(ctx, Completed, "")

	// A pause: every shard at 0, the job waits on its own shard.
	if err := p.SetCapacity(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(shardCapacities(t, p)); got != "[0 0 0]" {
		t.Errorf("shards of 0 = %s, want [0 0 0]", got)
	}

	// The HTTP handler re-splits too.
	srv := httptest.NewServer(p.CapacityHandler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader(`{"capacity": 5}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT capacity = %d", resp.StatusCode)
	}
	if got := fmt.Sprint(shardCapacities(t, p)); got != "[2 2 1]" {
		t.Errorf("shards of 5 = %s, want [2 2 1]", got)
	}
}

func TestShardedSeedsNoSlotOnShardsBeyondN(t *testing.T) {
	p := shardedReplicas(t, 1, 4, Options{Capacity: 2, Lease: 5 * time.Second})[0]
	// First use of every shard, with no SetCapacity: the seeds add up to N.
	for i, sh := range p.Shards() {
		if err := sh.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []int{1, 1, 0, 0}[i]
		if got := mustSnapshot(t, sh).Capacity; got != want {
			t.Errorf("shard %d seeded with %d slots, want %d", i, got, want)
		}
	}
}

func TestShardedEvictRoutesToTheHoldersShard(t *testing.T) {
	pools := shardedReplicas(t, 2, 3, Options{Capacity: 3, Lease: time.Minute})
	worker, ops := pools[0], pools[1] // ops: another process's view, as the gateway's
	ctx := context.Background()
	var slots []*Slot
	for i := range 3 {
		s, err := worker.Acquire(ctx, jobOnShard(t, worker, i))
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	dead := slots[2]
	if err := ops.Evict(ctx, dead.Token, "holder known dead"); err != nil {
		t.Fatalf("Evict() = %v", err)
	}
	if err := dead.Renew(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("Renew() of the evicted holder = %v, want ErrLost", err)
	}
	for _, s := range slots[:2] {
		if err := s.Renew(ctx); err != nil {
			t.Errorf("Renew() of another holder = %v", err)
		}
	}
	fin, err := ops.Finished(ctx, 5)
	if err != nil || len(fin) != 1 || fin[0].JobID != dead.JobID || fin[0].Detail != "holder known dead" {
		t.Errorf("Finished() = %+v, %v; want the evicted job with the reason", fin, err)
	}
	if got := mustSnapshot(t, worker.Shards()[2]).Holders; len(got) != 0 {
		t.Errorf("shard 2 holders after Evict = %+v, want none", got)
	}
	if err := ops.Evict(ctx, dead.Token, "again"); !errors.Is(err, ErrLost) {
		t.Errorf("Evict() twice = %v, want ErrLost", err)
	}
	if err := ops.Evict(ctx, "no-such-token", "x"); !errors.Is(err, ErrLost) {
		t.Errorf("Evict(unknown) = %v, want ErrLost", err)
	}
}

func TestShardedSnapshotSumsShards(t *testing.T) {
	pools := shardedReplicas(t, 2, 2, Options{Capacity: 2, Lease: time.Minute, GroupCap: 3})
	p, view := pools[0], pools[1]
	ctx := context.Background()
	if err := p.SetCapacity(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := p.SetFairness(ctx, 3, 5); err != nil {
		t.Fatal(err)
	}
	if err := p.SetWeight(ctx, "m-1", 3); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		for n := range 2 {
			job := jobOnShard(t, p, i)
			job = strings.TrimSuffix(job, "/1") + fmt.Sprintf("/%d", n+1)
			if _, err := p.AcquireClass(ctx, job, Class{Group: "m-1"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Shard 0 is full; a waiter of another group queues there.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := jobOnShard(t, p, 0)
	go func() { _, _ = p.AcquireClass(wctx, waiter, Class{Group: "m-2", Priority: High}) }()
	waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, p.Shards()[0]).Pending) == 1 })

	s, err := view.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Capacity != 4 || len(s.Holders) != 4 || len(s.Pending) != 1 {
		t.Errorf("Snapshot() capacity %d, %d holders, %d pending; want 4, 4, 1", s.Capacity, len(s.Holders), len(s.Pending))
	}
	if s.GroupCap != 4 || s.StarveAfter != 5 {
		t.Errorf("Snapshot() groupCap %d, starveAfter %d; want 4 (2 per shard) and 5", s.GroupCap, s.StarveAfter)
	}
	for i := 1; i < len(s.Holders); i++ {
		if s.Holders[i].LeaseUntil.Before(s.Holders[i-1].LeaseUntil) {
			t.Errorf("holders not sorted by lease deadline: %+v", s.Holders)
		}
	}
	want := map[string]GroupState{
		"m-1": {Group: "m-1", Weight: 3, Holding: 4},
		"m-2": {Group: "m-2", Weight: 1, Waiting: 1, WaitingHigh: 1},
	}
	for _, g := range s.Groups {
		w, ok := want[g.Group]
		g.OldestWait = 0
		if !ok || g != w {
			t.Errorf("group %+v, want %+v", g, w)
		}
		delete(want, g.Group)
	}
	if len(want) != 0 {
		t.Errorf("groups missing: %v", want)
	}
	if len(s.Shards) != 2 || s.Shards[0].InUse != 2 || s.Shards[0].Waiting != 1 || s.Shards[1].InUse != 2 ||
		s.Shards[1].Pool != p.Name()+":s1" {
		t.Errorf("Shards = %+v", s.Shards)
	}
	// The per-shard cap: m-1 holds 2 on shard 1, its cap there.
	if got := mustSnapshot(t, p.Shards()[1]).GroupCap; got != 2 {
		t.Errorf("shard group cap = %d, want ⌈3 ÷ 2⌉ = 2", got)
	}

	// The handler serves the sums.
	srv := httptest.NewServer(view.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "?finished=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Pool   string       `json:"pool"`
		InUse  int          `json:"inUse"`
		Shards []ShardState `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Pool != p.Name() || body.InUse != 4 || len(body.Shards) != 2 {
		t.Errorf("GET = %+v, %v; want pool %s, 4 in use, 2 shards", body, err, p.Name())
	}
}

func TestShardSplits(t *testing.T) {
	cases := []struct {
		n, k int
		want string
	}{
		{7, 3, "[3 2 2]"}, {6, 3, "[2 2 2]"}, {3, 3, "[1 1 1]"}, {2, 3, "[1 1 0]"}, {0, 2, "[0 0]"}, {20000, 10, "[2000 2000 2000 2000 2000 2000 2000 2000 2000 2000]"},
	}
	for _, c := range cases {
		var got []int
		for i := range c.k {
			got = append(got, ShardCapacity(c.n, c.k, i))
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("ShardCapacity(%d over %d) = %v, want %s", c.n, c.k, got, c.want)
		}
	}
	for _, c := range []struct{ cap, k, want int }{{0, 4, 0}, {1, 4, 1}, {4, 4, 1}, {5, 4, 2}, {8, 3, 3}} {
		if got := ShardGroupCap(c.cap, c.k); got != c.want {
			t.Errorf("ShardGroupCap(%d, %d) = %d, want %d", c.cap, c.k, got, c.want)
		}
	}
}
