// Package delayq is a Redis delay queue: jobs are scheduled by id for a due
// time and run by a handler on any number of replicas.
//
// Guarantees:
//   - Never early: a job fires only when the queue's time source has reached
//     its due time (rounded up to the millisecond). In production that source
//     is the Redis server's TIME, read inside the claim script, so a replica
//     with a skewed clock cannot fire anything early; its own clock only
//     decides when to ask.
//   - Precise: a replica sleeps until the earliest due time and is woken
//     early, through a per-shard pub/sub channel, when a job due earlier is
//     scheduled. A slow re-check (every 5 s) covers lost notifications.
//   - Each firing runs once across replicas: claims are atomic (Lua) and move
//     the job to an in-flight set with a lease deadline, renewed while the
//     handler runs.
//   - Nothing lost, at-least-once: when a replica dies mid-job its lease
//     expires and another replica runs the job again (Attempt+1). Handlers
//     must therefore be idempotent.
//   - Upsert by id: Schedule replaces a job's payload and due time, even
//     while it runs; the new schedule survives the running attempt's end
//     (generations in the scripts), and a firing that comes due while the
//     previous attempt still runs waits for it, so one id never runs twice
//     at once on healthy replicas.
//
// Shards: on a Redis Cluster (Options.Cluster), a queue's jobs are spread
// over Shards hash tags by a hash of their id, so the queue's work spreads
// over the masters; on a single Redis they all live under one tag, claimed
// by one loop. Everything about one job (its firing, record, lease) stays in
// its shard; each replica claims every shard, each with a loop of its own
// that keeps the guarantees above for that shard. The single-tag layout
// of earlier versions is claimed as one more shard, so jobs scheduled
// before an upgrade still fire (see Queue.Schedule).
//
// Time source: with Options.Clock nil or clock.Real, due times are compared
// against Redis TIME. With any other Clock (clock.Fake in tests) its Now is
// passed to the scripts instead and the queue sleeps on its timers, so a
// test can Advance through minutes of schedule without sleeping and due
// jobs fire promptly after each Advance; all replicas of such a queue must
// share that Clock. Leases (crash detection) always use Redis TIME and
// wall-clock renewals, so an Advance never expires the lease of a handler
// that is still running.
package delayq

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/backoff"
	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// ErrEmptyID is returned by Schedule and Cancel for an empty job id.
var ErrEmptyID = errors.New("delayq: empty job id")

const (
	// buckets is the number of hash buckets job ids are spread over.
	buckets = 1 << 15
	// hintBuckets is the least number of buckets due first that a claim
	// reply names for the next claim to declare.
	hintBuckets = 16
	// recheck bounds every sleep so a lost wake-up notification costs at
	// most this much lateness.
	recheck = 5 * time.Second
	// finishTimeout bounds the Redis calls that end an attempt.
	finishTimeout = 5 * time.Second
	// maxBackoff caps the retry delay after handler errors (see retryDelay).
	maxBackoff = 5 * time.Minute
)

// Options configure a Queue.
type Options struct {
	// Name prefixes the queue's keys, e.g. "orderflow:reconcile"; every key
	// is "{<Name>}:..." (one Redis Cluster slot), or with Cluster
	// "{<Name>:s<shard>}:..." so each shard lives in a slot of its own.
	Name string
	// Cluster spreads the queue over Shards hash tags, for a Redis
	// Cluster, whose masters then share its work; the single-tag layout
	// is then claimed as one more shard, so jobs scheduled before sharding
	// still fire. It is implied when the client is a *redis.ClusterClient;
	// set it when a Cluster is reached through another client type. On a
	// single Redis (or Sentinel's one master) sharding only costs: one
	// claim per shard per poll and fewer jobs per claim. Every replica of
	// a queue must agree on it.
	Cluster bool
	// Clock is the time due times are waited for. Nil or clock.Real means
	// due times are compared against Redis TIME; any other Clock
	// (clock.Fake) is also the time source of the claim (see the package
	// comment). Leases always run on Redis TIME and the wall clock.
	Clock clock.Clock
	// Lease is how long a claimed job stays with its replica without
	// renewal (renewed every Lease/3 while the handler runs); 30 s by default.
	Lease time.Duration
	// Concurrency is the number of handlers run at once; 16 by default.
	Concurrency int
	// Registerer receives the queue's metrics when set.
	Registerer prometheus.Registerer
	// Logger receives errors the queue cannot return; discarded when nil.
	Logger *slog.Logger
}

