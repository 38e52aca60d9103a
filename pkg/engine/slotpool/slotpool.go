// Package slotpool caps the jobs running at an N-slot downstream (the
// legacy fulfilment system) across every replica of a worker: a running
// pool of at most N holders and a fair pending queue, both in Redis.
//
// Waiters carry a Class: a fairness group (for example the member who
// placed the order) and a Priority. Slots are granted by weighted fair
// queuing across groups (round robin with equal weights; weights are set
// at run time with SetWeight), first come, first served within a group.
// High-priority waiters go first, but while a normal waiter waits at most
// Options.StarveAfter high grants in a row are made before a normal one.
// Options.GroupCap optionally bounds the slots one group may hold. With
// every waiter in one group and one priority the queue is strictly FIFO.
//
// A job stays recorded in Redis from Acquire until Release: first in the
// pending queue, then in the running pool as a holder with a lease, so a
// crashed worker loses nothing that was taken off the queue. Holders renew
// their lease (KeepAlive); a holder that stops renewing is reclaimed once
// its deadline passes, recorded in the finished stream as Failed ("lease
// expired") and its slot given to the next waiter. With a job limit
// (Options.JobLimit), a reclaimed slot, whose job may still be running at
// the downstream, first stays counted against N as an orphan until the
// job limit has passed, so N holds even when a holder loses Redis (or
// dies) while its job goes on downstream. Waiters renew a
// heartbeat while they wait, so a crashed waiter is dropped instead of
// blocking the queue.
//
// Every change is one Lua script over keys sharing the hash tag {<name>}
// (Redis Cluster safe). Grants happen inside the scripts: a release, a
// reclaim or a capacity increase promotes the head of the pending queue at
// once; the calling replica hands the slot to its own waiter directly and
// the script publishes a grant for another replica's waiter on that
// replica's channel, so the waiter wakes without polling; a slow re-check
// (Options.CheckInterval) covers lost notifications. A script that grants
// a slot also lines up, in fair order, the next waiters as standbys of
// holders of their own replica; a release starts its standby waiting in
// the same process at once, before its round trip, and the release's
// script then records the hand-over (until it runs, the holder's record
// stands for the standby; see scripts.go). Deadlines use
// Redis server time, so clock skew between replicas does not matter; the
// injected Clock only paces the loops and measures wait times.
package slotpool

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/platform/clock"
)

var (
	// ErrLost means the slot's lease expired and was reclaimed (the job was
	// recorded as Failed "lease expired"), or the slot was already released.
	ErrLost = errors.New("slot lost: lease reclaimed or already released")
	// ErrDropped means the waiter's heartbeat expired while it was pending
	// (it stalled for longer than its lease) and it was removed from the
	// queue; the caller may Acquire again.
	ErrDropped = errors.New("waiter dropped from the pending queue")
)

// Outcome is how a job that held a slot ended.
type Outcome int

const (
	// Completed means the downstream finished the job.
	Completed Outcome = iota + 1
	// Failed means the job ended in error (or its lease expired).
	Failed
)

// String returns "completed" or "failed".
func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// MarshalText writes the outcome as its name, for JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Options configure a Pool. Every replica of a worker must use the same
// Name; Lease and CheckInterval may differ per replica.
type Options struct {
	// Name prefixes the keys and is their hash tag: "orderflow:fulfilment"
	// gives keys "{orderflow:fulfilment}:holders" and so on. It must not
	// contain braces.
	Name string
	// Capacity is N when the pool is first used; afterwards N lives in
	// Redis and is changed with SetCapacity. Default 1.
	Capacity int
	// Lease is how long a holder keeps its slot without renewing (KeepAlive
	// renews every Lease/3 and gives the slot up at 5/6 of it), and how long
	// a waiter stays queued without a heartbeat (at least 3 ×
	// CheckInterval). Default 30s.
	Lease time.Duration
	// JobLimit is the longest a job started under a slot may run at the
	// downstream. A slot whose lease expires stays counted against N, as
	// an orphan, until JobLimit has passed since it was reclaimed (its
	// holder starts nothing once the lease has run out). 0 frees it at
	// once, for holders whose work cannot outlive their lease. The pool
	// keeps the value the last replica to acquire declared.
	JobLimit time.Duration
	// Clock paces the loops and measures wait times; the wall clock when nil.
	Clock clock.Clock
	// CheckInterval paces the janitor (Run) and the waiters' heartbeat and
	// fallback re-check. Default min(1s, Lease/3).
	CheckInterval time.Duration
	// FinishedMaxLen caps the finished stream (approximately). Default 10000.
	FinishedMaxLen int64
	// Registerer receives the pool's metrics; none when nil. Registering
	// two Pools of the same Name shares their series; a conflicting
	// registration panics.
	Registerer prometheus.Registerer
	// Logger reports the janitor's Redis errors; discarded when nil.
	Logger *slog.Logger
	// GroupCap is K when the pool is first used: at most K slots held by
	// one group; 0 (the default) means no cap. Afterwards it lives in
	// Redis and is changed with SetFairness.
	GroupCap int
	// StarveAfter is the anti-starvation bound when the pool is first
	// used: while a normal-priority waiter is eligible, at most this many
	// high-priority grants are made in a row. Default 4; afterwards it
	// lives in Redis and is changed with SetFairness.
	StarveAfter int
	// Replica names this process (e.g. its host or pod name) to operators:
	// it starts the tokens of its waiters and holders ("<replica>~…"), so
	// a snapshot shows which replica holds each slot. Characters other
	// than letters, digits, '.', '_' and '-' are dropped, and it is cut at
	// 63. Empty: tokens name no replica.
	Replica string
}

