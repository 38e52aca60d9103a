package delayq

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// BenchmarkDelayQueue prints, on a redis-server of its own: bytes per
// pending job in Redis for this queue and for the seed's layout (a hash
// "job pool" of JSON jobs plus a sorted-set "delay bucket" holding one JSON
// item per planned query), firing lateness of a stream of jobs with
// 1,000,000 jobs pending, and firings per second with one and two replicas.
// The seed polls once a second, so its lateness is up to 1 s; it is not
// measured here (n/m). It runs once whatever b.N is.
func BenchmarkDelayQueue(b *testing.B) {
	const (
		pending   = 1_000_000
		sample    = 100_000 // jobs in the side-by-side memory comparison
		stream    = 1_000   // jobs a round in the lateness rows
		streamHz  = 500
		burst     = 10_000 // jobs due at once a round in the throughput rows
		payloadSz = 30
	)
	srv := testenv.StartRedis(b, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer rdb.Close()
	ctx := context.Background()
	const group = "delay queue"
	fmt.Printf("\ndelay queue (own redis-server)\n")

	// Memory, like for like at 100k jobs, then delayq at 1M.
	far := time.Now().Add(24 * time.Hour)
	seedBytes := measure(b, rdb, func() int { loadSeed(b, rdb, sample, far); return sample })
	rdb.FlushAll(ctx)
	q := New(rdb, Options{Name: "bench"})
	small := measure(b, rdb, func() int { loadQueue(b, q, "s", sample, far); return sample })
	rdb.FlushAll(ctx)
	q = New(rdb, Options{Name: "bench"})
	var loadTime time.Duration
	big := measure(b, rdb, func() int {
		t0 := time.Now()
		loadQueue(b, q, "far", pending, far)
		loadTime = time.Since(t0)
		return pending
	})
	curve := func(n int) *benchrec.Point {
		return &benchrec.Point{Series: "delay queue, Redis bytes per pending job", X: float64(n), XLabel: "pending jobs"}
	}
	benchrec.Record(b, benchrec.Figure{Group: group, Name: "Redis bytes per pending job", Params: fmt.Sprintf("%s jobs, ~%d B payload", benchrec.FormatNumber(sample), payloadSz),
		Value: small, Unit: "B", Better: benchrec.Lower, Curve: curve(sample),
		Baseline: &benchrec.Baseline{Name: "seed layout (job-pool hash + delay-bucket sorted set)", Value: seedBytes}})
	benchrec.Record(b, benchrec.Figure{Group: group, Name: "Redis bytes per pending job", Params: fmt.Sprintf("%s jobs, ~%d B payload", benchrec.FormatNumber(pending), payloadSz),
		Value: big, Unit: "B", Better: benchrec.Lower, Curve: curve(pending), Goals: []benchrec.Goal{benchrec.Below("value", 200)}})
	benchrec.Record(b, benchrec.Figure{Group: group, Name: "load rate with pipelining", Params: fmt.Sprintf("%s jobs", benchrec.FormatNumber(pending)),
		Value: float64(pending) / loadTime.Seconds(), Unit: "jobs/s"})
	b.ReportMetric(big, "B/job")

	// Lateness of a stream of jobs due soon, with 1M pending far ahead, in
	// rounds: the figure is the median of the rounds' p99s.
	rounds := benchrec.Rounds(5)
	all := &latencies{}
	var p99s, p50s []float64
	for r := range rounds {
		lat := streamLateness(b, q, fmt.Sprintf("soon%d", r), stream, streamHz)
		all.d, all.early = append(all.d, lat.d...), all.early+lat.early
		p99s, p50s = append(p99s, benchrec.In(lat.p(0.99), "ms")), append(p50s, benchrec.In(lat.p(0.50), "ms"))
	}
	cond := fmt.Sprintf("%s jobs a round at %d/s, %s pending, %d rounds", benchrec.FormatNumber(stream), streamHz, benchrec.FormatNumber(pending), rounds)
	benchrec.Record(b, benchrec.Figure{Group: group, Name: "lateness (fired − due), p99", Params: cond,
		Value: benchrec.Median(p99s), Unit: "ms", Better: benchrec.Lower, Samples: p99s, Dist: benchrec.Dist(all.d, "ms"),
		Goals: []benchrec.Goal{benchrec.Below("value", 50)},
		Note: fmt.Sprintf("median of %d rounds' p99s; p50 %.2f ms, max %v; the seed polls once a second (up to 1 s late, not measured)",
			rounds, benchrec.Median(p50s), all.p(1).Round(10*time.Microsecond))})
	benchrec.Record(b, benchrec.Figure{Group: group, Name: "fired early", Params: cond,
		Value: float64(all.early), Unit: "jobs", Better: benchrec.Lower, Goals: []benchrec.Goal{benchrec.AtMost("value", 0)},
		Note: "over every round"})
	b.ReportMetric(benchrec.Median(p99s), "p99-ms")

	// Throughput: burst jobs all due now, no-op handler, in rounds.
	for _, replicas := range []int{1, 2} {
		var rates []float64
		for r := range rounds {
			rates = append(rates, throughput(b, rdb, fmt.Sprintf("now%d-%d", replicas, r), replicas, burst))
		}
		rate := benchrec.Median(rates)
		benchrec.Record(b, benchrec.Figure{Group: group, Name: "firings per second",
			Params: fmt.Sprintf("%d replica(s), %s due at once, %d rounds", replicas, benchrec.FormatNumber(burst), rounds),
			Value:  rate, Unit: "jobs/s", Samples: rates, Note: fmt.Sprintf("median of %d rounds", rounds)})
		b.ReportMetric(rate, fmt.Sprintf("fire/s-%dr", replicas))
	}
}

// measure returns the growth of Redis used_memory during load per job
// loaded (load returns how many).
func measure(b testing.TB, rdb *redis.Client, load func() int) float64 {
	b.Helper()
	before := usedMemory(b, rdb)
	n := load()
	after := usedMemory(b, rdb)
	return float64(after-before) / float64(n)
}

func usedMemory(b testing.TB, rdb *redis.Client) int64 {
	b.Helper()
	return testenv.UsedMemory(b, rdb)
}

// benchID and benchPayload are a realistic order-number id and a ~30 byte
// payload.
func benchID(kind string, i int) string { return fmt.Sprintf("%s:ORD%017d", kind, i) }

func benchPayload(i int) string { return fmt.Sprintf(`{"o":"ORD%017d","s":3}`, i) }

// loadQueue schedules n jobs due around far through pipelines of 1,000
// script calls, from 4 goroutines.
func loadQueue(b testing.TB, q *Queue, kind string, n int, far time.Time) {
	b.Helper()
	loadInto(b, q, q.shardFor, kind, n, far)
}

// loadInto is loadQueue with the shard of each job chosen by pick.
func loadInto(b testing.TB, q *Queue, pick func(id string) *shard, kind string, n int, far time.Time) {
	b.Helper()
	ctx := context.Background()
	if err := scheduleScript.Load(ctx, q.rdb).Err(); err != nil {
		b.Fatal(err)
	}
	const batch, workers = 1000, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for start := w * batch; start < n; start += workers * batch {
				pipe := q.rdb.Pipeline()
				for i := start; i < min(start+batch, n); i++ {
					id := benchID(kind, i)
					bk, s := bucketOf(id), pick(id)
					keys := []string{s.key("top"), s.key("z:" + bk), s.key("h:" + bk), s.key("n"), s.key("seq"), s.key("own")}
					due := far.Add(time.Duration(rand.Int64N(int64(24 * time.Hour))))
					scheduleScript.EvalSha(ctx, pipe, keys, id, ceilMs(due), benchPayload(i), bk, s.chanName())
				}
				if _, err := pipe.Exec(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// loadSeed writes n jobs in the seed's layout: each job as JSON in the
// job-pool hash, and one JSON {jobId, delayTime} item per planned query
// (5 s … 30 min, seven of them) in the delay-bucket sorted set.
func loadSeed(b *testing.B, rdb *redis.Client, n int, far time.Time) {
	b.Helper()
	ctx := context.Background()
	delays := []int64{5, 30, 60, 180, 300, 600, 1800}
	const batch = 1000
	for start := 0; start < n; start += batch {
		pipe := rdb.Pipeline()
		for i := start; i < min(start+batch, n); i++ {
			job := fmt.Sprintf(`{"jobId":%d,"delayTimeList":[5,30,60,180,300,600,1800],"exCount":7,"timeUnit":"SECONDS","timeout":0,"orderCode":"ORD%017d","topic":1,"jobType":0}`, i, i)
			pipe.HSet(ctx, "delayQueue:delayQueueJobPool:DelayedQueueSlotTime", strconv.Itoa(i), job)
			base := far.UnixMilli()
			for _, d := range delays {
				at := base + d*1000
				pipe.ZAdd(ctx, "delayQueue:delayBucket:DelayedQueueSlotTime",
					redis.Z{Score: float64(at), Member: fmt.Sprintf(`{"jobId":%d,"delayTime":%d}`, i, at)})
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// latencies are lateness samples.
type latencies struct {
	d     []time.Duration
	early int
}

// p returns the q-quantile (1 = max).
func (l *latencies) p(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(q*float64(len(l.d))))]
}

// streamLateness schedules n jobs (ids of kind) at hz per second, each due 100–400 ms
// after it is scheduled, runs one replica and returns fired − due.
func streamLateness(b testing.TB, q *Queue, kind string, n, hz int) *latencies {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	res := &latencies{}
	all := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = q.Run(ctx, func(_ context.Context, j Job) error {
			at := time.Now()
			due := time.Unix(0, int64(binary.BigEndian.Uint64(j.Payload)))
			mu.Lock()
			defer mu.Unlock()
			if at.Before(due) {
				res.early++
			}
			res.d = append(res.d, at.Sub(due))
			if len(res.d) == n {
				close(all)
			}
			return nil
		})
	})
	time.Sleep(100 * time.Millisecond) // Run subscribed and asleep
	tick := time.NewTicker(time.Second / time.Duration(hz))
	for i := range n {
		<-tick.C
		due := time.Now().Add(100*time.Millisecond + rand.N(300*time.Millisecond))
		var p [8]byte
		binary.BigEndian.PutUint64(p[:], uint64(due.UnixNano()))
		if err := q.Schedule(ctx, benchID(kind, i), due, p[:]); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		b.Errorf("only %d of %d jobs fired", len(res.d), n)
	}
	cancel()
	wg.Wait()
	return res
}

// throughput schedules n jobs (ids of kind) due now, then runs replicas queues (own
// clients) with a no-op handler until all have fired; it returns
// firings per second.
func throughput(b *testing.B, rdb *redis.Client, kind string, replicas, n int) float64 {
	b.Helper()
	q := New(rdb, Options{Name: "bench"})
	loadQueue(b, q, kind, n, time.Now().Add(-24*time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	for range replicas {
		c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, PoolSize: 32})
		defer c.Close()
		r := New(c, Options{Name: "bench"})
		wg.Go(func() {
			_ = r.Run(ctx, func(context.Context, Job) error {
				if done.Add(1) == int64(n) {
					close(all)
				}
				return nil
			})
		})
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		b.Errorf("only %d of %d jobs fired", done.Load(), n)
	}
	elapsed := time.Since(t0)
	cancel()
	wg.Wait()
	return float64(n) / elapsed.Seconds()
}
