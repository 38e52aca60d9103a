// Package backoff computes jittered retry delays. Replicas that fail
// together (an outage of Redis, RabbitMQ or the provider ends for all of
// them at once) would otherwise retry together, in lockstep, and hit the
// recovering system with every retry at the same instant; a delay drawn at
// random from a range spreads them over it.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exponential is base × 2^n, capped at limit (n < 0 counts as 0); it
// never overflows.
func Exponential(base, limit time.Duration, n int) time.Duration {
	d := max(base, 0)
	for range max(n, 0) {
		if d >= limit {
			break
		}
		d *= 2
	}
	return min(d, limit)
}

// Jitter is d with "equal jitter": a delay drawn uniformly from [d/2, d].
// It never exceeds d and keeps at least half of it, so a loop's cap and
// the order of magnitude of its backoff stay as documented.
func Jitter(d time.Duration) time.Duration {
	return Between(d-d/2, d)
}

// Between is a delay drawn uniformly from [lo, hi]; hi ≤ lo yields lo.
func Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}