// Priority orders waiters across groups: high-priority waiters are granted
// before normal ones, within the anti-starvation bound.
type Priority int

const (
	// Normal is the default priority.
	Normal Priority = iota
	// High waiters are granted before Normal ones.
	High
)

// String returns "normal" or "high".
func (p Priority) String() string {
	if p == High {
		return "high"
	}
	return "normal"
}

// MarshalText writes the priority as its name, for JSON.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p Priority) tier() string {
	if p == High {
		return "1"
	}
	return "2"
}

// Class says how a waiter is queued: its fairness group and priority.
type Class struct {
	// Group is the fairness key (for example a member id); "" is a group
	// of its own. It must not contain a NUL byte and is at most
	// MaxGroupLen bytes.
	Group string
	// Priority is Normal or High.
	Priority Priority
}

// MaxGroupLen bounds the length of a fairness group's name.
const MaxGroupLen = 256

// MaxWeight bounds a group's weight.
const MaxWeight = 1000

func (c Class) validate() error {
	if len(c.Group) > MaxGroupLen || strings.ContainsRune(c.Group, 0) {
		return fmt.Errorf("group %q: want at most %d bytes and no NUL", c.Group, MaxGroupLen)
	}
	if c.Priority != Normal && c.Priority != High {
		return fmt.Errorf("invalid priority %d", int(c.Priority))
	}
	return nil
}

// Pool is a handle on one running pool and pending queue in Redis. It is
// safe for concurrent use; each replica builds its own.
type Pool struct {
	rdb      redis.UniversalClient
	name     string
	keys     []string
	lib      *library
	common   []any // the ARGV every function starts with (see scripts.go)
	channel  string
	route    string // starts this Pool's tokens; its grants come on channel+":"+route
	replica  string // Options.Replica as tokens carry it: the actor of Seed
	capacity int
	groupCap int
	starve   int
	lease    time.Duration
	jobLimit time.Duration
	check    time.Duration
	waitTTL  time.Duration
	maxLen   int64
	clock    clock.Clock
	log      *slog.Logger
	metrics  *poolMetrics
	notify   *notifier
	batch    batcher
	// overCap records whether the last script answer of this Pool found
	// more slots held than the capacity (a lowered capacity not yet
	// reached): then a release starts no standby in process.
	overCap atomic.Bool
	// seenCap is the capacity the last script answer of this Pool reported
	// (Options.Capacity until the first answer): a Sharded pool routes new
	// waiters away from shards seen with none.
	seenCap atomic.Int64
}

