package delayq

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// pendingCost is the queue's cost with n jobs pending: Redis bytes per job
// and the lateness of a stream of jobs due soon.
type pendingCost struct {
	pending     int
	bytesPerJob float64
	lateness    *latencies
}

// pendingCurve loads n jobs due a day or more ahead into a queue on a
// redis-server of its own and measures a stream of streamN jobs at 500/s
// beside them.
func pendingCurve(tb testing.TB, n, streamN int) pendingCost {
	tb.Helper()
	srv := testenv.StartRedis(tb, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	defer rdb.Close()
	q := New(rdb, Options{Name: "curve"})
	far := time.Now().Add(24 * time.Hour)
	c := pendingCost{pending: n}
	c.bytesPerJob = measure(tb, rdb, func() int { loadQueue(tb, q, "far", n, far); return n })
	c.lateness = streamLateness(tb, q, "soon", streamN, 500)
	return c
}

// TestPendingCurveHarness runs the cost curve at its smallest size, so
// make test keeps the harness working.
func TestPendingCurveHarness(t *testing.T) {
	c := pendingCurve(t, 1000, 100)
	if c.lateness.early != 0 {
		t.Errorf("%d jobs fired early", c.lateness.early)
	}
	if len(c.lateness.d) != 100 {
		t.Errorf("%d of 100 stream jobs fired", len(c.lateness.d))
	}
	if c.bytesPerJob <= 0 || c.bytesPerJob > 1024 {
		t.Errorf("%.0f bytes per pending job, want between 0 and 1 KiB", c.bytesPerJob)
	}
}

// BenchmarkPendingCurve records the delay queue's cost curve: bytes per
// pending job and the lateness (p50, p99) of a stream of 2,000 jobs at
// 500/s with 10^3 to 10^6 jobs pending, each size on a redis-server of
// its own.
func BenchmarkPendingCurve(b *testing.B) {
	for b.Loop() {
		for _, n := range []int{1e3, 1e4, 1e5, 1e6} {
			c := pendingCurve(b, n, 2000)
			params := "pending=" + benchrec.FormatNumber(float64(n))
			point := func(series string) *benchrec.Point {
				return &benchrec.Point{Series: series, X: float64(n), XLabel: "jobs pending"}
			}
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "delay queue bytes per pending job", Params: params,
				Value: c.bytesPerJob, Unit: "B", Better: benchrec.Lower, Curve: point("delay queue: bytes")})
			for _, at := range []float64{0.5, 0.99} {
				benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: fmt.Sprintf("delay queue lateness p%.0f", at*100),
					Params: params, Value: benchrec.In(c.lateness.p(at), "ms"), Unit: "ms", Better: benchrec.Lower,
					Curve: point(fmt.Sprintf("delay queue: lateness p%.0f", at*100)),
					Note:  fmt.Sprintf("%d fired early", c.lateness.early)})
			}
		}
	}
}
