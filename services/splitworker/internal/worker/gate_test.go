package worker

import (
	"context"
	"testing"
	"time"
)

// entered starts enter in a goroutine and reports its result once the
// call is admitted or queued, so that calls queue in the order made.
func entered(g *gate, ctx context.Context, member string) <-chan error {
	g.mu.Lock()
	before := g.calls
	g.mu.Unlock()
	ch := make(chan error, 1)
	go func() { ch <- g.enter(ctx, member, 0) }()
	for {
		g.mu.Lock()
		n := g.calls
		g.mu.Unlock()
		if n > before {
			return ch
		}
		time.Sleep(time.Millisecond)
	}
}

func pending(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("admitted (%v), want waiting", err)
	case <-time.After(20 * time.Millisecond):
	}
}

func admitted(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("enter = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not admitted")
	}
}

func TestGateCapsAMemberAndAdmitsRoundRobin(t *testing.T) {
	g := newGate(3, 2)
	ctx := context.Background()
	admitted(t, entered(g, ctx, "a"))
	admitted(t, entered(g, ctx, "a"))
	a3 := entered(g, ctx, "a")
	pending(t, a3) // a holds its 2
	admitted(t, entered(g, ctx, "b"))
	a4 := entered(g, ctx, "a")
	b2 := entered(g, ctx, "b")
	c1 := entered(g, ctx, "c")
	pending(t, b2)
	// Free places go round robin: a (first waiting), then b, then c.
	g.leave("a")
	admitted(t, a3)
	pending(t, b2)
	g.leave("b")
	admitted(t, b2)
	pending(t, c1)
	g.leave("a")
	admitted(t, c1)
	pending(t, a4)
	g.leave("c")
	admitted(t, a4)
}

func TestGateWithdrawsACancelledWaiter(t *testing.T) {
	g := newGate(1, 1)
	admitted(t, entered(g, context.Background(), "a"))
	ctx, cancel := context.WithCancel(context.Background())
	b := entered(g, ctx, "b")
	c := entered(g, context.Background(), "c")
	pending(t, b)
	cancel()
	if err := <-b; err == nil {
		t.Fatal("cancelled enter = nil")
	}
	g.leave("a")
	admitted(t, c) // the withdrawn waiter took no place
	g.leave("c")
	admitted(t, entered(g, context.Background(), "d"))
}
