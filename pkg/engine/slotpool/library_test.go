package slotpool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestLibraryNameFollowsItsCode: two builds of the library with the same
// code share a name (replicas of one version load it once), a change to
// any function's code gives another (two versions side by side each call
// their own), and every function is named after its library.
func TestLibraryNameFollowsItsCode(t *testing.T) {
	same := newLibrary("slotpool", prelude, batchable, poolOps...)
	if same.name != poolLibrary.name || same.code != poolLibrary.code {
		t.Errorf("the same code built twice: names %s and %s", same.name, poolLibrary.name)
	}
	changed := *pollOp
	changed.body = strings.Replace(changed.body, "return result(0, tok)", "return result(0, tok) -- changed", 1)
	other := newLibrary("slotpool", prelude, batchable, enqueueOp, &changed)
	if other.name == poolLibrary.name {
		t.Errorf("a library with a changed function kept the name %s", other.name)
	}
	if !strings.HasPrefix(poolLibrary.code, "#!lua name="+poolLibrary.name+"\n") {
		t.Errorf("the library's code starts %q, want its name", poolLibrary.code[:40])
	}
	for o, fn := range poolLibrary.fns {
		if fn != poolLibrary.name+"_"+o.name {
			t.Errorf("function of %s named %s", o.name, fn)
		}
	}
}

// missingCounter is a go-redis hook that counts, per function, the FCALLs
// Redis answered "Function not found".
type missingCounter struct {
	passHook
	mu      sync.Mutex
	missing map[string]int
}

func (m *missingCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "fcall" && redis.HasErrorPrefix(err, "Function not found") {
			m.mu.Lock()
			m.missing[fmt.Sprint(a[1])]++
			m.mu.Unlock()
		}
		return err
	}
}

// TestPoolLoadsItsLibraryWhereRedisLacksIt: a Redis that lost the library
// (restarted without persistence, FUNCTION FLUSH) gets it back from the
// calls that find it missing, alone or in batches, several at once, and
// those calls then succeed: no acquire or release fails.
func TestPoolLoadsItsLibraryWhereRedisLacksIt(t *testing.T) {
	srv := testenv.StartRedis(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	counter := &missingCounter{missing: map[string]int{}}
	rdb.AddHook(counter)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	loaded := func() bool {
		libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: poolLibrary.name}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(libs) == 1
	}
	if loaded() {
		t.Fatal("a new Redis has the library")
	}
	p := New(rdb, Options{Name: "lib", Capacity: 3, Lease: time.Minute})
	s, err := p.Acquire(ctx, "first")
	if err != nil {
		t.Fatalf("first Acquire on a Redis without the library = %v", err)
	}
	if err := s.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	if !loaded() {
		t.Fatal("the first call did not load the library")
	}

	flush := func() {
		if err := admin.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// A batch that finds the library missing loads it and is sent again:
	// every call in it gets its answer.
	flush()
	batch := []*call{
		{o: enqueueOp, args: []any{"b1.t1", "b1", 60000, 60000, Normal.tier(), "g"}, done: make(chan struct{})},
		{o: enqueueOp, args: []any{"b1.t2", "b2", 60000, 60000, Normal.tier(), "g"}, done: make(chan struct{})},
		{o: releaseOp, args: []any{"b1.t1", int(Completed), ""}, done: make(chan struct{})},
		{o: releaseOp, args: []any{"b1.t2", int(Completed), ""}, done: make(chan struct{})},
	}
	p.batch.inflight++ // as run does before it sends
	p.send(ctx, batch)
	for i, c := range batch {
		if c.err != nil {
			t.Fatalf("call %d of a batch sent to a Redis without the library: %v", i, c.err)
		}
		if v, ok := c.v.([]any); !ok || v[0] != int64(1) {
			t.Errorf("call %d (%s) of the batch answered %v, want status 1", i, c.o.name, c.v)
		}
	}
	counter.mu.Lock()
	if counter.missing[poolLibrary.fns[batchOp]] != 1 {
		t.Errorf("batch calls that found the library missing: %v, want 1", counter.missing)
	}
	counter.mu.Unlock()

	// Each round, the functions are flushed while no call is out; then 8
	// callers (3 slots, so some wait and calls go in batches) start at once
	// and acquire and release, several finding the library missing at once.
	for round := range 5 {
		flush()
		var mu sync.Mutex
		var errs []error
		var callers sync.WaitGroup
		for c := range 8 {
			callers.Go(func() {
				for i := range 20 {
					s, err := p.Acquire(ctx, fmt.Sprintf("job-%d-%d-%d", round, c, i))
					if err == nil {
						err = s.Release(ctx, Completed, "")
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		callers.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: calls after the library was flushed failed: %v", round, err)
		}
		if !loaded() {
			t.Fatalf("round %d: the library is not loaded after the calls", round)
		}
	}
	counter.mu.Lock()
	if counter.missing[poolLibrary.fns[enqueueOp]] < 5 {
		t.Errorf("enqueues that found the library missing: %v, want one or more a round", counter.missing)
	}
	counter.mu.Unlock()
	snap, err := p.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Holders) != 0 || len(snap.Pending) != 0 {
		t.Errorf("after every job released: %d holders, %d pending, want none", len(snap.Holders), len(snap.Pending))
	}
}
