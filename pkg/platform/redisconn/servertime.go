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
// and adds it to the local clock. Replicas that stamp shared schedules
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

// Now returns the local time corrected by the last measured offset.
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

// Sync measures the offset once: Redis TIME (microseconds) against the
// midpoint of the round trip, so the error is at most half the round trip.
func (c *ServerClock) Sync(ctx context.Context) error {
	t0 := c.local.Now()
	st, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("read redis time: %w", err)
	}
	t1 := c.local.Now()
	off := st.Sub(t0.Add(t1.Sub(t0) / 2))
	c.mu.Lock()
	c.offset = off
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
