package worker_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

const (
	benchRate     = 500 // jobs per second
	benchDuration = 3 * time.Second
	benchPrefetch = 128
	benchWorkers  = 64
)

// latencies collects publish-to-handler-start delays.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
	// held[i] is how many deliveries the consumer held (handlers not yet
	// returned) when the delivery of d[i] reached its handler; only the
	// worker's run records it.
	held []int
	// rate is the jobs finished per second, publish of the first to the
	// end of the last.
	rate float64
}

func (l *latencies) add(submit *timestamppb.Timestamp) {
	l.addHeld(submit, -1)
}

// addHeld records a delivery's delay and the deliveries held beside it
// (-1: not counted).
func (l *latencies) addHeld(submit *timestamppb.Timestamp, held int) {
	d := time.Since(submit.AsTime())
	l.mu.Lock()
	l.d = append(l.d, d)
	l.held = append(l.held, held)
	l.mu.Unlock()
}

// windowShare says how the slowest share q of the deliveries started:
// the fraction of them that reached their handler with at least full-8
// deliveries already held (every handler busy, or nearly, just before:
// the delivery waited for a handler to return, in the client's buffer or,
// past the prefetch window, at the broker), against that fraction over
// all deliveries.
func (l *latencies) windowShare(q float64, full int) (slow, all float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := make([]int, len(l.d))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(l.d[b], l.d[a]) })
	tail := max(1, int(q*float64(len(idx))))
	var nSlow, nAll int
	for rank, i := range idx {
		if l.held[i] >= full-8 {
			nAll++
			if rank < tail {
				nSlow++
			}
		}
	}
	if len(idx) == 0 {
		return 0, 0
	}
	return float64(nSlow) / float64(tail), float64(nAll) / float64(len(idx))
}

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// merge appends o's delays (and held counts) to l's.
func (l *latencies) merge(o *latencies) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, o.d...)
	l.held = append(l.held, o.held...)
}

