package slotpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// releaseGate is a go-redis hook that holds every call of the release
// script (or, with only set, those carrying that token) before it is
// sent, reporting it on held, until open is closed.
type releaseGate struct {
	passHook
	held   chan struct{}
	open   chan struct{}
	only   string
	opened sync.Once
}

func newReleaseGate() *releaseGate {
	return &releaseGate{held: make(chan struct{}, 16), open: make(chan struct{})}
}

// pass lets the held releases (and every later one) go.
func (g *releaseGate) pass() { g.opened.Do(func() { close(g.open) }) }

// passHook is the part of a go-redis hook that lets dials and pipelines
// through.
type passHook struct{}

func (passHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (passHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *releaseGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && strings.EqualFold(fmt.Sprint(a[0]), "fcall") && a[1] == poolLibrary.fns[releaseOp] &&
			(g.only == "" || slices.Contains(a, any(g.only))) {
			g.held <- struct{}{}
			select {
			case <-g.open:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// lineUpStandby holds the only slot of p as w1 with w2 lined up as its
// standby (h0 held the slot while both queued; its release granted w1 and
// lined up w2), and returns w1's slot and w2's pending Acquire.
func lineUpStandby(ctx context.Context, t testing.TB, p *Pool) (*Slot, <-chan acquired) {
	t.Helper()
	h0 := mustAcquire(t, p, "h0")
	w1 := acquireAsync(ctx, p, "w1")
	waitFor(t, "w1 queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
	w2 := acquireAsync(ctx, p, "w2")
	waitFor(t, "w2 queued", func() bool { return len(mustSnapshot(t, p).Pending) == 2 })
	if err := h0.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	a := <-w1
	if a.err != nil {
		t.Fatalf("Acquire(w1) = %v", a.err)
	}
	return a.slot, w2
}

// A release whose slot has a standby waiting in the same process starts
// it before the release's round trip: the standby's Acquire returns while
// the release script has not even been sent, with the holder's record
// standing for it in Redis; the script then makes it the holder.
func TestStandbyStartsBeforeTheReleaseRoundTrip(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 10 * time.Second, CheckInterval: time.Minute})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s1, w2 := lineUpStandby(ctx, t, p)

	gate := newReleaseGate()
	p.rdb.(*redis.Client).AddHook(gate)
	var wg sync.WaitGroup
	var relErr error
	wg.Go(func() { relErr = s1.Release(ctx, Completed, "") })
	defer wg.Wait()
	defer gate.pass()
	select {
	case <-gate.held:
	case <-time.After(10 * time.Second):
		t.Fatal("release script never sent")
	}
	s2 := slotWithin(t, w2, 5*time.Second, "standby w2 not started while its holder's release was on its way to Redis")
	snap := mustSnapshot(t, p)
	if len(snap.Holders) != 1 || snap.Holders[0].Token != s1.Token {
		t.Errorf("holders before the release script ran = %+v, want only w1 (standing for w2)", snap.Holders)
	}
	gate.pass()
	wg.Wait()
	if relErr != nil {
		t.Fatalf("Release(w1) = %v", relErr)
	}
	snap = mustSnapshot(t, p)
	if got := holderJobs(snap); !cmp.Equal(got, []string{"w2"}) || len(snap.Pending) != 0 {
		t.Errorf("after the release: holders %v, pending %v; want [w2], none", got, pendingJobs(snap))
	}
	if snap.Holders[0].Token != s2.Token {
		t.Errorf("holder token %s, want w2's %s", snap.Holders[0].Token, s2.Token)
	}
	if err := s2.Renew(ctx); err != nil {
		t.Errorf("Renew(w2) = %v", err)
	}
	if err := s2.Release(ctx, Completed, ""); err != nil {
		t.Fatalf("Release(w2) = %v", err)
	}
	if snap := mustSnapshot(t, p); len(snap.Holders) != 0 || len(snap.Pending) != 0 {
		t.Errorf("at the end: %d holders, %d pending; want none", len(snap.Holders), len(snap.Pending))
	}
}

// slotWithin returns the slot an Acquire started by acquireAsync returns
// within d, failing the test with late if it does not.
func slotWithin(t testing.TB, ch <-chan acquired, d time.Duration, late string) *Slot {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Acquire = %v", a.err)
		}
		return a.slot
	case <-time.After(d):
		t.Fatal(late)
	}
	return nil
}

func holderJobs(s Snapshot) []string {
	out := []string{}
	for _, h := range s.Holders {
		out = append(out, h.JobID)
	}
	return out
}

// A standby that gives up at the moment its holder's release starts it
// either takes the slot or frees it once the release has run: nothing
// leaks, nothing is doubled.
func TestStandbyGivingUpNeverLeaks(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 10 * time.Second})[0]
	ctx := context.Background()
	for i := range 15 {
		h0 := mustAcquire(t, p, fmt.Sprint("h0-", i))
		w1 := acquireAsync(ctx, p, fmt.Sprint("w1-", i))
		waitFor(t, "w1 queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
		wctx, wcancel := context.WithCancel(ctx)
		w2 := acquireAsync(wctx, p, fmt.Sprint("w2-", i))
		waitFor(t, "w2 queued", func() bool { return len(mustSnapshot(t, p).Pending) == 2 })
		if err := h0.Release(ctx, Completed, ""); err != nil {
			t.Fatal(err)
		}
		a := <-w1
		if a.err != nil {
			t.Fatal(a.err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := a.slot.Release(ctx, Completed, ""); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			time.Sleep(time.Duration(i*100) * time.Microsecond)
			wcancel()
		})
		wg.Wait()
		if b := <-w2; b.err == nil {
			if err := b.slot.Release(ctx, Completed, ""); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(b.err, context.Canceled) {
			t.Fatalf("Acquire(w2-%d) = %v", i, b.err)
		}
		if s := mustSnapshot(t, p); len(s.Holders) != 0 || len(s.Pending) != 0 {
			t.Fatalf("round %d: holders %v, pending %v after the race; want none", i, holderJobs(s), pendingJobs(s))
		}
	}
}

// envStandbyPool names the pool TestStandbyProcess joins when the test
// binary is re-executed as a process that starts a standby and dies.
const envStandbyPool = "ORDERFLOW_SLOTPOOL_TEST_STANDBY_POOL"

// TestStandbyProcess is not a test of its own:
// TestKilledBetweenStandbyStartAndRelease re-executes the test binary to
// run it as a worker process whose holder's release starts the standby in
// process and never reaches Redis (held by a hook) until it is killed.
func TestStandbyProcess(t *testing.T) {
	name := os.Getenv(envStandbyPool)
	if name == "" {
		t.Skip("runs only as the process of TestKilledBetweenStandbyStartAndRelease")
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	p := New(rdb, Options{Name: name, Capacity: 1, Lease: time.Second, CheckInterval: 200 * time.Millisecond})
	ctx := context.Background()
	s1, w2 := lineUpStandby(ctx, t, p)
	go s1.KeepAlive(ctx, nil)
	gate := newReleaseGate()
	rdb.AddHook(gate)
	go func() { _ = s1.Release(ctx, Completed, "") }()
	<-gate.held
	a := <-w2
	if a.err != nil {
		fmt.Println("ERROR", a.err)
		os.Exit(2)
	}
	fmt.Println("STARTED", s1.Token, a.slot.Token)
	select {}
}

// A process killed after its release started the slot's standby and
// before the release reached Redis leaves the holder recorded (standing
// for the standby), never more than N holders, and its slot comes back
// once the leases run out.
func TestKilledBetweenStandbyStartAndRelease(t *testing.T) {
	const lease = time.Second
	p := replicas(t, 1, Options{Capacity: 1, Lease: lease, CheckInterval: 200 * time.Millisecond})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, line := startProcess(ctx, t, "TestStandbyProcess", envStandbyPool, p.Name())
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "STARTED" {
		t.Fatalf("standby process said %q; want STARTED <holder> <standby>", line)
	}
	holder, standby := f[1], f[2]
	s := mustSnapshot(t, p)
	if len(s.Holders) != 1 || s.Holders[0].Token != holder {
		t.Errorf("holders with the standby started = %+v, want only the holder %s", s.Holders, holder)
	}
	if len(s.Pending) != 1 || s.Pending[0].JobID != "w2" {
		t.Errorf("pending with the standby %s started = %+v, want only w2", standby, s.Pending)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	runJanitors(t, p)

	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := mustSnapshot(t, p); len(s.Holders) > 1 {
				t.Errorf("%d holders after the kill, want at most 1", len(s.Holders))
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 2*lease+10*time.Second)
	defer wcancel()
	next, err := p.Acquire(wctx, "next")
	close(stop)
	sampler.Wait()
	if err != nil {
		t.Fatalf("Acquire after the process was killed = %v", err)
	}
	t.Logf("slot granted again %v after SIGKILL (lease %v)", time.Since(killed).Round(time.Millisecond), lease)
	if s := mustSnapshot(t, p); len(s.Holders) != 1 || s.Holders[0].JobID != "next" {
		t.Errorf("holders = %+v, want only next", s.Holders)
	}
	if err := next.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead standby gone", func() bool {
		s := mustSnapshot(t, p)
		return len(s.Pending) == 0 && len(s.Holders) == 0
	})
	n, err := p.rdb.Exists(ctx, p.keys[keyStandby], p.keys[keyGroupHeld]).Result()
	if err != nil || n != 0 {
		t.Errorf("standby and group-held keys: %d exist (%v) after the run, want none", n, err)
	}
}

// A standby that takes its holder's slot as the last waiter leaves no
// fairness state behind: the queue is empty, so the virtual times and the
// tags kept for idle groups are forgotten, as when a queued waiter is the
// last to go.
func TestLastWaiterTakingOverAsStandbyLeavesNoFairnessState(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 10 * time.Second})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	take := func(got <-chan acquired) *Slot {
		t.Helper()
		select {
		case a := <-got:
			if a.err != nil {
				t.Fatal(a.err)
			}
			return a.slot
		case <-ctx.Done():
			t.Fatal("waiter not granted")
			return nil
		}
	}
	release := func(s *Slot) {
		t.Helper()
		if err := s.Release(ctx, Completed, ""); err != nil {
			t.Fatal(err)
		}
	}
	a := mustAcquire(t, p, "a")
	gotB := acquireAsync(ctx, p, "b")
	waitFor(t, "b queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
	gotC := acquireAsync(ctx, p, "c")
	waitFor(t, "c queued", func() bool { return len(mustSnapshot(t, p).Pending) == 2 })
	release(a) // grants b and lines up c as b's standby
	b := take(gotB)
	release(b) // c takes over as the last waiter
	release(take(gotC))

	if s := mustSnapshot(t, p); len(s.Holders) != 0 || len(s.Pending) != 0 {
		t.Fatalf("%d holders, %d pending after the run; want 0, 0", len(s.Holders), len(s.Pending))
	}
	for _, k := range []int{keyQueue, keyPendingMeta, keyHoldMeta, keyActiveHigh, keyActiveNormal, keyVirtualTags, keyGroupHeld, keyStandby} {
		if n, err := p.rdb.Exists(ctx, p.keys[k]).Result(); err != nil || n != 0 {
			t.Errorf("key %s exists (%d, %v) after the run", p.keys[k], n, err)
		}
	}
}

