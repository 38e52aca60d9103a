// Package ratelimit limits each member's request rate on one gateway
// replica (token buckets from golang.org/x/time/rate), so one noisy member
// cannot starve the others. The effective limit of a deployment is the
// per-replica limit times the number of gateway replicas.
package ratelimit

import (
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orderflow/orderflow/pkg/platform/apierr"
)

// maxMembers bounds the table of buckets; idle buckets are dropped when it
// fills up.
const maxMembers = 100000

// Limiter holds one token bucket per member.
type Limiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// New returns a Limiter allowing perSecond requests per member with bursts
// of burst; perSecond ≤ 0 disables limiting (New returns nil).
func New(perSecond float64, burst int) *Limiter {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = 1
	}
	return &Limiter{limit: rate.Limit(perSecond), burst: burst, now: time.Now, buckets: make(map[string]*bucket)}
}

// Allow takes a token from member's bucket, or returns a RESOURCE_EXHAUSTED
// error (HTTP 429) carrying RetryInfo and the retry delay in whole seconds
// for the Retry-After header. A nil Limiter allows everything.
func (l *Limiter) Allow(member string) error {
	if l == nil {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[member]
	if !ok {
		if len(l.buckets) >= maxMembers {
			l.evict(now)
		}
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[member] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	if delay > 0 {
		r.CancelAt(now)
	}
	l.mu.Unlock()
	if delay <= 0 {
		return nil
	}
	secs := int64((delay + time.Second - 1) / time.Second)
	st := status.New(codes.ResourceExhausted, "too many requests, retry after "+strconv.FormatInt(secs, 10)+"s")
	if d, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: apierr.ReasonRateLimited, Domain: apierr.Domain, Metadata: map[string]string{"retryAfterSeconds": strconv.FormatInt(secs, 10)}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)},
	); err == nil {
		st = d
	}
	return st.Err()
}

// evict drops buckets idle long enough to be full again. Called with mu held.
func (l *Limiter) evict(now time.Time) {
	idle := time.Duration(float64(l.burst)/float64(l.limit)*float64(time.Second)) + time.Second
	for m, b := range l.buckets {
		if now.Sub(b.seen) > idle {
			delete(l.buckets, m)
		}
	}
	if len(l.buckets) >= maxMembers {
		clear(l.buckets)
	}
}

// RetryAfter returns the retry delay in seconds that a RESOURCE_EXHAUSTED
// error carries in its ErrorInfo metadata retryAfterSeconds (rate limits,
// the replica's watch capacity), or "".
func RetryAfter(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return ""
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()["retryAfterSeconds"]
		}
	}
	return ""
}
