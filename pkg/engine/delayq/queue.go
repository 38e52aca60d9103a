package delayq

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shards is the number of hash tags a sharded queue's jobs are spread
// over (see Options.Cluster), so that on a Redis Cluster the queue's work
// is spread over the masters instead of being bounded by one master's
// core. Every replica must agree on where a job lives, so it is fixed in
// the code, not configured: changing it strands the jobs of the shards
// that go.
const Shards = 16

// shardOf is the shard of job id: FNV-1a of the id, modulo Shards (as
// buckets are FNV-1a modulo a multiple of Shards, a bucket's jobs all live
// in one shard).
func shardOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % Shards)
}

// Queue is a delay queue on Redis. On a single Redis (or Sentinel's one
// master) every key lives under the one hash tag "{<Name>}". On a Redis
// Cluster (Options.Cluster) it is Shards shards, each with every key of
// its own under one hash tag, plus that single-tag layout, which takes no
// new jobs there but is run until it is empty (see Schedule). Its methods
// are safe for concurrent use.
type Queue struct {
	rdb    redis.UniversalClient
	conc   int
	shards []*shard
	legacy *shard // the single-tag layout beside the shards; nil unsharded
	m      *queueMetrics

	legacyMu    sync.Mutex
	legacyEmpty bool
	legacyAt    time.Time // when legacyEmpty was learnt (zero: never)
}

// legacyFresh is how long what was learnt of the earlier layout's
// emptiness stands before it is looked at again.
const legacyFresh = 2 * recheck

// New returns a Queue named opts.Name on rdb, sharded when opts.Cluster
// is set or rdb is a *redis.ClusterClient.
func New(rdb redis.UniversalClient, opts Options) *Queue {
	opts, serverTime := defaults(opts)
	m := newQueueMetrics(opts.Registerer, opts.Name)
	q := &Queue{rdb: rdb, conc: opts.Concurrency, m: m}
	if _, ok := rdb.(*redis.ClusterClient); !ok && !opts.Cluster {
		q.shards = []*shard{newShard(rdb, opts, serverTime, "{"+opts.Name+"}", m)}
		q.shards[0].pendingSet = q.setPending
		return q
	}
	for i := range Shards {
		q.shards = append(q.shards, newShard(rdb, opts, serverTime, "{"+opts.Name+":s"+strconv.Itoa(i)+"}", m))
	}
	q.legacy = newShard(rdb, opts, serverTime, "{"+opts.Name+"}", m)
	q.legacy.seen = q.noteLegacy
	for _, s := range q.all() {
		s.pendingSet = q.setPending
	}
	return q
}

// all returns the shards and the earlier layout's keys, last, if any.
func (q *Queue) all() []*shard {
	if q.legacy == nil {
		return q.shards
	}
	return append(q.shards[:len(q.shards):len(q.shards)], q.legacy)
}

// shardFor returns the shard of job id.
func (q *Queue) shardFor(id string) *shard {
	if len(q.shards) == 1 {
		return q.shards[0]
	}
	return q.shards[shardOf(id)]
}

// setPending sets the pending gauge to the shards' counts added up.
func (q *Queue) setPending() {
	var n int64
	for _, s := range q.all() {
		n += s.pending.Load()
	}
	q.m.pending.Set(float64(n))
}

// noteLegacy records whether the earlier layout's keys were empty.
func (q *Queue) noteLegacy(empty bool) {
	q.legacyMu.Lock()
	q.legacyEmpty, q.legacyAt = empty, time.Now()
	q.legacyMu.Unlock()
}

// legacyBusy reports whether the earlier layout may still hold jobs: what
// its claims (while Run runs) or a look at its counts learnt within
// legacyFresh, else a new look. It errs on the side of busy. An
// unsharded queue has no earlier layout beside it.
func (q *Queue) legacyBusy(ctx context.Context) bool {
	if q.legacy == nil {
		return false
	}
	q.legacyMu.Lock()
	empty, at := q.legacyEmpty, q.legacyAt
	q.legacyMu.Unlock()
	if !at.IsZero() && time.Since(at) < legacyFresh {
		return !empty
	}
	pipe := q.rdb.Pipeline()
	n := pipe.Get(ctx, q.legacy.countKey())
	run := pipe.ZCard(ctx, q.legacy.runKey())
	_, _ = pipe.Exec(ctx)
	if (n.Err() != nil && !errors.Is(n.Err(), redis.Nil)) || run.Err() != nil {
		return true
	}
	pending, _ := n.Int64()
	empty = pending == 0 && run.Val() == 0
	q.noteLegacy(empty)
	return !empty
}

