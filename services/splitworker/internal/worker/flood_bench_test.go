package worker_test

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

const (
	floodJobs = 2000                  // 1-item orders of the flooding member, ahead in the queue
	floodJob  = 10 * time.Millisecond // fulfilment job time
)

// floodRun queues flood 1-item orders of member "flood" and then one of
// member "small", starts a worker (prefetch 32, concurrency 8, 4 per
// member, N = 4 slots) and returns the time from the start to the small
// order's end and how many flood orders had ended by then.
func floodRun(b *testing.B, flood, backlog int) (time.Duration, int) {
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{{SKU: "SKU-MUG", Warehouse: "WH", Stock: 1 << 30, WeightGrams: 400}}}
	e := newEnv(b, fulfilmentsim.Options{Capacity: 4, MinDuration: floodJob, MaxDuration: floodJob, Catalogue: &cat})
	e.log = logging.New(io.Discard, slog.LevelWarn, "splitworker")
	e.consume = worker.ConsumeOptions{Prefetch: 32, Concurrency: 8, MemberConcurrency: 4, MemberBacklog: backlog}
	jobs := make([]*jobv1.SplitJob, flood)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < flood; i += 8 {
				jobs[i] = e.submit("flood", fmt.Sprintf("F-%d", i), mugs(1)...)
			}
		})
	}
	wg.Wait()
	small := e.submit("small", "S-1", mugs(1)...)
	start := time.Now()
	_, stop := e.start(worker.Options{Plan: onePerParcel, PollInitial: 2 * time.Millisecond, PollMax: 5 * time.Millisecond, RequeueBackoff: 10 * time.Millisecond})
	defer stop()
	took := finish(b, e, small).Sub(start)
	return took, stats(b, e).Created - 1
}

// BenchmarkFlood records how long another member's first order waits when
// one member's floodJobs orders stand before it in the split queue (40
// times the worker's prefetch window): with the flood moved to the
// overflow queue, against an empty queue, in benchrec.Rounds (5) rounds of
// both (each figure the median of its rounds); and, once, with moving off
// (the flood then drains first: a contrast of seconds, not a goal).
func BenchmarkFlood(b *testing.B) {
	for b.Loop() {
		rounds := benchrec.Rounds(5)
		var alone, moved, doneMoved []float64
		for range rounds {
			a, _ := floodRun(b, 0, 0)
			m, done := floodRun(b, floodJobs, 0)
			alone, moved, doneMoved = append(alone, benchrec.In(a, "ms")), append(moved, benchrec.In(m, "ms")), append(doneMoved, float64(done))
		}
		kept, doneKept := floodRun(b, floodJobs, -1)
		params := fmt.Sprintf("N = 4 slots, %v jobs, prefetch 32", floodJob)
		alonePoint := &benchrec.Baseline{Name: "empty queue ahead", Value: benchrec.Median(alone), Samples: alone}
		benchrec.Record(b, benchrec.Figure{Group: "job queue flood", Params: fmt.Sprintf("%s, %d rounds", params, rounds),
			Name:  fmt.Sprintf("another member's 1-item order, start → done, behind %d orders of one member", floodJobs),
			Value: benchrec.Median(moved), Unit: "ms", Better: benchrec.Lower, Samples: moved, Baseline: alonePoint,
			RatioPairs: benchrec.PairRatios(moved, alone),
			Note:       fmt.Sprintf("flood moved to the overflow queue; %.0f flood orders done by then; median of %d rounds", benchrec.Median(doneMoved), rounds)})
		benchrec.Record(b, benchrec.Figure{Group: "job queue flood", Params: params + ", one run",
			Name:  fmt.Sprintf("the same with moving off (MEMBER_BACKLOG=-1), behind %d orders", floodJobs),
			Value: benchrec.In(kept, "ms"), Unit: "ms", Better: benchrec.Lower, Baseline: alonePoint,
			Note: fmt.Sprintf("%d flood orders done by then; one run, a contrast: the whole flood drains first", doneKept)})
	}
}
