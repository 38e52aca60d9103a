package slotpool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// countingHook counts the commands a client sends.
type countingHook struct{ n *atomic.Int64 }

func (countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestConfirmAfterAStallFindsTheSlotRegranted stalls a holder between its
// grant and its use for longer than its lease, without renewing (as a
// stopped process does): the pool reclaims the slot and grants it to
// another replica's waiter, and the stalled holder's Confirm reports the
// slot lost instead of letting it act on it.
func TestConfirmAfterAStallFindsTheSlotRegranted(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: 300 * time.Millisecond})
	runJanitors(t, pools[1])
	stalled := mustAcquire(t, pools[0], "stalled")
	rival := mustAcquire(t, pools[1], "rival") // granted once the stalled lease is reclaimed
	defer func() { _ = rival.Release(context.Background(), Completed, "") }()
	if err := stalled.Confirm(context.Background()); !errors.Is(err, ErrLost) {
		t.Fatalf("Confirm() after the slot was regranted = %v, want %v", err, ErrLost)
	}
	if got := mustSnapshot(t, pools[0]).Holders; len(got) != 1 || got[0].JobID != "rival" {
		t.Errorf("holders = %+v, want only rival", got)
	}
}

// TestConfirmIsFreeWhileTheGrantIsFresh: a slot confirmed right after its
// grant needs no round trip; one confirmed after a third of its lease
// renews it (one round trip) and keeps it.
func TestConfirmIsFreeWhileTheGrantIsFresh(t *testing.T) {
	const lease = 900 * time.Millisecond
	pools := replicas(t, 1, Options{Capacity: 1, Lease: lease})
	var n atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(countingHook{&n})
	p := New(c, Options{Name: pools[0].Name(), Capacity: 1, Lease: lease})

	for _, via := range []string{"enqueue", "grant message"} {
		t.Run(via, func(t *testing.T) {
			var blocker *Slot
			if via == "grant message" {
				// Queue behind another holder, so the grant comes later.
				blocker = mustAcquire(t, pools[0], "blocker")
				time.AfterFunc(100*time.Millisecond, func() { _ = blocker.Release(context.Background(), Completed, "") })
			}
			s := mustAcquire(t, p, "job")
			defer func() { _ = s.Release(context.Background(), Completed, "") }()
			before := n.Load()
			if err := s.Confirm(context.Background()); err != nil {
				t.Fatalf("Confirm() right after the grant = %v", err)
			}
			if got := n.Load() - before; got != 0 {
				t.Errorf("Confirm() right after the grant sent %d commands, want 0", got)
			}
			time.Sleep(lease / 2)
			before = n.Load()
			if err := s.Confirm(context.Background()); err != nil {
				t.Fatalf("Confirm() after half the lease = %v", err)
			}
			if got := n.Load() - before; got != 1 {
				t.Errorf("Confirm() after half the lease sent %d commands, want 1 (the renewal)", got)
			}
			// Renewed: the slot outlives its first lease.
			time.Sleep(lease * 2 / 3)
			if err := pools[0].Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := mustSnapshot(t, pools[0]).Holders; len(got) != 1 || got[0].JobID != "job" {
				t.Errorf("holders after the first lease = %+v, want job", got)
			}
		})
	}
}