// Job is one firing handed to the handler.
type Job struct {
	// ID is the id the job was scheduled under.
	ID string
	// Payload is the payload of the latest Schedule.
	Payload []byte
	// Due is the time the firing was due (millisecond precision).
	Due time.Time
	// Attempt counts earlier failed or interrupted attempts of this
	// schedule: 0 on the first run.
	Attempt int
}

// shard is one hash tag's part of a queue: its keys (see keys.go) under
// the tag "{<Name>:s<i>}", or "{<Name>}" for the single-tag layout of
// earlier versions. A job lives in one shard, so every script runs on one
// tag, and a claim, a lease and its expiry stay within the shard.
type shard struct {
	rdb        redis.UniversalClient
	name       string
	tag        string
	clk        clock.Clock
	serverTime bool
	lease      time.Duration
	conc       int
	log        *slog.Logger
	m          *queueMetrics
	// pending is this shard's count of waiting firings as of its last
	// claim; pendingSet adds the shards' counts up into the gauge.
	pending    atomic.Int64
	pendingSet func()
	// seen is called with whether the shard was empty (nothing waiting or
	// running) at each claim; nil when no one asks.
	seen func(empty bool)

	hintMu sync.Mutex
	hint   []string // buckets the last claim reply named
}

// defaults fills in opts' defaults and reports whether due times are
// compared with Redis TIME.
func defaults(opts Options) (Options, bool) {
	serverTime := false
	switch opts.Clock.(type) {
	case nil, clock.Real, *clock.Real:
		serverTime = true
		opts.Clock = clock.Real{}
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return opts, serverTime
}

// newShard returns the shard of opts.Name under hash tag tag.
func newShard(rdb redis.UniversalClient, opts Options, serverTime bool, tag string, m *queueMetrics) *shard {
	return &shard{
		rdb:        rdb,
		name:       opts.Name,
		tag:        tag,
		clk:        opts.Clock,
		serverTime: serverTime,
		lease:      opts.Lease,
		conc:       opts.Concurrency,
		log:        opts.Logger.With(slog.String("queue", opts.Name), slog.String("shard", tag)),
		m:          m,
		pendingSet: func() {},
	}
}

func bucketOf(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return strconv.FormatUint(uint64(h.Sum32()%buckets), 10)
}

// nowArg is the time argument of the scripts: "" makes them read Redis
// TIME; with an injected clock it is that clock's now in ms.
func (q *shard) nowArg() string {
	if q.serverTime {
		return ""
	}
	return strconv.FormatInt(q.clk.Now().UnixMilli(), 10)
}

// ceilMs is t in Unix milliseconds, rounded up so a job never fires before t.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// Schedule (re)schedules job id to fire at due with payload, replacing any
// earlier schedule of id. It may be called while the job runs: that attempt
// ends without deleting or retrying the job, and the new schedule stands.
// When ctx carries a sampled span, its trace context is stored with the
// job and the firing's span continues that trace.
func (q *shard) Schedule(ctx context.Context, id string, due time.Time, payload []byte) error {
	if id == "" {
		return ErrEmptyID
	}
	b := bucketOf(id)
	keys := []string{q.topKey(), q.dueKey(b), q.jobsKey(b), q.countKey(), q.seqKey(), q.ownKey()}
	if err := scheduleScript.Run(ctx, q.rdb, keys, id, ceilMs(due), wrapTrace(ctx, payload), b, q.chanName()).Err(); err != nil {
		return fmt.Errorf("schedule job %s: %w", id, err)
	}
	return nil
}

// Cancel removes job id and reports whether it existed. An attempt already
// running is not interrupted, but it is neither retried nor rescheduled.
func (q *shard) Cancel(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, ErrEmptyID
	}
	b := bucketOf(id)
	keys := []string{q.topKey(), q.dueKey(b), q.jobsKey(b), q.countKey(), q.ownKey()}
	n, err := cancelScript.Run(ctx, q.rdb, keys, id, b).Int()
	if err != nil {
		return false, fmt.Errorf("cancel job %s: %w", id, err)
	}
	return n == 1, nil
}

