// Package clock abstracts the passage of time so that schedules, leases and
// timeouts can be tested without sleeping.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset changes the timer to fire after d.
	Reset(d time.Duration)
}

// Skewed is the wall clock off by a fixed amount: a machine whose clock
// is wrong. It exists for fault injection (a replica with a skewed clock);
// its timers run on real time.
type Skewed struct{ By time.Duration }

// Now returns the wall-clock time plus the skew.
func (s Skewed) Now() time.Time { return time.Now().Add(s.By) }

// NewTimer returns a timer that fires after d of real time.
func (Skewed) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// SkewedBy is the wall clock off by d: Real when d is 0, Skewed otherwise.
func SkewedBy(d time.Duration) Clock {
	if d == 0 {
		return Real{}
	}
	return Skewed{By: d}
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Fake is a manually advanced clock for tests. Its timers fire when Advance
// moves the time past their deadline.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: make(map[*fakeTimer]struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d and fires every timer that is
// then due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	for t := range f.timers {
		if !t.at.After(now) {
			due = append(due, t)
			delete(f.timers, t)
		}
	}
	f.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- now:
		default:
		}
	}
}

// Set moves the fake time to t (forward only) and fires due timers.
func (f *Fake) Set(t time.Time) {
	if d := t.Sub(f.Now()); d > 0 {
		f.Advance(d)
	}
}

// NewTimer returns a timer driven by Advance.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type fakeTimer struct {
	f  *Fake
	c  chan time.Time
	at time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, ok := t.f.timers[t]
	delete(t.f.timers, t)
	return ok
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	t.at = t.f.now.Add(d)
	fire := d <= 0
	if !fire {
		t.f.timers[t] = struct{}{}
	} else {
		delete(t.f.timers, t)
	}
	now := t.f.now
	t.f.mu.Unlock()
	if fire {
		select {
		case t.c <- now:
		default:
		}
	}
}

// Every calls fn every interval of real time until ctx ends; the first
// call comes one interval after the start. Background sweepers and
// re-syncs share it.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