// New returns a Pool on rdb. It does not touch Redis.
func New(rdb redis.UniversalClient, opts Options) *Pool {
	if opts.Name == "" {
		opts.Name = "orderflow:slotpool"
	}
	if opts.Capacity < 1 {
		opts.Capacity = 1
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = min(time.Second, opts.Lease/3)
	}
	if opts.FinishedMaxLen <= 0 {
		opts.FinishedMaxLen = 10000
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.GroupCap < 0 {
		opts.GroupCap = 0
	}
	if opts.StarveAfter < 1 {
		opts.StarveAfter = 4
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	tag := "{" + opts.Name + "}"
	replica := replicaName(opts.Replica)
	route := newRoute(replica)
	p := &Pool{
		rdb:  rdb,
		name: opts.Name,
		lib:  poolLibrary,
		keys: []string{
			tag + ":capacity", tag + ":holders", tag + ":hold", tag + ":pending",
			tag + ":pinfo", tag + ":pdeadline", tag + ":seq", tag + ":finished", tag + ":reclaimed",
			tag + ":queue", tag + ":pmeta", tag + ":hmeta", tag + ":active1", tag + ":active2",
			tag + ":vt", tag + ":gheld", tag + ":weights", tag + ":settings", tag + ":standby",
			tag + ":origin",
			tag + ":orphans",
		},
		common:   []any{opts.Capacity, opts.FinishedMaxLen, tag + ":granted", opts.GroupCap, opts.StarveAfter, route},
		channel:  tag + ":granted",
		route:    route,
		replica:  replica,
		capacity: opts.Capacity,
		groupCap: opts.GroupCap,
		starve:   opts.StarveAfter,
		lease:    opts.Lease,
		jobLimit: max(opts.JobLimit, 0),
		check:    opts.CheckInterval,
		waitTTL:  max(opts.Lease, 3*opts.CheckInterval),
		maxLen:   opts.FinishedMaxLen,
		clock:    opts.Clock,
		log:      opts.Logger,
		metrics:  newMetrics(opts.Registerer, opts.Name),
		notify:   newNotifier(rdb, tag+":granted", tag+":granted:"+route, SubscriptionLinger),
	}
	p.seenCap.Store(int64(opts.Capacity))
	return p
}

// SubscriptionLinger is how long a Pool keeps its grant subscription open
// after its last waiter left, so that the next waiter finds it warm.
const SubscriptionLinger = 30 * time.Second

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Key indexes into p.keys, in the order the scripts expect.
const (
	keyCapacity = iota
	keyHolders
	keyHold
	keyPending
	keyPendingInfo
	keyPendingDeadline
	keySeq
	keyFinished
	keyReclaimed
	keyQueue
	keyPendingMeta
	keyHoldMeta
	keyActiveHigh
	keyActiveNormal
	keyVirtualTags
	keyGroupHeld
	keyWeights
	keySettings
	keyStandby
	keyOrigin
	keyOrphans
)

// result is a script's answer (see scripts.go).
type result struct {
	status    int64
	grantedMs int64
	reclaimed int64
	dropped   int64
	capacity  int64
	inUse     int64
	waiting   int64
	granted   []string
	now       int64    // the script's Redis time (ms): the grant time of granted
	standbys  []string // lined up by the call: holder, standby, holder, standby, …
}

// exec runs o with the common ARGV (through the Pool's batcher), parses
// the result and updates metrics.
func (p *Pool) exec(ctx context.Context, o *op, args ...any) (result, error) {
	a, err := p.run(ctx, o, args)
	if err != nil {
		return result{}, err
	}
	v, ok := a.([]any)
	if !ok {
		return result{}, fmt.Errorf("slotpool script: answer is %T, want an array", a)
	}
	if len(v) != 10 {
		return result{}, fmt.Errorf("slotpool script: %d values, want 10", len(v))
	}
	var r result
	for i, dst := range []*int64{&r.status, &r.grantedMs, &r.reclaimed, &r.dropped, &r.capacity, &r.inUse, &r.waiting, 8: &r.now} {
		if dst == nil {
			continue // the granted tokens, below
		}
		n, ok := v[i].(int64)
		if !ok {
			return result{}, fmt.Errorf("slotpool script: value %d is %T, want int64", i, v[i])
		}
		*dst = n
	}
	r.granted, r.standbys = stringList(v[7]), stringList(v[9])
	// Hand the slots this call granted straight to their waiters when they
	// wait in this process (the script published those grants nowhere);
	// the published grant messages reach the other replicas. Likewise note
	// the standbys lined up for the slots held here.
	for _, tok := range r.granted {
		p.notify.deliver(tok, r.now)
	}
	for i := 0; i+1 < len(r.standbys); i += 2 {
		if routeOf(r.standbys[i]) == p.route {
			p.notify.lineUp(r.standbys[i], r.standbys[i+1])
		}
	}
	p.overCap.Store(r.inUse > r.capacity)
	p.seenCap.Store(r.capacity)
	p.metrics.observe(r)
	return r, nil
}

// maxInFlight bounds the script calls (alone or batched) a Pool has on
// their way to Redis at once; the calls made meanwhile wait and go
// together in the next one.
const maxInFlight = 2

// batcher sends a Pool's script calls. A call made while maxInFlight
// calls are on their way waits in the queue; when one comes back, its
// sender hands everything queued meanwhile to the first queued call's
// goroutine, which sends it as one call of batchOp (or as a call of its
// own function when it is alone). Calls made at the same moment (the
// releases of jobs that end together and the acquires that follow them)
// thus share one round trip and one begin (see scripts.go).
type batcher struct {
	mu       sync.Mutex
	inflight int
	queue    []*call
}

// call is one script call going through the batcher.
type call struct {
	o    *op
	args []any         // the function's own ARGV (after the common ARGV)
	turn chan []*call  // the batch this call's goroutine is to send
	done chan struct{} // closed once v and err are set
	v    any
	err  error
}

// run sends the call of o with args (through the batcher when batchOp
// runs o) and returns the function's answer.
func (p *Pool) run(ctx context.Context, o *op, args []any) (any, error) {
	if p.lib.number[o] == 0 {
		return p.runOne(ctx, o, args)
	}
	b := &p.batch
	c := &call{o: o, args: args, done: make(chan struct{})}
	b.mu.Lock()
	if b.inflight < maxInFlight {
		b.inflight++
		b.mu.Unlock()
		p.send(ctx, []*call{c})
		return c.v, c.err
	}
	c.turn = make(chan []*call, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	for {
		select {
		case <-c.done:
			return c.v, c.err
		case batch := <-c.turn:
			p.send(ctx, batch)
		case <-ctx.Done():
			b.mu.Lock()
			if i := slices.Index(b.queue, c); i >= 0 {
				b.queue = slices.Delete(b.queue, i, i+1)
				b.mu.Unlock()
				return nil, ctx.Err()
			}
			b.mu.Unlock()
			// Taken into a batch: its goroutine may have to send it.
			select {
			case <-c.done:
			case batch := <-c.turn:
				p.send(ctx, batch)
			}
			return c.v, c.err
		}
	}
}

// send runs batch (one round trip), sets every call's answer, then hands
// the calls queued meanwhile to the first one's goroutine.
func (p *Pool) send(ctx context.Context, batch []*call) {
	if len(batch) == 1 {
		c := batch[0]
		c.v, c.err = p.runOne(ctx, c.o, c.args)
	} else {
		n := len(p.common)
		for _, c := range batch {
			n += 2 + len(c.args)
		}
		argv := append(make([]any, 0, n), p.common...)
		for _, c := range batch {
			argv = append(append(argv, p.lib.number[c.o], len(c.args)), c.args...)
		}
		// The batch carries other callers' calls: one caller giving up
		// does not stop it.
		a, err := p.lib.call(context.WithoutCancel(ctx), p.rdb, batchOp, p.keys, argv)
		v, ok := a.([]any)
		if err == nil && (!ok || len(v) != len(batch)) {
			err = fmt.Errorf("slotpool batch: answer %T of %d for %d calls", a, len(v), len(batch))
		}
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.v = v[i]
			}
		}
	}
	b := &p.batch
	b.mu.Lock()
	next := b.queue
	b.queue = nil
	if len(next) == 0 {
		b.inflight--
	}
	b.mu.Unlock()
	if len(next) > 0 {
		next[0].turn <- next
	}
	for _, c := range batch {
		close(c.done)
	}
}

// runOne runs o alone with the common ARGV and args.
func (p *Pool) runOne(ctx context.Context, o *op, args []any) (any, error) {
	argv := make([]any, 0, len(p.common)+len(args))
	argv = append(append(argv, p.common...), args...)
	return p.lib.call(ctx, p.rdb, o, p.keys, argv)
}

// stringList returns the strings of a script's list value.
func stringList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, t := range l {
			if s, ok := t.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// routeOf returns the grant route of a token (before its last ".").
func routeOf(token string) string {
	if i := strings.LastIndexByte(token, '.'); i >= 0 {
		return token[:i]
	}
	return ""
}

// Slot is a held slot. Keep it alive with KeepAlive while the job runs,
// Confirm it right before acting on it at the downstream, and give it back
// with Release.
type Slot struct {
	p        *Pool
	released atomic.Bool
	mu       sync.Mutex
	// heldUntil is, on the pool's clock, a time before which the lease
	// cannot have run out: the grant's or the last renewal's deadline,
	// measured from before the round trip that set it.
	heldUntil time.Time
	// JobID is the job the slot was acquired for.
	JobID string
	// Token identifies this grant; it is unique per Acquire.
	Token string
	// Class is the group and priority the slot was granted in.
	Class Class
	// Since is when the slot was granted (Redis server time); for a slot
	// started by its holder's release in this process (a standby), when
	// that release started it, on this process's clock.
	Since time.Time
	// x is the release that started this slot as its holder's standby
	// (nil otherwise): the slot's own round trips wait for its answer.
	x *transfer
	// next is the standby this slot's release started, named again when
	// the release is retried.
	next *waiter
}

// Acquire queues jobID in the default class (group "", normal priority)
// and blocks until the pool grants it a slot. With every caller in one
// class the grants are in strict FIFO order across all replicas.
func (p *Pool) Acquire(ctx context.Context, jobID string) (*Slot, error) {
	return p.AcquireClass(ctx, jobID, Class{})
}

// AcquireClass queues jobID at the tail of its class's queue and blocks
// until the pool grants it a slot by the fair-queuing rule (see the
// package doc). When ctx ends first, the waiter is withdrawn; a slot
// granted at that very moment is freed again, never leaked.
func (p *Pool) AcquireClass(ctx context.Context, jobID string, c Class) (slot *Slot, err error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("acquire slot for %s: %w", jobID, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	token := p.newToken()
	defer func() {
		if slot == nil {
			p.notify.forget(token)
		}
	}()
	start := p.clock.Now()
	gm := p.metrics.class(c.Priority)
	gm.waiting.Inc()
	defer gm.waiting.Dec()
	waiterTTL := p.waitTTL.Milliseconds()
	// With the grant subscription already open the waiter registers before
	// it is queued: the grant message cannot come too early, so one round
	// trip queues it and the grant wakes it, with no re-check in between.
	wake := p.notify.warm(token, jobID, c)
	if wake != nil {
		defer p.notify.unregister(token)
	}
	// ref pairs the pool's clock before this waiter's latest round trip
	// with that round trip's Redis time, so that a grant's Redis time
	// gives a lower bound of its lease deadline on the pool's clock.
	ref := clockRef{local: p.clock.Now()}
	r, err := p.exec(ctx, enqueueOp, token, jobID, p.lease.Milliseconds(), waiterTTL, c.Priority.tier(), c.Group, p.jobLimit.Milliseconds())
	if err != nil {
		p.giveUp(ctx, token)
		return nil, fmt.Errorf("acquire slot for %s: %w", jobID, err)
	}
	ref.redisMs = r.now
	if r.status == 1 {
		return p.granted(start, jobID, token, c, gm, r.grantedMs, ref), nil
	}

	recheck := wake == nil
	if wake == nil {
		wake, err = p.notify.register(ctx, token, jobID, c)
		if err != nil {
			p.giveUp(ctx, token)
			return nil, fmt.Errorf("acquire slot for %s: %w", jobID, err)
		}
		defer p.notify.unregister(token)
	}
	t := p.clock.NewTimer(p.check)
	defer t.Stop()
	for {
		// Re-check: covers a grant published before the subscription
		// existed, lost notifications, and renews the waiter's heartbeat.
		if recheck {
			w := queuedWaiter{start: start, jobID: jobID, token: token, c: c, gm: gm, waiterTTL: waiterTTL, wake: wake}
			if slot, done, err := p.poll(ctx, w, &ref); done {
				return slot, err
			}
		}
		recheck = true
		select {
		case <-ctx.Done():
			p.giveUp(ctx, token)
			return nil, ctx.Err()
		case g := <-wake:
			t.Stop()
			if g.x != nil {
				return p.started(start, jobID, token, c, gm, g.x), nil
			}
			return p.granted(start, jobID, token, c, gm, g.ms, ref), nil
		case <-t.C():
			t.Reset(p.check)
		}
	}
}

// queuedWaiter is what poll needs of a waiter AcquireClass queued.
type queuedWaiter struct {
	start     time.Time
	jobID     string
	token     string
	c         Class
	gm        classMetrics
	waiterTTL int64
	wake      <-chan grant
}

// poll re-checks waiter w: it renews its heartbeat and finds a grant
// published before its subscription existed or whose message was lost.
// done says the wait is over, with the slot or the error; ref is updated
// with the round trip's Redis time.
func (p *Pool) poll(ctx context.Context, w queuedWaiter, ref *clockRef) (slot *Slot, done bool, err error) {
	sent := p.clock.Now()
	r, err := p.exec(ctx, pollOp, w.token, w.waiterTTL)
	if err == nil {
		*ref = clockRef{local: sent, redisMs: r.now}
	}
	switch {
	case err != nil && ctx.Err() != nil:
		p.giveUp(ctx, w.token)
		return nil, true, ctx.Err()
	case err != nil:
		p.log.WarnContext(ctx, "slot pool re-check failed", "pool", p.name, "job_id", w.jobID, "error", err)
	case r.status == 1:
		return p.granted(w.start, w.jobID, w.token, w.c, w.gm, r.grantedMs, *ref), true, nil
	case r.status == -1:
		// A release of this process may have started it meanwhile:
		// that release makes it the holder.
		select {
		case g := <-w.wake:
			if g.x != nil {
				return p.started(w.start, w.jobID, w.token, w.c, w.gm, g.x), true, nil
			}
		default:
		}
		return nil, true, fmt.Errorf("acquire slot for %s: %w", w.jobID, ErrDropped)
	}
	return nil, false, nil
}

// clockRef pairs a time on the pool's clock taken before a round trip with
// that round trip's Redis time (ms): Redis time t is then no earlier than
// local + (t - redisMs) on the pool's clock.
type clockRef struct {
	local   time.Time
	redisMs int64
}

func (p *Pool) granted(start time.Time, jobID, token string, c Class, gm classMetrics, grantedMs int64, ref clockRef) *Slot {
	if x := p.notify.claim(token); x != nil {
		// A release of this process started it meanwhile and names it:
		// its own release must not come before that release's.
		return p.started(start, jobID, token, c, gm, x)
	}
	p.observeGrant(start, gm)
	p.notify.hold(token)
	// The script granted the slot with the deadline grantedMs + lease
	// (Redis time), which is no earlier than this on the pool's clock.
	until := ref.local.Add(time.Duration(grantedMs-ref.redisMs)*time.Millisecond + p.lease)
	return &Slot{p: p, JobID: jobID, Token: token, Class: c, Since: time.UnixMilli(grantedMs), heldUntil: until}
}

func (p *Pool) observeGrant(start time.Time, gm classMetrics) {
	waited := p.clock.Now().Sub(start).Seconds()
	p.metrics.wait.Observe(waited)
	gm.wait.Observe(waited)
	gm.grants.Inc()
}

// started returns the slot of a standby that a release of this process
// started (x): until that release's script has run, the holder's record
// stands for it, so its lease is known to last as long as the holder's.
func (p *Pool) started(start time.Time, jobID, token string, c Class, gm classMetrics, x *transfer) *Slot {
	p.observeGrant(start, gm)
	return &Slot{p: p, JobID: jobID, Token: token, Class: c, Since: time.Now(), heldUntil: x.until, x: x}
}

// giveUp withdraws the waiter of token (see abandon); when a release of
// this process has started it meanwhile, it first waits (at most 5 s) for
// that release to make it the holder, so the withdrawal frees that slot.
func (p *Pool) giveUp(ctx context.Context, token string) {
	if x := p.notify.withdraw(token); x != nil {
		select {
		case <-x.ready:
		case <-time.After(5 * time.Second):
		}
	}
	p.abandon(ctx, token)
}

// abandon withdraws a waiter whose Acquire gives up, freeing the slot if it
// was granted meanwhile. It runs even when ctx has ended; on error the
// waiter's heartbeat (or the lease of a granted slot) expires instead.
func (p *Pool) abandon(ctx context.Context, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := p.exec(ctx, cancelOp, token); err != nil {
		p.log.WarnContext(ctx, "slot pool withdraw failed; the entry expires with its lease", "pool", p.name, "error", err)
	}
}

// Renew extends the slot's lease by Options.Lease, or returns ErrLost.
func (s *Slot) Renew(ctx context.Context) error {
	if err := s.settle(ctx); err != nil {
		return fmt.Errorf("renew slot of %s: %w", s.JobID, err)
	}
	sent := s.p.clock.Now()
	r, err := s.p.exec(ctx, renewOp, s.Token, s.p.lease.Milliseconds())
	if err != nil {
		return fmt.Errorf("renew slot of %s: %w", s.JobID, err)
	}
	if r.status != 1 {
		s.p.notify.forget(s.Token)
		return fmt.Errorf("renew slot of %s: %w", s.JobID, ErrLost)
	}
	// The script set the deadline to its Redis time + lease, and it ran
	// after sent.
	s.mu.Lock()
	if until := sent.Add(s.p.lease); until.After(s.heldUntil) {
		s.heldUntil = until
	}
	s.mu.Unlock()
	return nil
}

// settle waits, for a slot started by its holder's release in this process,
// until that release has answered; it returns ErrLost when the release
// found the holder's slot reclaimed and this slot not granted.
func (s *Slot) settle(ctx context.Context) error {
	if s.x == nil {
		return nil
	}
	select {
	case <-s.x.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.x.err == nil && !s.x.ok {
		return ErrLost
	}
	return nil
}

// Confirm makes sure the slot is still held right before its holder acts
// on it at the downstream (sends the job's request): a holder that stalled
// (a stopped process, a long GC pause, a grant message read late) may have
// lost the lease meanwhile, and the pool may have granted the slot to
// another job. While more than two thirds of the lease is known to remain
// since the grant or the last renewal (on the pool's clock, measured from
// before the round trip that made them) it returns nil without a round
// trip; otherwise it renews the lease (one round trip) and returns ErrLost
// if the slot was reclaimed or released. A slot freed by Evict is only
// noticed by that round trip. Nothing can stop a holder stalled between
// Confirm and its request; after a renewal that takes a stall of more
// than a whole lease.
func (s *Slot) Confirm(ctx context.Context) error {
	s.mu.Lock()
	fresh := s.p.clock.Now().Before(s.heldUntil.Add(-s.p.lease * 2 / 3))
	s.mu.Unlock()
	if fresh {
		return nil
	}
	return s.Renew(ctx)
}

// KeepAlive renews the lease every Lease/3 until ctx ends or the slot is
// released. It calls lost (which should stop the job's work) and returns
// when a renewal finds the slot reclaimed (the job is already recorded as
// Failed), or when 5/6 of the lease has passed since the lease was last
// known renewed and no renewal got through (Redis unreachable or too
// slow): the holder then stops acting on the slot before the pool can
// reclaim it. Transient Redis errors are retried until then.
func (s *Slot) KeepAlive(ctx context.Context, lost func()) {
	every := s.p.lease / 3
	t := s.p.clock.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if s.released.Load() {
			return
		}
		err := s.renewBefore(ctx)
		switch {
		case ctx.Err() != nil || s.released.Load():
			return
		case errors.Is(err, ErrLost), errors.Is(err, errNotRenewed):
			if errors.Is(err, errNotRenewed) {
				s.p.log.WarnContext(ctx, "slot lease not renewed in time; giving the slot up", "pool", s.p.name, "job_id", s.JobID, "error", err)
			}
			if lost != nil {
				lost()
			}
			return
		case err != nil:
			s.p.log.WarnContext(ctx, "slot lease renewal failed", "pool", s.p.name, "job_id", s.JobID, "error", err)
		}
		// After a failed renewal the next one is tried at the give-up
		// point at the latest, where renewBefore gives up.
		t.Reset(max(time.Millisecond, min(every, s.giveUpAt().Sub(s.p.clock.Now()))))
	}
}

// errNotRenewed says that the lease could not be renewed before its
// give-up point (see KeepAlive).
var errNotRenewed = errors.New("lease not renewed before 5/6 of it had passed")

// giveUpAt is when, on the pool's clock, KeepAlive gives the slot up
// unless a renewal gets through first: 5/6 of the lease after the time
// the lease is last known renewed.
func (s *Slot) giveUpAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldUntil.Add(-s.p.lease / 6)
}

// renewBefore renews the lease, or returns errNotRenewed (wrapping the
// renewal's error, if any) once the give-up point has passed without an
// answer. A renewal still on its way then is waited for, but its answer
// no longer counts.
func (s *Slot) renewBefore(ctx context.Context) error {
	left := s.giveUpAt().Sub(s.p.clock.Now())
	if left <= 0 {
		return errNotRenewed
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Renew(rctx) }()
	timer := s.p.clock.NewTimer(left)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrLost) && !s.p.clock.Now().Before(s.giveUpAt()) {
			return fmt.Errorf("%w: %w", errNotRenewed, err)
		}
		return err
	case <-timer.C():
		cancel()
		<-done
		return errNotRenewed
	}
}