// Len returns the number of firings waiting for their due time (running
// jobs are not counted).
func (q *shard) Len(ctx context.Context) (int64, error) {
	n, err := q.rdb.Get(ctx, q.countKey()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("queue length: %w", err)
	}
	return n, nil
}

// claimed is a job taken by this replica.
type claimed struct {
	Job
	traceparent string // trace context stored by Schedule, or ""
	fence       string
	bucket      string
	rerun       bool
}

// claimResult is one claim script reply.
type claimResult struct {
	now, next, pending int64     // queue time, next due time (-1: none), waiting firings
	tnow, nextLease    int64     // Redis TIME, next lease deadline (-1: none)
	at                 time.Time // local time the reply arrived
	stopped            bool      // the script stopped at a bucket it was not given
	buckets            []string  // buckets to declare in the next claim
	jobs               []claimed
}

// maxClaimRounds bounds the claim calls one claim makes while the script
// keeps asking for buckets that were not declared.
const maxClaimRounds = 4

// claim takes up to max due jobs. The script touches only declared keys,
// so each call declares the buckets the previous reply named; when the
// script stops at a bucket it was not given, the claim asks again with it.
func (q *shard) claim(ctx context.Context, max int) (claimResult, error) {
	var r claimResult
	for round := 1; ; round++ {
		q.hintMu.Lock()
		hint := q.hint
		q.hintMu.Unlock()
		one, err := q.claimOnce(ctx, max-len(r.jobs), hint)
		if err != nil {
			return r, err
		}
		q.hintMu.Lock()
		q.hint = one.buckets
		q.hintMu.Unlock()
		one.jobs = append(r.jobs, one.jobs...)
		r = one
		if !r.stopped || len(r.jobs) >= max || round == maxClaimRounds {
			return r, nil
		}
	}
}

