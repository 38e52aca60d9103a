package slotpool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// A release that grants the slot to a waiter of the same Pool hands it over
// itself: the waiter starts without the grant message. The subscription is
// cut and the re-check is a minute away, so only the hand-off can wake it.
func TestReleaseHandsSlotToLocalWaiter(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 10 * time.Second, CheckInterval: time.Minute})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder := mustAcquire(t, p, "holder")
	got := acquireAsync(ctx, p, "waiter")
	waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
	// With no subscription open yet the waiter is queued first and
	// subscribes after (its re-check covers a grant in between), so the
	// subscription may come a moment after the queue shows the waiter.
	var ps *redis.PubSub
	waitFor(t, "the waiter's grant subscription", func() bool {
		p.notify.mu.Lock()
		defer p.notify.mu.Unlock()
		ps = p.notify.ps
		return ps != nil && len(p.notify.waiters) == 1
	})
	if err := ps.Unsubscribe(ctx); err != nil { // every channel
		t.Fatal(err)
	}
	if err := holder.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("Acquire(waiter) = %v", a.err)
		}
		if a.slot.Since.IsZero() {
			t.Error("handed-over slot has no grant time")
		}
		if err := a.slot.Release(ctx, Completed, ""); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("local waiter not woken by the release that granted it")
	}
}

// Every grant wakes only its waiter's replica: a grant a replica makes to
// a waiter of its own (a slot free at Acquire, a release handing the slot
// on) is published nowhere, and a grant to another replica's waiter only
// on that replica's channel; so is a standby lined up by another replica
// for a holder (on the holder's channel). A pattern subscriber sees every
// message.
func TestGrantsWakeOnlyTheGranteesReplica(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 10 * time.Second})
	a, b := pools[0], pools[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spy := a.rdb.PSubscribe(ctx, a.channel+"*")
	defer spy.Close()
	if _, err := spy.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := spy.Channel()

	queue := func(p *Pool, job string, n int) <-chan acquired {
		got := acquireAsync(ctx, p, job)
		waitFor(t, job+" queued", func() bool { return len(mustSnapshot(t, p).Pending) == n })
		return got
	}
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
	holder := mustAcquire(t, a, "holder")
	onB := queue(b, "on-b", 1)
	onA := queue(a, "on-a", 2)
	onA2 := queue(a, "on-a-2", 3)
	release(holder) // a grants b's waiter
	sb := take(onB)
	release(sb) // b grants a's waiter and lines up a's other waiter as its standby
	sa := take(onA)
	release(sa) // a starts its own standby
	sa2 := take(onA2)
	release(sa2)

	type grant struct{ channel, token string }
	want := []grant{{a.channel + ":" + b.route, sb.Token}, {a.channel + ":" + a.route, sa.Token},
		{a.channel + ":" + a.route, "standby|" + sa.Token + "|" + sa2.Token}}
	var got []grant
	for drain := time.After(500 * time.Millisecond); ; {
		select {
		case m := <-msgs:
			tok := m.Payload
			if !strings.HasPrefix(tok, "standby|") {
				tok, _, _ = strings.Cut(tok, "|")
			}
			got = append(got, grant{m.Channel, tok})
			continue
		case <-drain:
		}
		break
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("grant messages (-want +got):\n%s", diff)
	}
}