// Release frees the slot, records the job's outcome and detail in the
// finished stream and grants the slot at once: to the standby the pool
// lined up for it, if any, else to the head of the pending queue. A
// standby waiting in this process is started before the release's round
// trip, while the slot's lease is known to have more than a third left;
// the release's script then makes it the holder. It returns ErrLost if
// the lease had already been reclaimed.
func (s *Slot) Release(ctx context.Context, outcome Outcome, detail string) error {
	_, err := s.release(ctx, outcome, detail)
	return err
}

// release is Release, also returning the waiters it promoted.
func (s *Slot) release(ctx context.Context, outcome Outcome, detail string) ([]string, error) {
	if outcome != Completed && outcome != Failed {
		return nil, fmt.Errorf("release slot of %s: invalid outcome %d", s.JobID, int(outcome))
	}
	if err := s.settle(ctx); err != nil {
		if errors.Is(err, ErrLost) {
			s.released.Store(true)
		}
		return nil, fmt.Errorf("release slot of %s: %w", s.JobID, err)
	}
	s.released.Store(true)
	var x *transfer
	if s.next == nil {
		s.mu.Lock()
		until := s.heldUntil
		s.mu.Unlock()
		if s.p.clock.Now().Before(until.Add(-s.p.lease/3)) && !s.p.overCap.Load() {
			x = &transfer{ready: make(chan struct{}), until: until}
			if s.next = s.p.notify.handOff(s.Token, x); s.next == nil {
				x = nil
			}
		}
	}
	args := []any{s.Token, int(outcome), detail}
	if n := s.next; n != nil {
		args = []any{s.Token, int(outcome), detail, n.token, n.job, s.p.lease.Milliseconds(), n.class.Priority.tier(), n.class.Group}
	}
	r, err := s.p.exec(ctx, releaseOp, args...)
	if err != nil {
		if x != nil {
			x.finish(false, err) // the standby's own round trips find out
		}
		s.released.Store(false) // keep renewing; the caller may retry
		return nil, fmt.Errorf("release slot of %s: %w", s.JobID, err)
	}
	s.p.notify.forget(s.Token)
	if n := s.next; n != nil {
		ok := r.grantedMs != 0
		if x != nil {
			x.finish(ok, nil)
		}
		if !ok {
			// The standby was started but holds nothing: the slot had been
			// reclaimed. Take it out of the queue if it is still there.
			s.p.abandon(ctx, n.token)
		}
	}
	if r.status != 1 {
		return nil, fmt.Errorf("release slot of %s: %w", s.JobID, ErrLost)
	}
	return r.granted, nil
}

