package worker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/jittertest"
)

// TestHoldAndRequeuePausesAreJittered: the pauses of a held delivery
// (RequeueBackoff doubling up to maxHoldPause) and before a requeue
// (RequeueBackoff doubling per redelivery, up to 32 times) are drawn from
// [d/2, d], never above their caps.
func TestHoldAndRequeuePausesAreJittered(t *testing.T) {
	const base = 500 * time.Millisecond
	for n, d := range []time.Duration{base, 2 * base, 4 * base, 8 * base, maxHoldPause, maxHoldPause} {
		jittertest.Spread(t, "holdPause", d/2, d, func() time.Duration { return holdPause(base, n) })
	}
	for n, d := range []time.Duration{base, 2 * base, 4 * base, 8 * base, 16 * base, 32 * base, 32 * base} {
		jittertest.Spread(t, "requeuePause", d/2, d, func() time.Duration { return requeuePause(base, int64(n)) })
	}
	jittertest.Spread(t, "requeuePause(-1)", base/2, base, func() time.Duration { return requeuePause(base, -1) })
}

// recordingClock is the wall clock whose timers fire at once, recording
// the durations asked for.
type recordingClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (c *recordingClock) Now() time.Time { return time.Now() }

func (c *recordingClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return firedTimer(ch)
}

type firedTimer chan time.Time

func (t firedTimer) C() <-chan time.Time   { return t }
func (t firedTimer) Stop() bool            { return false }
func (t firedTimer) Reset(_ time.Duration) {}

// TestReplicasPollingTheSameJobSpreadTheirPolls: two replicas polling
// from the same instant (as after an outage of the fulfilment system)
// wait [d/2, d] of the backoff before each poll, PollInitial growing by
// half up to PollMax, and not the same waits.
func TestReplicasPollingTheSameJobSpreadTheirPolls(t *testing.T) {
	const polls = 12
	var runs [2][]time.Duration
	for i := range runs {
		c := &recordingClock{}
		w := &Worker{opts: Options{PollInitial: 100 * time.Millisecond, PollMax: time.Second, TransientRetries: 3, Clock: c}}
		n := 0
		if err := w.retry(context.Background(), func() (bool, error) { n++; return n > polls, nil }); err != nil {
			t.Fatalf("retry() = %v", err)
		}
		d := w.opts.PollInitial
		for j, got := range c.waits {
			if got < d/2 || got > d {
				t.Errorf("replica %d wait %d = %v, want within [%v, %v]", i, j, got, d/2, d)
			}
			d = min(d*3/2, w.opts.PollMax)
		}
		if len(c.waits) != polls {
			t.Fatalf("replica %d waited %d times, want %d", i, len(c.waits), polls)
		}
		runs[i] = c.waits
	}
	if slices.Equal(runs[0], runs[1]) {
		t.Errorf("two replicas polled after the same waits %v, want them spread", runs[0])
	}
}