// A waiter that gives up at the moment a local release hands it the slot
// either takes the slot or frees it: nothing leaks, nothing is doubled.
func TestLocalHandoffRacingCancelNeverLeaks(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 1, Lease: 10 * time.Second})[0]
	ctx := context.Background()
	var took, gaveUp int
	for i := range 40 {
		holder := mustAcquire(t, p, fmt.Sprint("holder-", i))
		wctx, wcancel := context.WithCancel(ctx)
		got := acquireAsync(wctx, p, fmt.Sprint("waiter-", i))
		waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := holder.Release(ctx, Completed, ""); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
			wcancel()
		})
		wg.Wait()
		a := <-got
		switch {
		case a.err == nil:
			took++
			if err := a.slot.Release(ctx, Completed, ""); err != nil {
				t.Fatal(err)
			}
		case errors.Is(a.err, context.Canceled):
			gaveUp++
		default:
			t.Fatalf("Acquire(waiter-%d) = %v", i, a.err)
		}
		if s := mustSnapshot(t, p); len(s.Holders) != 0 || len(s.Pending) != 0 {
			t.Fatalf("round %d: %d holders, %d pending after the race; want 0, 0", i, len(s.Holders), len(s.Pending))
		}
	}
	t.Logf("waiter took the slot %d times, gave up %d times", took, gaveUp)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := p.Acquire(cctx, "after")
	if err != nil {
		t.Fatalf("Acquire after the races = %v (a slot leaked)", err)
	}
	_ = s.Release(ctx, Completed, "")
}

// envHandoffPool names the pool TestHandoffProcess joins when the test
// binary is re-executed as a process handing its slot back and forth.
const envHandoffPool = "ORDERFLOW_SLOTPOOL_TEST_HANDOFF_POOL"

// TestHandoffProcess is not a test of its own: TestKilledDuringHandoffs
// re-executes the test binary to run it as a worker process in which two
// jobs hand one slot to each other in a loop until the process is killed.
func TestHandoffProcess(t *testing.T) {
	name := os.Getenv(envHandoffPool)
	if name == "" {
		t.Skip("runs only as the process of TestKilledDuringHandoffs")
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	p := New(rdb, Options{Name: name, Capacity: 1, Lease: time.Second, CheckInterval: 200 * time.Millisecond})
	ctx := context.Background()
	var once sync.Once
	for w := range 2 {
		go func() {
			for i := 0; ; i++ {
				s, err := p.Acquire(ctx, fmt.Sprintf("loop-%d-%d", w, i))
				if err != nil {
					fmt.Println("ERROR", err)
					os.Exit(2)
				}
				once.Do(func() { fmt.Println("LOOPING") })
				time.Sleep(time.Millisecond)
				if err := s.Release(ctx, Completed, ""); err != nil {
					fmt.Println("ERROR", err)
					os.Exit(2)
				}
			}
		}()
	}
	select {}
}

// A process killed while its jobs hand one slot to each other, at any point
// of a hand-off, leaves at most one holder; its slot comes back within the
// lease, and its waiter's place is dropped.
func TestKilledDuringHandoffs(t *testing.T) {
	const lease = time.Second
	p := replicas(t, 1, Options{Capacity: 1, Lease: lease, CheckInterval: 200 * time.Millisecond})[0]
	runJanitors(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, line := startProcess(ctx, t, "TestHandoffProcess", envHandoffPool, p.Name())
	if !strings.HasPrefix(line, "LOOPING") {
		t.Fatalf("hand-off process said %q; want LOOPING", line)
	}
	until := time.Now().Add(time.Duration(100+rand.IntN(300)) * time.Millisecond)
	for time.Now().Before(until) {
		if s := mustSnapshot(t, p); len(s.Holders) > 1 {
			t.Fatalf("%d holders while the process hands its slot around, want at most 1", len(s.Holders))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if s := mustSnapshot(t, p); len(s.Holders) > 1 {
		t.Fatalf("%d holders after the kill, want at most 1", len(s.Holders))
	}
	wctx, wcancel := context.WithTimeout(ctx, lease+10*time.Second)
	defer wcancel()
	next, err := p.Acquire(wctx, "next")
	if err != nil {
		t.Fatalf("Acquire after the hand-off process was killed = %v", err)
	}
	s := mustSnapshot(t, p)
	if len(s.Holders) != 1 || s.Holders[0].JobID != "next" {
		t.Errorf("holders after the kill = %+v, want only next", s.Holders)
	}
	if err := next.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead waiter dropped", func() bool {
		s := mustSnapshot(t, p)
		return len(s.Pending) == 0 && len(s.Holders) == 0
	})
}
