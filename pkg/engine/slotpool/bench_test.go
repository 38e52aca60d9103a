package slotpool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
)

// BenchmarkPool measures the pool in fixed-length phases (one run whatever
// b.N is) and prints a table:
//
//   - utilisation with a backlog: N=4 slots, 3 replicas, 12 workers, jobs
//     of a fixed duration (10 ms and 50 ms); busy slot time / (N × wall
//     time), where a slot is busy from Acquire's return to Release's call,
//     beside the same loop on an in-process semaphore (the machine's own
//     scheduling overhead, measured in the same run);
//   - handoff: from the start of a Release to the return of the Acquire it
//     granted, p50 and p99;
//   - acquire+release pairs per second with free slots, beside a plain
//     Redis INCR+DECR loop at the same concurrency.
func BenchmarkPool(b *testing.B) {
	const (
		capacity    = 4
		workers     = 12
		phase       = 1500 * time.Millisecond
		concurrency = 8
	)
	rounds := benchrec.Rounds(5)
	fmt.Printf("\nslotpool: N=%d, %d workers on 3 replicas, %v backlog phases, %d rounds\n", capacity, workers, phase, rounds)
	cond := fmt.Sprintf("N = %d, %d workers on 3 replicas, %d rounds", capacity, workers, rounds)
	for _, job := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond} {
		var utils, bares []float64
		var handoffs []time.Duration
		for range rounds {
			util, h := utilisation(b, capacity, workers, job, phase)
			utils = append(utils, util*100)
			bares = append(bares, semaphoreUtilisation(capacity, workers, job, phase)*100)
			handoffs = append(handoffs, h...)
		}
		p50, p99 := percentile(handoffs, 0.50), percentile(handoffs, 0.99)
		f := benchrec.Figure{Group: "slot pool", Name: "utilisation with a backlog", Params: fmt.Sprintf("%v jobs, %s", job, cond),
			Value: benchrec.Median(utils), Unit: "%", Samples: utils,
			Baseline:   &benchrec.Baseline{Name: "in-process semaphore", Value: benchrec.Median(bares), Samples: bares},
			RatioPairs: benchrec.PairRatios(utils, bares), Note: fmt.Sprintf("median of %d rounds", rounds)}
		if job == 10*time.Millisecond {
			f.Goals = []benchrec.Goal{benchrec.AtLeast("value", 95)}
		}
		benchrec.Record(b, f)
		benchrec.Record(b, benchrec.Figure{Group: "slot pool", Name: "hand-off (release → the granted acquire returns), p99",
			Params: fmt.Sprintf("%v jobs, %s", job, cond), Value: benchrec.In(p99, "ms"), Unit: "ms", Better: benchrec.Lower,
			Dist: benchrec.Dist(handoffs, "ms"), Note: fmt.Sprintf("p50 %v, %d hand-offs", p50.Round(time.Microsecond), len(handoffs))})
		unit := fmt.Sprintf("-%dms", job.Milliseconds())
		b.ReportMetric(benchrec.Median(utils), "util%"+unit)
		b.ReportMetric(float64(p50.Microseconds()), "handoff-p50-µs"+unit)
		b.ReportMetric(float64(p99.Microseconds()), "handoff-p99-µs"+unit)
	}
	var poolOps, incrOps []float64
	for i := range rounds {
		pool := func() {
			poolOps = append(poolOps, opsPerSecond(b, concurrency, phase, func(ctx context.Context, p *Pool) error {
				s, err := p.Acquire(ctx, "op")
				if err != nil {
					return err
				}
				return s.Release(ctx, Completed, "")
			}))
		}
		incr := func() {
			incrOps = append(incrOps, opsPerSecond(b, concurrency, phase, func(ctx context.Context, p *Pool) error {
				key := p.keys[keySeq]
				if err := p.rdb.Incr(ctx, key).Err(); err != nil {
					return err
				}
				return p.rdb.Decr(ctx, key).Err()
			}))
		}
		// Alternate which goes first, as benchrec.Interleave does.
		if i%2 == 0 {
			pool()
			incr()
		} else {
			incr()
			pool()
		}
	}
	b.ReportMetric(benchrec.Median(poolOps), "acq+rel/s")
	b.ReportMetric(benchrec.Median(incrOps), "incr+decr/s")
	benchrec.Record(b, benchrec.Figure{Group: "slot pool", Name: "acquire + release, free slots", Params: fmt.Sprintf("%d goroutines, %d rounds", concurrency, rounds),
		Value: benchrec.Median(poolOps), Unit: "pairs/s", Samples: poolOps,
		Baseline:   &benchrec.Baseline{Name: "plain INCR + DECR", Value: benchrec.Median(incrOps), Samples: incrOps},
		RatioPairs: benchrec.PairRatios(poolOps, incrOps), Goals: []benchrec.Goal{benchrec.AtLeast("ratio", 0.5)}})
	for b.Loop() {
	}
}

// utilisation runs workers that loop acquire → hold jobDuration → release
// for the phase and returns the busy share of the slots and every
// release-to-grant handoff.
func utilisation(b *testing.B, capacity, workers int, job, phase time.Duration) (float64, []time.Duration) {
	pools := replicas(b, 3, Options{Capacity: capacity, Lease: 10 * time.Second})
	ctx := context.Background()
	var (
		mu           sync.Mutex
		busy         time.Duration
		granted      = map[string]time.Time{} // token -> Acquire returned
		releaseStart = map[string]time.Time{} // promoted token -> its Release began
		wg           sync.WaitGroup
		failed       atomic.Value
	)
	start := time.Now()
	stop := start.Add(phase)
	for w := range workers {
		p := pools[w%len(pools)]
		wg.Go(func() {
			for time.Now().Before(stop) {
				s, err := p.Acquire(ctx, fmt.Sprintf("w%d", w))
				if err != nil {
					failed.Store(err)
					return
				}
				got := time.Now()
				time.Sleep(job)
				rel := time.Now()
				promoted, err := s.release(ctx, Completed, "")
				if err != nil {
					failed.Store(err)
					return
				}
				mu.Lock()
				granted[s.Token] = got
				busy += rel.Sub(got)
				for _, tok := range promoted {
					releaseStart[tok] = rel
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	var handoffs []time.Duration
	for tok, rel := range releaseStart {
		if got, ok := granted[tok]; ok {
			handoffs = append(handoffs, got.Sub(rel))
		}
	}
	return float64(busy) / (float64(capacity) * float64(wall)), handoffs
}

// semaphoreUtilisation is the baseline of utilisation: the same workers
// and jobs sharing an in-process semaphore of capacity slots, so the
// scheduler's and the sleep's own overhead on this machine show.
func semaphoreUtilisation(capacity, workers int, job, phase time.Duration) float64 {
	sem := make(chan struct{}, capacity)
	var (
		mu   sync.Mutex
		busy time.Duration
		wg   sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(phase)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				sem <- struct{}{}
				got := time.Now()
				time.Sleep(job)
				rel := time.Now()
				<-sem
				mu.Lock()
				busy += rel.Sub(got)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return float64(busy) / (float64(capacity) * float64(time.Since(start)))
}

// opsPerSecond runs op from concurrency goroutines for the phase on a pool
// with a free slot for each of them.
func opsPerSecond(b *testing.B, concurrency int, phase time.Duration, op func(context.Context, *Pool) error) float64 {
	p := replicas(b, 1, Options{Capacity: concurrency, Lease: 10 * time.Second})[0]
	ctx := context.Background()
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(phase)
	for range concurrency {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if err := op(ctx, p); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