// sorted returns a sorted copy of the delays.
func (l *latencies) sorted() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s
}

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// paced publishes n jobs at benchRate, stamping each with the publish time.
func paced(b *testing.B, pub *amqpbus.Publisher, exchange, key string, jobs []*jobv1.SplitJob) {
	b.Helper()
	tick := time.NewTicker(time.Second / benchRate)
	defer tick.Stop()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, job := range jobs {
		<-tick.C
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			job.SubmitTime = timestamppb.Now()
			msg, err := jobqueue.Encode(context.Background(), job)
			if err == nil {
				err = pub.Publish(context.Background(), exchange, key, msg)
			}
			if err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
}

// BenchmarkPickup measures the delay from a confirmed publish to the start
// of the split-worker's handler at a fixed rate, beside a bare amqp091
// consumer of a queue of the same kind (the floor), in benchrec.Rounds (5)
// rounds of both: each figure is the median of the rounds' quantiles, its
// ratio taken round by round, its distribution all rounds' delays.
func BenchmarkPickup(b *testing.B) {
	n := int(benchRate * benchDuration / time.Second)
	for b.Loop() {
		rounds := benchrec.Rounds(5)
		var worker, bare latencies // every round's delays
		type quantiles struct{ worker, bare []float64 }
		byQ := map[float64]*quantiles{0.5: {}, 0.99: {}}
		var workerRates, bareRates []float64
		for range rounds {
			w, bl := pickupWorker(b, n), pickupBare(b, n)
			for q, qs := range byQ {
				qs.worker = append(qs.worker, benchrec.In(w.quantile(q), "ms"))
				qs.bare = append(qs.bare, benchrec.In(bl.quantile(q), "ms"))
			}
			workerRates, bareRates = append(workerRates, w.rate), append(bareRates, bl.rate)
			worker.merge(w)
			bare.merge(bl)
		}
		b.ReportMetric(1000*benchrec.Median(byQ[0.5].worker), "worker-p50-µs")
		b.ReportMetric(1000*benchrec.Median(byQ[0.99].worker), "worker-p99-µs")
		b.ReportMetric(1000*benchrec.Median(byQ[0.5].bare), "bare-p50-µs")
		b.ReportMetric(1000*benchrec.Median(byQ[0.99].bare), "bare-p99-µs")
		slow, all := worker.windowShare(0.01, benchWorkers)
		b.ReportMetric(100*slow, "slowest1%-handlers-busy-%")
		b.ReportMetric(100*all, "all-handlers-busy-%")
		cond := fmt.Sprintf("%d/s for %v, prefetch %d, %d handlers, %d rounds", benchRate, benchDuration, benchPrefetch, benchWorkers, rounds)
		const bareName = "bare amqp091 consumer"
		for _, q := range []struct {
			name  string
			q     float64
			goals []benchrec.Goal
		}{{"p50", 0.5, nil}, {"p99", 0.99, []benchrec.Goal{benchrec.Below("value", 5), benchrec.AtMost("ratio", 1.2)}}} {
			qs := byQ[q.q]
			base := benchrec.Figure{Group: "pickup", Name: "baseline: " + bareName + ", " + q.name, Params: cond,
				Value: benchrec.Median(qs.bare), Unit: "ms", Better: benchrec.Lower, Samples: qs.bare,
				Note: fmt.Sprintf("median of %d rounds; done %.0f/s", rounds, benchrec.Median(bareRates))}
			f := benchrec.Figure{Group: "pickup", Name: "publish → split-worker handler start (full split), " + q.name, Params: cond,
				Value: benchrec.Median(qs.worker), Unit: "ms", Better: benchrec.Lower, Goals: q.goals, Samples: qs.worker,
				Baseline:   &benchrec.Baseline{Name: bareName, Value: benchrec.Median(qs.bare), Samples: qs.bare},
				RatioPairs: benchrec.PairRatios(qs.worker, qs.bare),
				Note: fmt.Sprintf("median of %d rounds; max %v, done %.0f/s; started with (nearly) every handler busy: %.0f %% of the slowest 1 %%, %.0f %% of all",
					rounds, worker.quantile(1).Round(time.Microsecond), benchrec.Median(workerRates), 100*slow, 100*all)}
			if q.q == 0.99 {
				base.Dist, f.Dist = benchrec.Dist(bare.sorted(), "ms"), benchrec.Dist(worker.sorted(), "ms")
			}
			benchrec.Record(b, base)
			benchrec.Record(b, f)
		}
	}
}

// pickupWorker runs the split-worker's consumer on n paced jobs, each a
// real one-item order split at an instant fulfilment simulator.
func pickupWorker(b *testing.B, n int) *latencies {
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{{SKU: "SKU-MUG", Warehouse: "WH", Stock: 1 << 30, WeightGrams: 400}}}
	// The worker gets the Redis pool a deployment has
	// (ORDERFLOW_REDIS_POOL_SIZE's default), not go-redis's default of ten
	// per core: with 64 handlers that pool was where the tail waited.
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), PoolSize: 128})
	prefix := testenv.Prefix(b)
	b.Cleanup(func() {
		testenv.DeletePrefix(context.Background(), rdb, prefix)
		_ = rdb.Close()
	})
	e := newEnvWith(b, fulfilmentsim.Options{Capacity: 1 << 20, Catalogue: &cat}, rdb, prefix, testenv.RedisAddr())
	e.log = logging.New(io.Discard, slog.LevelWarn, "splitworker")
	pool := slotpool.New(e.rdb, slotpool.Options{Name: e.poolName(), Capacity: 1 << 20, Lease: 10 * time.Second})
	w := worker.New(e.store, e.fc, worker.PoolSlots{Pool: pool}, e.log, nil, worker.Options{
		PollInitial: 2 * time.Millisecond, PollMax: 20 * time.Millisecond, Pollers: benchWorkers,
	})
	jobs := make([]*jobv1.SplitJob, n)
	for i := range jobs {
		jobs[i] = e.create("bench", fmt.Sprintf("ORDER-%d", i), item("M", "SKU-MUG", 1))
	}
	var lat latencies
	var held atomic.Int64
	conn := amqpbus.New(amqpConfig(), e.log, e.names.Topology(deliveryLimit))
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = conn.Consume(ctx, amqpbus.ConsumeOptions{Queue: e.names.Queue, Prefetch: benchPrefetch, Concurrency: benchWorkers},
			func(ctx context.Context, d amqp.Delivery) amqpbus.Outcome {
				others := held.Add(1) - 1
				defer held.Add(-1)
				var job jobv1.SplitJob
				if proto.Unmarshal(d.Body, &job) == nil {
					lat.addHeld(job.GetSubmitTime(), int(others))
				}
				return w.Handle(ctx, d)
			})
	})
	start := time.Now()
	paced(b, e.pub, e.names.Exchange, jobqueue.RoutingKey, jobs)
	waitFor(b, "every task finished", func() bool {
		for _, j := range jobs[n-benchWorkers:] {
			st, err := e.store.Status(context.Background(), "bench", j.GetTaskId())
			if err != nil || st == taskv1.TaskStatus_TASK_STATUS_PROCESSING {
				return false
			}
		}
		return lat.count() >= n
	})
	lat.rate = float64(n) / time.Since(start).Seconds()
	cancel()
	wg.Wait()
	return &lat
}

// pickupBare consumes n paced jobs with a plain amqp091 consumer (same
// prefetch, same number of goroutines) that only acks.
func pickupBare(b *testing.B, n int) *latencies {
	e := newEnv(b, fulfilmentsim.Options{})
	ch := bareChannel(b)
	queue := e.prefix + ".bare"
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()
	if err := ch.Qos(benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	var lat latencies
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for d := range deliveries {
				var job jobv1.SplitJob
				if proto.Unmarshal(d.Body, &job) == nil {
					lat.add(job.GetSubmitTime())
				}
				_ = d.Ack(false)
			}
		})
	}
	jobs := make([]*jobv1.SplitJob, n)
	for i := range jobs {
		jobs[i] = &jobv1.SplitJob{SchemaVersion: 1, TaskId: fmt.Sprintf("bare-%d", i), MemberId: "bench",
			Items: []*taskv1.OrderItem{item("M", "SKU-MUG", 1)}}
	}
	start := time.Now()
	paced(b, e.pub, "", queue, jobs)
	waitFor(b, "every job consumed", func() bool { return lat.count() >= n })
	lat.rate = float64(n) / time.Since(start).Seconds()
	_ = ch.Cancel("", false)
	_ = ch.Close()
	wg.Wait()
	return &lat
}
