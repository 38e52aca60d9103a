package backoff_test

import (
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/backoff"
	"github.com/orderflow/orderflow/pkg/testkit/jittertest"
)

func TestExponential(t *testing.T) {
	for _, tc := range []struct {
		base, limit time.Duration
		n           int
		want        time.Duration
	}{
		{time.Second, time.Minute, -1, time.Second},
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 1, 2 * time.Second},
		{time.Second, time.Minute, 5, 32 * time.Second},
		{time.Second, time.Minute, 6, time.Minute},
		{time.Second, time.Minute, 1 << 30, time.Minute},
		{2 * time.Minute, time.Minute, 0, time.Minute},
	} {
		if got := backoff.Exponential(tc.base, tc.limit, tc.n); got != tc.want {
			t.Errorf("Exponential(%v, %v, %d) = %v, want %v", tc.base, tc.limit, tc.n, got, tc.want)
		}
	}
}

func TestJitterSpreadsWithinHalfToWhole(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 500 * time.Millisecond, 5 * time.Minute} {
		jittertest.Spread(t, "Jitter("+d.String()+")", d/2, d, func() time.Duration { return backoff.Jitter(d) })
	}
	if got := backoff.Jitter(0); got != 0 {
		t.Errorf("Jitter(0) = %v, want 0", got)
	}
}

func TestBetween(t *testing.T) {
	jittertest.Spread(t, "Between(1s, 2s)", time.Second, 2*time.Second, func() time.Duration { return backoff.Between(time.Second, 2*time.Second) })
	if got := backoff.Between(time.Second, time.Second); got != time.Second {
		t.Errorf("Between(1s, 1s) = %v, want 1s", got)
	}
	if got := backoff.Between(2*time.Second, time.Second); got != 2*time.Second {
		t.Errorf("Between(2s, 1s) = %v, want 2s", got)
	}
}
