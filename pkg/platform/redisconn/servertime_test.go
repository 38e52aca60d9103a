package redisconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestServerClockCorrectsSkew gives the clock a local clock that is far
// off and checks that after a sync it tells Redis time.
func TestServerClockCorrectsSkew(t *testing.T) {
	rdb, _ := testenv.Redis(t)
	ctx := context.Background()
	for _, skew := range []time.Duration{-time.Hour, 0, 90 * time.Second} {
		c := redisconn.NewServerClock(rdb, clock.Skewed{By: skew})
		if err := c.Sync(ctx); err != nil {
			t.Fatalf("Sync() error = %v", err)
		}
		server, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The test runs on the Redis server's machine, so both are the
		// same clock: the corrected reading must be within a round trip.
		if d := c.Now().Sub(server); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("skew %s: Now() - Redis TIME = %s, want within 50ms (offset %s)", skew, d, c.Offset())
		}
	}
}

// TestServerClockNeverBehindAfterLopsidedSync syncs over a connection
// whose replies are seen 40ms late and checks that the clock still never
// tells a time before Redis TIME read earlier: times it stamps are
// compared with due times the delay queue checks against Redis TIME
// itself, so a clock running behind records checks before they were due.
// It may run ahead by at most the round trip.
func TestServerClockNeverBehindAfterLopsidedSync(t *testing.T) {
	rdb, _ := testenv.Redis(t)
	const lag = 40 * time.Millisecond
	slow := testenv.SlowRepliesRedis(t, lag)
	ctx := context.Background()
	c := redisconn.NewServerClock(slow, clock.Real{})
	for range 3 {
		if err := c.Sync(ctx); err != nil {
			t.Fatalf("Sync() error = %v", err)
		}
		server, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		now := c.Now()
		if now.Before(server) {
			t.Fatalf("Now() = %s is %s before Redis TIME %s read earlier (offset %s)",
				now.Format("15:04:05.000000"), server.Sub(now), server.Format("15:04:05.000000"), c.Offset())
		}
		if d := now.Sub(server); d > 10*lag {
			t.Errorf("Now() - Redis TIME = %s, want at most about one round trip (offset %s)", d, c.Offset())
		}
	}
}
