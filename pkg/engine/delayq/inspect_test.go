package delayq

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// TestStatsAndLookup checks the read-only inspection: counts, the next due
// time, overdue firings and their lateness, and one job's state while
// pending, while running and after it is gone.
func TestStatsAndLookup(t *testing.T) {
	t0 := time.UnixMilli(time.Now().UnixMilli())
	clk := clock.NewFake(t0)
	q, _, _ := testQueue(t, Options{Clock: clk})
	ctx := context.Background()
	for id, due := range map[string]time.Time{"a": t0.Add(-2 * time.Second), "b": t0.Add(-time.Second), "c": t0.Add(5 * time.Second)} {
		if err := q.Schedule(ctx, id, due, nil); err != nil {
			t.Fatal(err)
		}
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Now: t0, Pending: 3, NextDue: t0.Add(-2 * time.Second), Overdue: 2, MaxLateness: 2 * time.Second}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Stats() (-want +got):\n%s", diff)
	}
	if got, _ := q.Lookup(ctx, "c"); !got.Scheduled || !got.Due.Equal(t0.Add(5*time.Second)) || got.Running {
		t.Errorf("Lookup(c) = %+v, want scheduled at %v, not running", got, t0.Add(5*time.Second))
	}
	if got, _ := q.Lookup(ctx, "nope"); got.Scheduled {
		t.Errorf("Lookup(nope) = %+v, want not scheduled", got)
	}

	// While a and b run, they are in flight with a lease and no due time.
	release := make(chan struct{})
	running := make(chan string, 2)
	start(t, q, func(ctx context.Context, j Job) error {
		running <- j.ID
		<-release
		return nil
	})
	recv(t, running, 10*time.Second)
	recv(t, running, 10*time.Second)
	got, err := q.Lookup(ctx, "a")
	if err != nil || !got.Scheduled || !got.Running || !got.Due.IsZero() || got.LeaseUntil.IsZero() {
		t.Errorf("Lookup(a) while running = %+v, %v; want running with a lease, no due time", got, err)
	}
	if st, _ := q.Stats(ctx); st.InFlight != 2 || st.Pending != 1 || st.Overdue != 0 || st.MaxLateness != 0 {
		t.Errorf("Stats() while a and b run = %+v, want 2 in flight, 1 pending, none overdue", st)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := q.Lookup(ctx, "a")
		if !got.Scheduled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lookup(a) after its handler returned = %+v, want gone", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
