package slotpool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// scriptGate is a go-redis hook that counts the function calls answered
// (FCALL) and, while armed, holds the next ones before they are
// sent, reporting each on held, until open is closed.
type scriptGate struct {
	passHook
	sent  atomic.Int64
	armed atomic.Int64
	held  chan struct{}
	open  chan struct{}
}

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(fmt.Sprint(cmd.Args()[0])); name == "fcall" {
			g.sent.Add(1)
			if g.armed.Add(-1) >= 0 {
				g.held <- struct{}{}
				<-g.open
			}
			err := next(ctx, cmd)
			// An FCALL of a function Redis does not have yet is sent
			// again once the library is loaded: one call.
			if redis.HasErrorPrefix(err, "Function not found") {
				g.sent.Add(-1)
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// hold arms the gate for the next n script calls and returns a function
// that lets them go.
func (g *scriptGate) hold(n int) (release func()) {
	g.held, g.open = make(chan struct{}, n), make(chan struct{})
	g.armed.Store(int64(n))
	return sync.OnceFunc(func() { close(g.open) })
}

// batchQueued returns how many calls wait in p's batcher.
func batchQueued(p *Pool) int {
	p.batch.mu.Lock()
	defer p.batch.mu.Unlock()
	return len(p.batch.queue)
}

// The calls a Pool's callers make while maxInFlight of its script calls
// are on their way to Redis go together in one round trip when one comes
// back, and each gets its own answer: acquires granted in the batch, a
// release in the batch granting a waiter queued in the same batch.
func TestCallsMadeDuringARoundTripShareTheNext(t *testing.T) {
	const capacity = 6
	name := replicas(t, 1, Options{Capacity: capacity})[0].Name()
	gate := &scriptGate{}
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(gate)
	p := New(c, Options{Name: name, Capacity: capacity, Lease: 10 * time.Second, CheckInterval: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A release and a renewal on their way; four acquires made meanwhile.
	h := mustAcquire(t, p, "h")
	x := mustAcquire(t, p, "x")
	open := gate.hold(maxInFlight)
	defer open()
	relErr := make(chan error, 1)
	go func() { relErr <- h.Release(ctx, Completed, "") }()
	go func() { relErr <- x.Renew(ctx) }()
	for range maxInFlight {
		<-gate.held
	}
	before := gate.sent.Load()
	var waits []<-chan acquired
	for i := range 4 {
		waits = append(waits, acquireAsync(ctx, p, fmt.Sprintf("a%d", i)))
	}
	waitFor(t, "4 acquires queued", func() bool { return batchQueued(p) == 4 })
	open()
	for range 2 {
		if err := <-relErr; err != nil {
			t.Fatalf("Release(h), Renew(x) = %v", err)
		}
	}
	slots := map[string]*Slot{}
	for _, w := range waits {
		a := <-w
		if a.err != nil {
			t.Fatalf("Acquire() = %v", a.err)
		}
		slots[a.slot.JobID] = a.slot
	}
	if got := gate.sent.Load() - before; got != 1 {
		t.Errorf("script calls for 4 acquires made during a release's round trip = %d, want 1", got)
	}
	snap := mustSnapshot(t, p)
	got := holderJobs(snap)
	slices.Sort(got)
	if diff := cmp.Diff([]string{"a0", "a1", "a2", "a3", "x"}, got); diff != "" || len(snap.Pending) != 0 {
		t.Errorf("holders (-want +got):\n%s pending %d", diff, len(snap.Pending))
	}

	// Every slot held (capacity 5): renewals on their way; meanwhile an acquire (which
	// queues) and two releases (the first grants it).
	if err := p.SetCapacity(ctx, capacity-1); err != nil {
		t.Fatal(err)
	}
	open = gate.hold(maxInFlight)
	renewErr := make(chan error, 2)
	go func() { renewErr <- slots["a0"].Renew(ctx) }()
	go func() { renewErr <- x.Renew(ctx) }()
	for range maxInFlight {
		<-gate.held
	}
	before = gate.sent.Load()
	b := acquireAsync(ctx, p, "b")
	waitFor(t, "acquire queued", func() bool { return batchQueued(p) == 1 })
	var wg sync.WaitGroup
	for _, j := range []string{"a1", "a2"} {
		wg.Go(func() {
			if err := slots[j].Release(ctx, Completed, ""); err != nil {
				t.Errorf("Release(%s) = %v", j, err)
			}
		})
	}
	waitFor(t, "releases queued", func() bool { return batchQueued(p) == 3 })
	open()
	for range 2 {
		if err := <-renewErr; err != nil {
			t.Fatalf("Renew() = %v", err)
		}
	}
	wg.Wait()
	ab := <-b
	if ab.err != nil {
		t.Fatalf("Acquire(b) = %v", ab.err)
	}
	// The acquire's own poll may add a call after the batch.
	if got := gate.sent.Load() - before; got < 1 || got > 2 {
		t.Errorf("script calls for an acquire and 2 releases made during a renewal's round trip = %d, want 1 (2 with the acquire's re-check)", got)
	}
	snap = mustSnapshot(t, p)
	got = holderJobs(snap)
	slices.Sort(got)
	if diff := cmp.Diff([]string{"a0", "a3", "b", "x"}, got); diff != "" || len(snap.Pending) != 0 {
		t.Errorf("holders (-want +got):\n%s pending %d", diff, len(snap.Pending))
	}
}
