package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

const (
	noisySlots    = 4
	noisyJob      = 50 * time.Millisecond
	noisyBulk     = 500 // items (one shipment each) of the bulk order
	noisySmall    = 20  // 1-item orders of the other member
	noisySeqItems = 100 // items of the bulk order timed alone, both ways
)

// noisyEnv is a fulfilment system of noisySlots slots running every job
// for noisyJob, with a worker whose shipments of one order run up to
// parallelism at once.
func noisyEnv(b *testing.B, parallelism int) (*env, func()) {
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{{SKU: "SKU-MUG", Warehouse: "WH", Stock: 1 << 30, WeightGrams: 400}}}
	e := newEnv(b, fulfilmentsim.Options{Capacity: noisySlots, MinDuration: noisyJob, MaxDuration: noisyJob, Catalogue: &cat})
	e.log = logging.New(io.Discard, slog.LevelWarn, "splitworker")
	e.consume = worker.ConsumeOptions{Prefetch: 32, Concurrency: 8, MemberConcurrency: 4}
	_, stop := e.start(worker.Options{Plan: onePerParcel, OrderParallelism: parallelism,
		PollInitial: 2 * time.Millisecond, PollMax: 5 * time.Millisecond, RequeueBackoff: 10 * time.Millisecond})
	return e, stop
}

// finish polls a task every 2 ms until it is terminal and returns when
// that was seen.
func finish(b *testing.B, e *env, job *jobv1.SplitJob) time.Time {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := e.store.Status(context.Background(), job.GetMemberId(), job.GetTaskId())
		if err == nil && st != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			return time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("task %s not finished in 2m", job.GetTaskId())
	return time.Time{}
}