// pollGrantHook is a go-redis hook that runs then once, when a re-check
// first answers that its waiter was granted, before that answer reaches
// the waiter.
type pollGrantHook struct {
	passHook
	once sync.Once
	then func()
}

func (h *pollGrantHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err != nil || len(a) < 2 || !strings.EqualFold(fmt.Sprint(a[0]), "fcall") || a[1] != poolLibrary.fns[pollOp] {
			return err
		}
		if c, ok := cmd.(*redis.Cmd); ok {
			if v, ok := c.Val().([]any); ok && len(v) > 0 && v[0] == int64(1) {
				h.once.Do(h.then)
			}
		}
		return err
	}
}

// A standby that learns of its grant from its own re-check (its grant
// message lost) while a release of its process starts it as the standby
// of the slot it stood by is granted once: its holder's release names
// it, so its own release waits for that release's script, which would
// otherwise find it neither waiting nor holding and grant it again, to a
// job that has already ended.
func TestStandbyGrantedByItsRecheckIsNotGrantedAgain(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 10 * time.Second, CheckInterval: 50 * time.Millisecond})
	p, q := pools[0], pools[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s1, w2 := lineUpStandby(ctx, t, p)

	// Lose p's grant messages from here on.
	p.notify.mu.Lock()
	ps := p.notify.ps
	p.notify.mu.Unlock()
	if err := ps.Close(); err != nil {
		t.Fatal(err)
	}

	gate := newReleaseGate()
	gate.only = s1.Token
	defer gate.pass()
	var wg sync.WaitGroup
	defer wg.Wait()
	var rel1 error
	c := p.rdb.(*redis.Client)
	c.AddHook(gate)
	c.AddHook(&pollGrantHook{then: func() {
		// w1 ends while w2's grant is on its way back to it.
		wg.Go(func() { rel1 = s1.Release(ctx, Completed, "") })
		select {
		case <-gate.held:
		case <-time.After(10 * time.Second):
			t.Error("w1's release script never sent")
		}
	}})

	// Another replica raises N: the pool makes the standby w2 a holder.
	if err := q.SetCapacity(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s2 := slotWithin(t, w2, 10*time.Second, "w2 never granted")
	// w2's job ends at once; its release goes first unless it waits for
	// w1's, still held back here.
	rel2 := make(chan error, 1)
	go func() { rel2 <- s2.Release(ctx, Completed, "") }()
	var err2 error
	waited := false
	select {
	case err2 = <-rel2:
	case <-time.After(500 * time.Millisecond):
		waited = true
	}
	gate.pass()
	wg.Wait()
	if waited {
		err2 = <-rel2
	}
	if rel1 != nil || err2 != nil {
		t.Fatalf("Release(w1) = %v, Release(w2) = %v", rel1, err2)
	}
	if snap := mustSnapshot(t, p); len(snap.Holders) != 0 || len(snap.Pending) != 0 {
		t.Errorf("after both released: holders %v, pending %v; want none", holderJobs(snap), pendingJobs(snap))
	}
}