// Evict frees the slot granted under token as if its holder had released
// it with Failed and detail, and grants it to the next waiter: for an
// operator freeing a holder known to be dead before its lease runs out.
// It returns ErrLost when no holder has that token. A holder that was in
// fact alive finds its slot lost at its next renewal.
func (p *Pool) Evict(ctx context.Context, token, detail string) error {
	r, err := p.exec(ctx, releaseOp, token, int(Failed), detail)
	if err != nil {
		return fmt.Errorf("evict slot %s: %w", token, err)
	}
	if r.status != 1 {
		return fmt.Errorf("evict slot %s: %w", token, ErrLost)
	}
	return nil
}

// SetCapacity changes N for every replica at once, recording the operator
// WithActor names as its origin (a start keeps it, see Seed). An increase grants the
// new slots to waiters immediately; a decrease lets current holders finish
// and grants nothing until fewer than n are held. n may be 0 (pause). A
// replica learns of a decrease at its next round trip; until then a
// release there may still start its slot's standby, which keeps the number
// of holders as it was (it never raises it).
func (p *Pool) SetCapacity(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("set capacity of %s: negative capacity %d", p.name, n)
	}
	if _, err := p.exec(ctx, setCapacityOp, n, actorFrom(ctx)); err != nil {
		return fmt.Errorf("set capacity of %s: %w", p.name, err)
	}
	return nil
}