// smallOrders submits noisySmall 1-item orders of member "small", one
// every 50 ms, each after the previous finished, and returns their
// submit-to-finish times.
func smallOrders(b *testing.B, e *env) []time.Duration {
	var out []time.Duration
	for i := range noisySmall {
		start := time.Now()
		job := e.submit("small", fmt.Sprintf("S-%d", i), mugs(1)...)
		out = append(out, finish(b, e, job).Sub(start))
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(out)
	return out
}

func p(ds []time.Duration, q float64) time.Duration {
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// BenchmarkNoisyNeighbour prints how a bulk order shares the fulfilment
// system's N = 4 slots: another member's 1-item order latency alone and
// while a 500-item order runs; the bulk order's time with all N slots
// against one shipment at a time; and utilisation of the slots. Each
// figure is the median of benchrec.Rounds (5) rounds, each ratio the median
// of the rounds' own.
func BenchmarkNoisyNeighbour(b *testing.B) {
	for b.Loop() {
		rounds := benchrec.Rounds(5)
		var alone, busy []time.Duration
		var alone99, busy99, par, seq, util []float64
		var jobs int64
		var bulkTime time.Duration
		for range rounds {
			r := noisyRound(b)
			alone, busy = append(alone, r.alone...), append(busy, r.busy...)
			alone99, busy99 = append(alone99, benchrec.In(p(r.alone, 0.99), "ms")), append(busy99, benchrec.In(p(r.busy, 0.99), "ms"))
			par, seq, util = append(par, r.par.Seconds()), append(seq, r.seq.Seconds()), append(util, r.util*100)
			jobs, bulkTime = jobs+r.jobs, bulkTime+r.bulkTime
		}
		speedups := benchrec.PairRatios(seq, par)
		b.ReportMetric(benchrec.Median(alone99), "small-alone-p99-ms")
		b.ReportMetric(benchrec.Median(busy99), "small-beside-bulk-p99-ms")
		b.ReportMetric(benchrec.Median(speedups), "bulk-speedup")
		b.ReportMetric(benchrec.Median(util), "utilisation-%")
		cond := fmt.Sprintf("N = %d slots, %v jobs, one shipment per item, %d rounds", noisySlots, noisyJob, rounds)
		benchrec.Record(b, benchrec.Figure{Group: "noisy neighbour", Name: fmt.Sprintf("baseline: another member's 1-item order alone, p99 (%d orders)", noisySmall),
			Params: cond, Value: benchrec.Median(alone99), Unit: "ms", Better: benchrec.Lower, Samples: alone99, Dist: benchrec.Dist(alone, "ms"),
			Note: fmt.Sprintf("median of %d rounds' p99s", rounds)})
		benchrec.Record(b, benchrec.Figure{Group: "noisy neighbour", Name: fmt.Sprintf("another member's 1-item order beside a %d-item order, p99", noisyBulk),
			Params: cond, Value: benchrec.Median(busy99), Unit: "ms", Better: benchrec.Lower, Samples: busy99, Dist: benchrec.Dist(busy, "ms"),
			Baseline:   &benchrec.Baseline{Name: "alone", Value: benchrec.Median(alone99), Samples: alone99},
			RatioPairs: benchrec.PairRatios(busy99, alone99), Goals: []benchrec.Goal{benchrec.AtMost("ratio", 2)},
			Note: fmt.Sprintf("median of %d rounds' p99s", rounds)})
		benchrec.Record(b, benchrec.Figure{Group: "noisy neighbour", Name: fmt.Sprintf("%d-item order alone, all N slots", noisySeqItems),
			Params: cond, Value: benchrec.Median(par), Unit: "s", Better: benchrec.Lower, Samples: par,
			Baseline:   &benchrec.Baseline{Name: "one shipment at a time", Value: benchrec.Median(seq), Samples: seq},
			RatioPairs: benchrec.PairRatios(par, seq), Goals: []benchrec.Goal{benchrec.AtMost("ratio", 1/3.5)},
			Note: fmt.Sprintf("%.2f× faster (goal ≥ 3.5×), median of %d rounds", benchrec.Median(speedups), rounds)})
		benchrec.Record(b, benchrec.Figure{Group: "noisy neighbour", Name: fmt.Sprintf("slot utilisation while the %d-item order ran", noisyBulk),
			Params: cond, Value: benchrec.Median(util), Unit: "%", Samples: util, Goals: []benchrec.Goal{benchrec.AtLeast("value", 95)},
			Note: fmt.Sprintf("median of %d rounds; %d jobs in %v over them", rounds, jobs, bulkTime.Round(time.Millisecond))})
	}
}

// noisyOutcome is one round of BenchmarkNoisyNeighbour.
type noisyOutcome struct {
	alone, busy []time.Duration // another member's 1-item orders, alone and beside the bulk order
	par, seq    time.Duration   // the smaller bulk order alone, with all N slots and one at a time
	util        float64         // slot utilisation while the bulk order ran
	jobs        int64           // the jobs the bulk order's run created
	bulkTime    time.Duration   // how long the bulk order ran
}

// noisyRound runs one round of BenchmarkNoisyNeighbour, each part on an
// environment of its own, whose worker it stops when the part is done.
func noisyRound(b *testing.B) noisyOutcome {
	var r noisyOutcome
	// Another member's 1-item orders, alone.
	e, stop := noisyEnv(b, noisySlots)
	r.alone = smallOrders(b, e)
	stop()

	// The same while member "bulk" runs a 500-item order.
	e, stop = noisyEnv(b, noisySlots)
	bulk := e.submit("bulk", "BULK", mugs(noisyBulk)...)
	bulkStart := time.Now()
	waitFor(b, "the bulk order running", func() bool { return stats(b, e).Running > 0 })
	r.busy = smallOrders(b, e)
	bulkDone := finish(b, e, bulk)
	st := stats(b, e)
	r.bulkTime, r.jobs = bulkDone.Sub(bulkStart), int64(st.Created)
	r.util = float64(st.Created) * noisyJob.Seconds() / (noisySlots * r.bulkTime.Seconds())
	stop()

	// The bulk order alone: all N slots against one at a time.
	timed := func(parallelism int) time.Duration {
		e, stop := noisyEnv(b, parallelism)
		defer stop()
		start := time.Now()
		finish(b, e, e.submit("bulk", "BULK", mugs(noisySeqItems)...))
		return time.Since(start)
	}
	r.par, r.seq = timed(noisySlots), timed(1)
	return r
}
