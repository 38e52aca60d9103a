package redisconn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// ServerClock tells Redis server time (TIME) without a round trip per
// reading: it measures the offset between a local clock and Redis TIME
// and adds it to the local clock, erring only ahead (by at most a round
// trip), never behind. Replicas that stamp shared schedules
// with it agree on the time however wrong their own clocks are. Its
// timers run on the local clock's timers (durations, not instants).
type ServerClock struct {
	rdb   redis.UniversalClient
	local clock.Clock

	mu     sync.Mutex
	offset time.Duration
}

var _ clock.Clock = (*ServerClock)(nil)

// NewServerClock returns a clock that follows rdb's TIME through local
// (clock.Real when nil). Call Sync once before use and Run to keep it in
// step.
func NewServerClock(rdb redis.UniversalClient, local clock.Clock) *ServerClock {
	if local == nil {
		local = clock.Real{}
	}
	return &ServerClock{rdb: rdb, local: local}
}

// Now returns the local time corrected by the last measured offset: never
// before Redis TIME at the moment of the call.
func (c *ServerClock) Now() time.Time {
	c.mu.Lock()
	off := c.offset
	c.mu.Unlock()
	return c.local.Now().Add(off)
}

// NewTimer returns a timer of the local clock.
func (c *ServerClock) NewTimer(d time.Duration) clock.Timer { return c.local.NewTimer(d) }

// Offset is the last measured offset of Redis TIME from the local clock.
func (c *ServerClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Sync measures the offset once. Redis read its TIME somewhere within
// the round trip, and only the start of the round trip is sure to come
// before that reading, so the offset is taken from the start: Now is then
// never behind Redis TIME (a loaded machine that reads the reply late
// cannot move it back) and at most one round trip ahead. The shortest of
// a few round trips is kept. A midpoint estimate would be off by up to
// half a round trip either way, and a time stamped behind Redis TIME can
// record a check before the due time the delay queue waited for in Redis
// TIME.
func (c *ServerClock) Sync(ctx context.Context) error {
	const samples = 3
	var best time.Duration
	for i := range samples {
		t0 := c.local.Now()
		st, err := c.rdb.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("read redis time: %w", err)
		}
		// TIME is truncated to the microsecond: its reading lies within
		// one microsecond after st.
		if off := st.Add(time.Microsecond).Sub(t0); i == 0 || off < best {
			best = off
		}
	}
	c.mu.Lock()
	c.offset = best
	c.mu.Unlock()
	return nil
}

// Run re-syncs every interval (10 s when zero) until ctx ends; a failed
// sync keeps the last offset.
func (c *ServerClock) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	clock.Every(ctx, interval, func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = c.Sync(sctx)
		cancel()
	})
}
