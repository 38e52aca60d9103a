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