// Schedule (re)schedules job id to fire at due with payload, replacing any
// earlier schedule of id. It may be called while the job runs: that attempt
// ends without deleting or retrying the job, and the new schedule stands.
// When ctx carries a sampled span, its trace context is stored with the
// job and the firing's span continues that trace.
//
// On a sharded queue the job goes to its shard. While the earlier single-tag layout may still
// hold jobs (a rolling upgrade), the job is then cancelled there, so the
// new schedule replaces one made by an earlier version; an attempt of the
// earlier layout already running finishes without a retry, and only if
// the new schedule comes due before it ends can the two overlap.
func (q *Queue) Schedule(ctx context.Context, id string, due time.Time, payload []byte) error {
	if id == "" {
		return ErrEmptyID
	}
	if err := q.shardFor(id).Schedule(ctx, id, due, payload); err != nil {
		return err
	}
	if q.legacyBusy(ctx) {
		if _, err := q.legacy.Cancel(ctx, id); err != nil {
			return fmt.Errorf("schedule job %s: cancel its earlier schedule: %w", id, err)
		}
	}
	return nil
}

// Cancel removes job id and reports whether it existed. An attempt already
// running is not interrupted, but it is neither retried nor rescheduled.
func (q *Queue) Cancel(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, ErrEmptyID
	}
	had, err := q.shardFor(id).Cancel(ctx, id)
	if err != nil {
		return false, err
	}
	if q.legacyBusy(ctx) {
		old, err := q.legacy.Cancel(ctx, id)
		if err != nil {
			return had, err
		}
		had = had || old
	}
	return had, nil
}

// Len returns the number of firings waiting for their due time (running
// jobs are not counted).
func (q *Queue) Len(ctx context.Context) (int64, error) {
	pipe := q.rdb.Pipeline()
	var cmds []*redis.StringCmd
	for _, s := range q.all() {
		cmds = append(cmds, pipe.Get(ctx, s.countKey()))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("queue length: %w", err)
	}
	var total int64
	for _, c := range cmds {
		n, _ := c.Int64()
		total += n
	}
	return total, nil
}

// Run claims due jobs and runs h on at most Concurrency of them at once
// until ctx ends, then waits for running handlers and returns nil. When h
// returns nil the job is deleted (unless it was rescheduled meanwhile); on
// error it is retried after a backoff of 1 s, 2 s, 4 s, ... (at most
// 5 min) with Attempt+1. Handlers receive a context that ends when ctx
// ends or when the job's lease is lost; a handler interrupted by shutdown
// puts its job back for another replica.
//
// An unsharded queue is claimed by one loop that sleeps until the
// earliest due time, is woken by the queue's wake-up channel and
// re-checks every 5 s. On a sharded queue each shard (and the earlier
// layout's keys) is claimed by such a loop of its own; the loops share
// the Concurrency handler slots.
func (q *Queue) Run(ctx context.Context, h func(ctx context.Context, j Job) error) error {
	wakers := make(map[string]*waker)
	var chans []string
	for _, s := range q.all() {
		wakers[s.chanName()] = newWaker()
		chans = append(chans, s.chanName())
	}
	sub := q.rdb.Subscribe(ctx, chans...)
	subCtx, cancelSub := context.WithTimeout(ctx, 2*time.Second)
	if _, err := sub.Receive(subCtx); err != nil && ctx.Err() == nil {
		q.shards[0].log.Warn("delay queue: subscribe to wake-ups", slog.Any("err", err))
	}
	cancelSub()
	var wg sync.WaitGroup
	wg.Go(func() {
		for msg := range sub.Channel() {
			w := wakers[msg.Channel]
			if ms, err := strconv.ParseInt(msg.Payload, 10, 64); err == nil && w != nil {
				w.note(ms)
			}
		}
	})
	sem := make(chan struct{}, q.conc)
	var workers, loops sync.WaitGroup
	for _, s := range q.all() {
		loops.Go(func() { s.loop(ctx, h, wakers[s.chanName()], sem, &workers) })
	}
	loops.Wait()
	workers.Wait()
	_ = sub.Close()
	wg.Wait()
	return nil
}

// Stats returns the queue's counts, added up over the shards if sharded. The overdue
// count is read just after the other counts, not in the same instant.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	for _, s := range q.all() {
		st, err := s.Stats(ctx)
		if err != nil {
			return Stats{}, err
		}
		if st.Now.After(out.Now) {
			out.Now = st.Now
		}
		out.Pending += st.Pending
		if !st.NextDue.IsZero() && (out.NextDue.IsZero() || st.NextDue.Before(out.NextDue)) {
			out.NextDue = st.NextDue
		}
		out.Overdue += st.Overdue
		out.OverdueCapped = out.OverdueCapped || st.OverdueCapped
		out.MaxLateness = max(out.MaxLateness, st.MaxLateness)
		out.InFlight += st.InFlight
	}
	return out, nil
}

// Lookup returns job id's state; Scheduled is false when there is no
// such job.
func (q *Queue) Lookup(ctx context.Context, id string) (JobState, error) {
	if id == "" {
		return JobState{}, ErrEmptyID
	}
	st, err := q.shardFor(id).Lookup(ctx, id)
	if err != nil || st.Scheduled || !q.legacyBusy(ctx) {
		return st, err
	}
	return q.legacy.Lookup(ctx, id)
}