// claimOnce runs the claim script once with buckets declared.
func (q *shard) claimOnce(ctx context.Context, max int, buckets []string) (claimResult, error) {
	keys := make([]string, 0, 5+2*len(buckets))
	keys = append(keys, q.topKey(), q.runKey(), q.ownKey(), q.countKey(), q.seqKey())
	args := make([]any, 0, 4+len(buckets))
	args = append(args, q.nowArg(), max, q.lease.Milliseconds(), q.chanName())
	for _, b := range buckets {
		keys = append(keys, q.dueKey(b), q.jobsKey(b))
		args = append(args, b)
	}
	v, err := claimScript.Run(ctx, q.rdb, keys, args...).Slice()
	if err != nil {
		return claimResult{}, fmt.Errorf("claim jobs: %w", err)
	}
	r := claimResult{at: time.Now()}
	const head = 7
	if len(v) < head || (len(v)-head)%7 != 0 {
		return r, fmt.Errorf("claim jobs: unexpected reply of %d values", len(v))
	}
	r.now, r.next, r.pending = asInt(v[0]), asInt(v[1]), asInt(v[2])
	r.tnow, r.nextLease = asInt(v[3]), asInt(v[4])
	r.stopped = asInt(v[5]) == 1
	bs, _ := v[6].([]any)
	for _, b := range bs {
		r.buckets = append(r.buckets, asString(b))
	}
	for i := head; i < len(v); i += 7 {
		stored, _ := v[i+1].(string)
		payload, traceparent := unwrapTrace([]byte(stored))
		r.jobs = append(r.jobs, claimed{
			traceparent: traceparent,
			Job: Job{
				ID:      asString(v[i]),
				Payload: payload,
				Due:     time.UnixMilli(asInt(v[i+2])),
				Attempt: int(asInt(v[i+3])),
			},
			fence:  asString(v[i+4]),
			bucket: asString(v[i+5]),
			rerun:  asInt(v[i+6]) == 1,
		})
	}
	return r, nil
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// renew extends the lease of j; false means j was lost to another replica.
func (q *shard) renew(ctx context.Context, j claimed) (bool, error) {
	keys := []string{q.runKey(), q.ownKey()}
	n, err := renewScript.Run(ctx, q.rdb, keys, j.ID, j.fence, q.lease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("renew lease of job %s: %w", j.ID, err)
	}
	return n == 1, nil
}

// finish ends the attempt j with mode "ack", "retry" or "release".
func (q *shard) finish(ctx context.Context, j claimed, mode string, delay time.Duration) error {
	keys := []string{q.topKey(), q.runKey(), q.ownKey(), q.countKey(), q.jobsKey(j.bucket), q.dueKey(j.bucket)}
	err := finishScript.Run(ctx, q.rdb, keys, j.ID, j.fence, mode, q.nowArg(), delay.Milliseconds(), q.chanName(), j.bucket).Err()
	if err != nil {
		return fmt.Errorf("%s job %s: %w", mode, j.ID, err)
	}
	return nil
}

// retryDelay is the delay before retry number attempt+1, drawn from
// [d/2, d] where d is 1 s doubling with each attempt up to 5 min, so the
// replicas whose handlers failed together (the provider or Redis down)
// do not retry together.
func retryDelay(attempt int) time.Duration {
	return backoff.Jitter(backoff.Exponential(time.Second, maxBackoff, attempt))
}

func (q *shard) loop(ctx context.Context, h func(context.Context, Job) error, w *waker, sem chan struct{}, workers *sync.WaitGroup) {
	failures := 0
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	fill:
		for n < q.conc {
			select {
			case sem <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		w.reset()
		r, err := q.claim(ctx, n)
		for range n - len(r.jobs) {
			<-sem
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			q.log.Error("delay queue: claim", slog.Any("err", err))
			pause(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second))
			continue
		}
		failures = 0
		q.pending.Store(r.pending)
		q.pendingSet()
		if q.seen != nil {
			q.seen(r.pending == 0 && r.nextLease < 0 && len(r.jobs) == 0)
		}
		for _, j := range r.jobs {
			if !j.rerun {
				late := time.Duration(r.now-j.Due.UnixMilli())*time.Millisecond + time.Since(r.at)
				q.m.lateness.Observe(late.Seconds())
			}
			q.m.fired.Inc()
			workers.Go(func() {
				defer func() { <-sem }()
				q.work(ctx, h, j)
			})
		}
		if len(r.jobs) == n {
			continue
		}
		q.sleep(ctx, r, w)
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// timerUntil returns a timer of clk that fires at t. With a fake clock
// (fake set) it retries until no Advance slipped in between reading the
// time and arming the timer, so an Advance is never missed.
func timerUntil(clk clock.Clock, fake bool, t time.Time) clock.Timer {
	for {
		n1 := clk.Now()
		tm := clk.NewTimer(t.Sub(n1))
		if !fake || clk.Now().Equal(n1) {
			return tm
		}
		tm.Stop()
	}
}

// alarm is a timer that can only be moved earlier.
type alarm struct {
	clk  clock.Clock
	fake bool
	at   time.Time
	tm   clock.Timer
}

// earlier arms the alarm for t unless it is already armed for t or sooner.
func (a *alarm) earlier(t time.Time) {
	if a.tm != nil && !t.Before(a.at) {
		return
	}
	a.stop()
	a.at, a.tm = t, timerUntil(a.clk, a.fake, t)
}

// c is the alarm's channel; nil (never ready) when it is not armed.
func (a *alarm) c() <-chan time.Time {
	if a.tm == nil {
		return nil
	}
	return a.tm.C()
}

func (a *alarm) stop() {
	if a.tm != nil {
		a.tm.Stop()
	}
}

// sleep waits until the next due time in r, an earlier due time announced
// on the wake channel, the next lease deadline, the re-check interval, or
// the end of ctx.
//
// Lease deadlines and the re-check are in Redis TIME and waited for on
// the wall clock. Due times are in the queue's time: with Redis TIME they
// are converted to this replica's clock through the offset seen in the
// claim reply (so its skew does not matter, and waking a little early only
// costs a claim that finds nothing); with an injected clock they are
// waited for on that clock.
func (q *shard) sleep(ctx context.Context, r claimResult, w *waker) {
	wall := &alarm{clk: clock.Real{}}
	due := wall
	if !q.serverTime {
		due = &alarm{clk: q.clk, fake: true}
	}
	defer func() { wall.stop(); due.stop() }()
	wall.earlier(r.at.Add(recheck))
	if r.nextLease >= 0 {
		wall.earlier(r.at.Add(time.Duration(r.nextLease-r.tnow) * time.Millisecond))
	}
	dueAt := func(ms int64) time.Time {
		if q.serverTime {
			return r.at.Add(time.Duration(ms-r.now) * time.Millisecond)
		}
		return time.UnixMilli(ms)
	}
	if r.next >= 0 {
		due.earlier(dueAt(r.next))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-wall.c():
			return
		case <-due.c():
			return
		case <-w.c:
			if ms, ok := w.take(); ok {
				due.earlier(dueAt(ms))
			}
		}
	}
}

// work runs h on j, renews j's lease meanwhile and ends the attempt.
func (q *shard) work(ctx context.Context, h func(context.Context, Job) error, j claimed) {
	q.m.inFlight.Inc()
	defer q.m.inFlight.Dec()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewCtx, stopRenew := context.WithCancel(hctx)
	var renewing sync.WaitGroup
	var lost atomic.Bool
	renewing.Go(func() {
		q.keepLease(renewCtx, j, func() {
			lost.Store(true)
			cancel()
		})
	})
	sctx, span := q.startFiring(hctx, j)
	err := runHandler(sctx, h, j.Job)
	endFiring(span, err)
	stopRenew()
	renewing.Wait()

	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer fcancel()
	var ferr error
	switch {
	case lost.Load():
		// Another replica runs the job now; this attempt has nothing to end.
	case err == nil:
		ferr = q.finish(fctx, j, "ack", 0)
	case ctx.Err() != nil:
		ferr = q.finish(fctx, j, "release", 0)
	default:
		q.m.retries.Inc()
		q.log.Warn("delay queue: job failed, will retry", slog.String("job_id", j.ID),
			slog.Int("attempt", j.Attempt), slog.Any("err", err))
		ferr = q.finish(fctx, j, "retry", retryDelay(j.Attempt))
	}
	if ferr != nil {
		q.log.Error("delay queue: end attempt (the lease will expire and the job run again)",
			slog.String("job_id", j.ID), slog.Any("err", ferr))
	}
}

// runHandler calls h, turning a panic into an error.
func runHandler(ctx context.Context, h func(context.Context, Job) error, j Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return h(ctx, j)
}

// keepLease renews j's lease every Lease/3 of wall-clock time (leases are
// kept in Redis TIME whatever the Clock) until ctx ends; when the job
// turns out to belong to another attempt it calls lost and returns.
func (q *shard) keepLease(ctx context.Context, j claimed, lost func()) {
	for {
		t := time.NewTimer(q.lease / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ok, err := q.renew(ctx, j)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				q.log.Warn("delay queue: renew lease", slog.String("job_id", j.ID), slog.Any("err", err))
			}
		case !ok:
			q.log.Warn("delay queue: lease lost, handler cancelled", slog.String("job_id", j.ID))
			lost()
			return
		}
	}
}

// waker collects wake-up notifications: the earliest due time announced
// since the last take, and a signal.
type waker struct {
	mu  sync.Mutex
	min int64
	has bool
	c   chan struct{}
}

func newWaker() *waker { return &waker{c: make(chan struct{}, 1)} }

func (w *waker) note(ms int64) {
	w.mu.Lock()
	if !w.has || ms < w.min {
		w.min, w.has = ms, true
	}
	w.mu.Unlock()
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *waker) take() (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ms, ok := w.min, w.has
	w.has = false
	return ms, ok
}

// reset forgets notifications that a claim about to run will see anyway.
func (w *waker) reset() {
	w.take()
	select {
	case <-w.c:
	default:
	}
}
