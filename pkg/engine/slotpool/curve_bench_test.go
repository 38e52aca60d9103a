package slotpool

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// waiterCost is the pool's cost at one queue length: Redis bytes per
// waiter and the round trips of an enqueue and of a grant (a release
// promoting the head of the queue).
type waiterCost struct {
	waiters           int
	bytesPerWaiter    float64
	enqueue, grant    []time.Duration // sorted
	grantedInOrder    bool
	loadRatePerSecond float64
}

// curveSamples is how many enqueues and grants are timed at each size.
const curveSamples = 1000

// bulkEnqueueOp queues the waiters ARGV[13...] (tokens, of job
// "job-<token>") in tier ARGV[11] and group ARGV[12] with the statements
// enqueueOp runs for one, a thousand per call: the cost curves load 10^6
// waiters with it in seconds. It lives in a library of its own beside the
// pool's functions (curveLibrary).
var bulkEnqueueOp = &op{name: "bulkEnqueue", body: `
local t, g = ARGV[11], ARGV[12]
for i = 13, #ARGV do
  local tok = ARGV[i]
  local job = 'job-' .. tok
` + enqueueWaiter + `
end
return result(0)
`}

// curveLibrary is the pool's library with bulkEnqueueOp.
var curveLibrary = newLibrary("slotpoolcurve", prelude, batchable, append(slices.Clone(poolOps), bulkEnqueueOp)...)

// waiterCurve queues n waiters behind one holder of a one-slot pool on a
// redis-server of its own (a thousand per script call, by the enqueue
// script's own statements), then times curveSamples enqueues at the tail and
// curveSamples grants: each release of the current holder promotes the
// head of the queue, whose token is released next.
func waiterCurve(tb testing.TB, n int) waiterCost {
	tb.Helper()
	srv := testenv.StartRedis(tb, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	p := New(rdb, Options{Name: "curve", Capacity: 1, Lease: time.Hour})
	p.lib = curveLibrary
	holder, err := p.Acquire(ctx, "holder")
	if err != nil {
		tb.Fatal(err)
	}
	token := func(i int) string { return fmt.Sprintf("w%011d", i) }
	enqueueArgs := func(tok string) []any {
		return []any{tok, "job-" + tok, p.lease.Milliseconds(), p.waitTTL.Milliseconds(), Normal.tier(), ""}
	}
	before := testenv.UsedMemory(tb, rdb)
	start := time.Now()
	const batch = 1000
	for i := 0; i < n; i += batch {
		args := enqueueArgs("")
		for j := i; j < min(n, i+batch); j++ {
			args = append(args, token(j))
		}
		if _, err := p.exec(ctx, bulkEnqueueOp, args...); err != nil {
			tb.Fatalf("load waiters: %v", err)
		}
	}
	c := waiterCost{waiters: n, loadRatePerSecond: float64(n) / time.Since(start).Seconds()}
	c.bytesPerWaiter = float64(testenv.UsedMemory(tb, rdb)-before) / float64(n)

	for i := range curveSamples {
		t0 := time.Now()
		if _, err := p.exec(ctx, enqueueOp, enqueueArgs(token(n+i))...); err != nil {
			tb.Fatal(err)
		}
		c.enqueue = append(c.enqueue, time.Since(t0))
	}
	c.grantedInOrder = true
	current := holder.Token
	for i := range min(curveSamples, n) {
		t0 := time.Now()
		r, err := p.exec(ctx, releaseOp, current, int(Completed), "")
		c.grant = append(c.grant, time.Since(t0))
		if err != nil {
			tb.Fatal(err)
		}
		if r.status != 1 || len(r.granted) != 1 || r.granted[0] != token(i) {
			c.grantedInOrder = false
			break
		}
		current = token(i)
	}
	slices.Sort(c.enqueue)
	slices.Sort(c.grant)
	return c
}

// TestWaiterCurveHarness runs the cost curve at its smallest size, so
// make test keeps the harness working: a thousand waiters are granted in
// queue order and cost a bounded number of bytes each.
func TestWaiterCurveHarness(t *testing.T) {
	c := waiterCurve(t, 1000)
	if !c.grantedInOrder {
		t.Error("grants at the head of a thousand waiters out of queue order")
	}
	if c.bytesPerWaiter <= 0 || c.bytesPerWaiter > 2048 {
		t.Errorf("%.0f bytes per waiter, want between 0 and 2 KiB", c.bytesPerWaiter)
	}
	if len(c.grant) != curveSamples || len(c.enqueue) != curveSamples {
		t.Errorf("timed %d grants and %d enqueues, want %d each", len(c.grant), len(c.enqueue), curveSamples)
	}
}

// BenchmarkWaiterCurve records the pool's cost curve: bytes per waiter
// and the p50/p99 round trip of a grant and of an enqueue with 10^3 to
// 10^6 waiters queued (one group, one priority: the FIFO case), on a
// redis-server of its own. Nothing may grow faster than linearly in
// bytes (a flat bytes-per-waiter line) or logarithmically in latency.
func BenchmarkWaiterCurve(b *testing.B) {
	for b.Loop() {
		var costs []waiterCost
		for _, n := range []int{1e3, 1e4, 1e5, 1e6} {
			c := waiterCurve(b, n)
			if !c.grantedInOrder {
				b.Fatalf("%d waiters: grants out of queue order", n)
			}
			costs = append(costs, c)
			params := "waiters=" + benchrec.FormatNumber(float64(n))
			point := func(series string) *benchrec.Point {
				return &benchrec.Point{Series: series, X: float64(n), XLabel: "waiters queued"}
			}
			benchrec.Record(b, benchrec.Figure{Group: benchrec.CurveGroup, Name: "slot pool bytes per waiter", Params: params,
				Value: c.bytesPerWaiter, Unit: "B", Better: benchrec.Lower, Curve: point("slot pool waiters: bytes"),
				Note: fmt.Sprintf("loaded at %.0f waiters/s", c.loadRatePerSecond)})
			benchrec.RecordCurveLatencies(b, "slot pool", params, float64(n), "waiters queued",
				benchrec.Latencies{Name: "grant round trip", Sorted: c.grant},
				benchrec.Latencies{Name: "enqueue round trip", Sorted: c.enqueue})
		}
		first, last := costs[0], costs[len(costs)-1]
		grow := func(ds0, ds1 []time.Duration) float64 {
			return float64(benchrec.At(ds1, 0.5)) / float64(benchrec.At(ds0, 0.5))
		}
		fmt.Printf("  slot pool waiters, %d → %d: bytes per waiter ×%.2f (flat = linear), grant p50 ×%.2f, enqueue p50 ×%.2f (log growth would be ×%.1f)\n",
			first.waiters, last.waiters, last.bytesPerWaiter/first.bytesPerWaiter,
			grow(first.grant, last.grant), grow(first.enqueue, last.enqueue),
			math.Log(float64(last.waiters))/math.Log(float64(first.waiters)))
	}
}
