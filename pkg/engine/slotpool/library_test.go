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
	same := newLibrary("slotpool", prelude, batchable,
		enqueueOp, pollOp, cancelOp, renewOp, releaseOp, tickOp, setCapacityOp, setFairnessOp, setWeightOp, seedOp, batchOp)
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

// TestPoolLoadsItsLibraryWhereRedisLacksIt: a Redis that loses the
// library (restarted without persistence, FUNCTION FLUSH) while pools use
// it, alone and in batches, gets it back from the next call, which then
// succeeds: no acquire or release fails.
func TestPoolLoadsItsLibraryWhereRedisLacksIt(t *testing.T) {
	srv := testenv.StartRedis(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
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

	// Flush the functions again and again while 8 callers (3 slots, so
	// some wait and calls go in batches) acquire and release.
	stop := make(chan struct{})
	var flushes int
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			if err := admin.FunctionFlush(ctx).Err(); err != nil {
				t.Error(err)
				return
			}
			flushes++
		}
	})
	var errs []error
	var mu sync.Mutex
	var callers sync.WaitGroup
	for c := range 8 {
		callers.Go(func() {
			for i := range 50 {
				s, err := p.Acquire(ctx, fmt.Sprintf("job-%d-%d", c, i))
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
	close(stop)
	flusher.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("calls while the library was flushed %d times failed: %v", flushes, err)
	}
	if flushes < 5 {
		t.Errorf("the library was flushed %d times during the calls, want several", flushes)
	}
	snap, err := p.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Holders) != 0 || len(snap.Pending) != 0 {
		t.Errorf("after every job released: %d holders, %d pending, want none", len(snap.Holders), len(snap.Pending))
	}
}