// SetFairness changes, for every replica at once, the group cap K (at
// most K slots per group, 0 for none) and the anti-starvation bound (at
// most starveAfter high-priority grants in a row while a normal waiter is
// eligible). A negative argument keeps the current value. The operator
// WithActor names is recorded as their origin.
func (p *Pool) SetFairness(ctx context.Context, groupCap, starveAfter int) error {
	if starveAfter == 0 {
		return fmt.Errorf("set fairness of %s: starvation bound must be at least 1", p.name)
	}
	arg := func(n int) string {
		if n < 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	if _, err := p.exec(ctx, setFairnessOp, arg(groupCap), arg(starveAfter), actorFrom(ctx)); err != nil {
		return fmt.Errorf("set fairness of %s: %w", p.name, err)
	}
	return nil
}

// SetWeight sets group's weight (1 to MaxWeight; default 1) for every
// replica at once: a group of weight w is granted w slots for every one
// granted to a group of weight 1 while both wait. The operator WithActor
// names is recorded as the weights' origin.
func (p *Pool) SetWeight(ctx context.Context, group string, weight int) error {
	if err := (Class{Group: group}).validate(); err != nil {
		return fmt.Errorf("set weight: %w", err)
	}
	if weight < 1 || weight > MaxWeight {
		return fmt.Errorf("set weight of group %q: weight %d not in 1..%d", group, weight, MaxWeight)
	}
	if _, err := p.exec(ctx, setWeightOp, group, weight, actorFrom(ctx)); err != nil {
		return fmt.Errorf("set weight of group %q: %w", group, err)
	}
	return nil
}

// Tick runs one janitor pass: reclaims expired leases, drops stale waiters
// and promotes waiters into free slots. Run calls it every CheckInterval.
func (p *Pool) Tick(ctx context.Context) error {
	if _, err := p.exec(ctx, tickOp); err != nil {
		return fmt.Errorf("slot pool %s janitor: %w", p.name, err)
	}
	return nil
}

// Run is the janitor every replica runs: it calls Tick every CheckInterval
// until ctx ends, logging (and retrying) Redis errors. It returns nil.
func (p *Pool) Run(ctx context.Context) error {
	t := p.clock.NewTimer(p.check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		if err := p.Tick(ctx); err != nil && ctx.Err() == nil {
			p.log.WarnContext(ctx, "slot pool janitor failed", "pool", p.name, "error", err)
		}
		t.Reset(p.check)
	}
}

// newToken returns a new waiter's token: "<route>.<random>", where the
// route is "<replica>~<pool id>" when the pool names its replica and
// "<pool id>" when it does not. The scripts publish a grant on the channel
// of the route the token carries (everything before its last "."), and
// not at all when the Pool of that route made the grant itself (it hands
// the slot over directly).
func (p *Pool) newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return p.route + "." + base64.RawURLEncoding.EncodeToString(b[:])
}

// newRoute returns the grant route of a Pool: its replica's name (if any)
// and a random id, unique even among Pools of one process.
func newRoute(replica string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	if replica == "" {
		return id
	}
	return replica + tokenSep + id
}

// tokenSep ends the replica's name in a token (as in lease.NewToken).
const tokenSep = "~"

// replicaOf returns the replica named by a token ("" when none is).
func replicaOf(token string) string { return lease.OwnerOf(token) }

// replicaName keeps the characters of name a token may carry.
func replicaName(name string) string { return lease.OwnerName(name) }
