// Package worker is the split-worker's engine: it consumes split jobs from
// RabbitMQ, splits each order into shipments at the fulfilment system and
// writes the task's terminal status to Redis.
//
// For one job it
//   - acks and does nothing when the task is gone or already terminal;
//   - takes the task's lease (so two replicas never work on one task),
//     waiting a bounded time when another replica holds it;
//   - builds the plan once and stores it in Redis before any side effect,
//     together with a per-member claim of the order code; a redelivery
//     reuses the stored plan, so it requests the same shipments with the
//     same idempotency keys and no shipment is created twice;
//   - creates the shipments, up to OrderParallelism at once, each inside a
//     running-pool slot queued under the member's fairness group, backing
//     off on 429 and polling the job until it ends, and records each
//     outcome;
//   - writes the result under the lease's fence only after every shipment
//     exists, and then acks.
//
// Transient failures requeue the job (the queue's delivery limit bounds the
// retries); a job dead-lettered after the limit, or rejected as malformed,
// fails its task through the dead-letter consumer.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/backoff"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

// Public messages of whole-task failures; details stay in the logs.
var (
	msgGeneric        = errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_GENERIC)
	msgDeliveryLimit  = errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT)
	msgDuplicateOrder = errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_DUPLICATE_ORDER)
	msgClaimLost      = errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_ORDER_CLAIM_LOST)
)

// Options tune a Worker.
type Options struct {
	// Lease is the TTL of the per-task lease (renewed while working).
	Lease time.Duration
	// LeaseWait bounds the wait for a task whose lease another replica
	// holds before the job is requeued.
	LeaseWait time.Duration
	// Plan bounds what an order may contain.
	Plan plan.Options
	// PollInitial and PollMax bound the backoff between polls of a
	// shipment job and between retries of a 429.
	PollInitial, PollMax time.Duration
	// Pollers bounds the shipment-job polls in flight at once.
	Pollers int
	// ShipmentTimeout bounds the time one shipment may wait for capacity
	// and run before the job is requeued.
	ShipmentTimeout time.Duration
	// TransientRetries is how often a transient fulfilment error is retried
	// in place before the job is requeued.
	TransientRetries int
	// JobMax bounds how long a fulfilment job may run: a slot whose
	// shipment wait ended early is held (and the job polled) at most this
	// long before it is freed.
	JobMax time.Duration
	// OutageHold bounds how long a delivery that failed for a reason that
	// is not the job's own (Redis or the fulfilment system unreachable, the
	// task's lease held by another replica) is held and retried in place
	// before it is requeued, which spends one of its deliveries. Shorter
	// outages spend nothing of the job's delivery budget.
	OutageHold time.Duration
	// RequeueBackoff is the pause before a job that failed transiently is
	// requeued, doubled with each redelivery (up to 32 times), so that a
	// short outage does not use up the delivery limit at once; each pause
	// is drawn from [d/2, d] of that, so replicas do not retry together.
	// It is also the first pause between attempts of a held delivery.
	RequeueBackoff time.Duration
	// Clock tells the time and makes the backoff timers.
	Clock clock.Clock
	// Fairness is how shipments queue for running-pool slots: FairnessMember
	// (the default) groups them by member, FairnessNone queues everyone in
	// one first-come, first-served group.
	Fairness Fairness
	// OrderParallelism bounds the shipments of one order whose jobs run
	// at once (each in its own slot; the next shipment may take a slot
	// while a finished job's slot is being released). Default 4.
	OrderParallelism int
	// Events counts finished and failed tasks and dead letters
	// cluster-wide for the operators' error rates (eventrate.TaskFinished,
	// TaskFailed, DeadLettered); nil counts nothing.
	Events EventCounter
	// InFlight receives this replica's counts of deliveries held and not
	// yet acknowledged, by queue (inflight.Split, Overflow, Dead), every
	// InFlightInterval while Run runs, each report valid for 3 intervals;
	// nil reports nothing.
	InFlight *inflight.Board
	// Replica names this replica's report (see lease.NewToken).
	Replica string
	// InFlightInterval is how often the held counts are reported (2s by
	// default).
	InFlightInterval time.Duration
	// CatalogueMaxAge is how old the fulfilment catalogue that plans are
	// checked against may be (see catalogue); 0 reads it for every plan.
	CatalogueMaxAge time.Duration
}

// EventCounter adds to cluster-wide event counts (eventrate.Counter).
type EventCounter interface {
	AddAll(ctx context.Context, counts map[string]int64) error
}

// count adds to the cluster-wide event counts; a failure only loses the
// counts (logged), never the task's outcome.
func (w *Worker) count(ctx context.Context, counts map[string]int64) {
	if w.opts.Events == nil {
		return
	}
	if err := w.opts.Events.AddAll(context.WithoutCancel(ctx), counts); err != nil {
		w.log.WarnContext(ctx, "count events for the error rates", "err", err)
	}
}

// Fairness selects the running pool's fairness key.
type Fairness string

const (
	// FairnessMember shares the slots round robin across members.
	FairnessMember Fairness = "member"
	// FairnessNone queues every shipment first come, first served.
	FairnessNone Fairness = "none"
)

func (o *Options) defaults() {
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.LeaseWait <= 0 {
		o.LeaseWait = 10 * time.Second
	}
	if o.Plan.ParcelMaxGrams <= 0 {
		o.Plan.ParcelMaxGrams = 20000
	}
	if o.Plan.MaxQuantity <= 0 {
		o.Plan.MaxQuantity = 1000
	}
	if o.PollInitial <= 0 {
		o.PollInitial = 50 * time.Millisecond
	}
	if o.PollMax < o.PollInitial {
		o.PollMax = max(time.Second, o.PollInitial)
	}
	if o.Pollers <= 0 {
		o.Pollers = 8
	}
	if o.ShipmentTimeout <= 0 {
		o.ShipmentTimeout = 2 * time.Minute
	}
	if o.TransientRetries <= 0 {
		o.TransientRetries = 3
	}
	if o.JobMax <= 0 {
		o.JobMax = 10 * time.Minute
	}
	if o.OutageHold <= 0 {
		o.OutageHold = 5 * time.Minute
	}
	if o.RequeueBackoff <= 0 {
		o.RequeueBackoff = 500 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Fairness == "" {
		o.Fairness = FairnessMember
	}
	if o.OrderParallelism <= 0 {
		o.OrderParallelism = 4
	}
	if o.InFlightInterval <= 0 {
		o.InFlightInterval = 2 * time.Second
	}
}

// heldCounts count the deliveries this replica's handlers hold, by queue.
type heldCounts struct{ split, overflow, dead atomic.Int64 }

// snapshot returns the counts by inflight queue name.
func (h *heldCounts) snapshot() map[string]int64 {
	return map[string]int64{inflight.Split: h.split.Load(), inflight.Overflow: h.overflow.Load(), inflight.Dead: h.dead.Load()}
}

// hold counts one more delivery held on c until the returned func is
// called.
func hold(c *atomic.Int64) func() {
	c.Add(1)
	return func() { c.Add(-1) }
}

// class is the running-pool class of job's shipments: the member's group
// (unless fairness is off) and the order's priority.
func (w *Worker) class(job *jobv1.SplitJob) slotpool.Class {
	var c slotpool.Class
	if w.opts.Fairness != FairnessNone {
		c.Group = job.GetMemberId()
	}
	if job.GetPriority() == taskv1.Priority_PRIORITY_HIGH {
		c.Priority = slotpool.High
	}
	return c
}

// Worker processes split jobs.
type Worker struct {
	store   *taskstore.Store
	fc      *fulfilment.Client
	slots   Slots
	log     *slog.Logger
	m       *metrics
	opts    Options
	pollers chan struct{}
	// gate admits jobs fairly across members; nil admits everything
	// (Handle called directly, without Run).
	gate *gate
	// pub hands deliveries back to their queue at shutdown and moves jobs
	// to the overflow queue; nil (Handle called directly, without Run)
	// requeues them instead.
	pub *amqpbus.Publisher
	// names are the queues Run consumes; backlog is the gate's per-member
	// limit beyond which jobs of the split queue move to the overflow
	// queue (0: never).
	names   jobqueue.Names
	backlog int
	// stopping is closed when Run's context ends; finishers hold the
	// slots of shipments whose wait ended early until their jobs end.
	stopping  chan struct{}
	finishers sync.WaitGroup
	// held counts the deliveries handlers hold (reported to InFlight).
	held heldCounts
	// pace times the first poll of a new fulfilment job.
	pace jobPace
	// cat is the catalogue plans are checked against.
	cat *catalogue
}

// New returns a Worker. reg may be nil.
func New(store *taskstore.Store, fc *fulfilment.Client, slots Slots,
	log *slog.Logger, reg prometheus.Registerer, opts Options) *Worker {
	opts.defaults()
	return &Worker{
		store: store, fc: fc, slots: slots, log: log, m: newMetrics(reg), opts: opts,
		pollers: make(chan struct{}, opts.Pollers), stopping: make(chan struct{}),
		cat: &catalogue{fc: fc, clock: opts.Clock, maxAge: opts.CatalogueMaxAge},
	}
}

// ConsumeOptions say where and how fast the worker consumes.
type ConsumeOptions struct {
	Names jobqueue.Names
	// Prefetch is how many split jobs this replica takes off the queue
	// ahead of running them; jobs beyond Concurrency (or beyond a member's
	// MemberConcurrency) wait at the admission gate, unacknowledged.
	Prefetch int
	// Concurrency bounds the split jobs running at once.
	Concurrency int
	// MemberConcurrency bounds the split jobs of one member running at
	// once (0: Concurrency, no per-member bound). Waiting jobs are admitted
	// round robin across members.
	MemberConcurrency int
	// MemberBacklog bounds the jobs of one member this replica holds at
	// its gate (running or waiting). A job of the split queue beyond it is
	// moved to the overflow queue (a confirmed copy, then the original
	// acknowledged: no delivery is spent), so a member's flood leaves the
	// prefetch window, and the split queue, to other members' jobs. The
	// overflow queue is consumed beside the split queue, through the same
	// gate. 0: 2 × the member's concurrency; negative: never move.
	MemberBacklog int
}

// Run consumes split jobs and dead-lettered jobs until ctx ends and every
// handler in progress has returned. Every prefetched job gets a handler,
// which waits at the admission gate until it may run.
func (w *Worker) Run(ctx context.Context, conn *amqpbus.Conn, opts ConsumeOptions) error {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	w.gate = newGate(opts.Concurrency, opts.MemberConcurrency)
	switch {
	case opts.MemberBacklog == 0:
		w.backlog = 2 * w.gate.perMember
	case opts.MemberBacklog > 0:
		w.backlog = opts.MemberBacklog
	}
	w.names = opts.Names
	w.pub = amqpbus.NewPublisher(conn)
	defer w.pub.Close()
	defer w.finishers.Wait()
	stopWatch := context.AfterFunc(ctx, func() { close(w.stopping) })
	defer func() {
		if stopWatch() {
			close(w.stopping)
		}
	}()
	var wg sync.WaitGroup
	if w.opts.InFlight != nil {
		beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
		var beat sync.WaitGroup
		// The report stops, and is removed, once every handler returned.
		defer func() {
			stopBeat()
			beat.Wait()
		}()
		beat.Go(func() {
			w.opts.InFlight.Heartbeat(beatCtx, w.opts.Replica, w.opts.InFlightInterval, 3*w.opts.InFlightInterval,
				w.held.snapshot, func(err error) { w.log.Warn("report in-flight deliveries", "err", err) })
		})
	}
	errs := make([]error, 3)
	// A split job's deliveries are the order's "split" step (package cost);
	// dead letters are not part of an order's cost.
	split := cost.WithStep(ctx, cost.Split)
	wg.Go(func() {
		errs[0] = conn.Consume(split, amqpbus.ConsumeOptions{
			Queue: opts.Names.Queue, Prefetch: max(opts.Prefetch, opts.Concurrency),
			Concurrency: max(opts.Prefetch, opts.Concurrency),
		}, w.Handle)
	})
	wg.Go(func() {
		// The overflow's jobs wait at the gate like the others; its
		// prefetch keeps the gate fed without taking the whole queue.
		errs[1] = conn.Consume(split, amqpbus.ConsumeOptions{
			Queue: opts.Names.Overflow, Prefetch: opts.Concurrency, Concurrency: opts.Concurrency,
		}, func(ctx context.Context, d amqp.Delivery) amqpbus.Outcome { return w.handle(ctx, d, true) })
	})
	wg.Go(func() {
		// Prefetch = concurrency here too: every delivery held has its
		// handler, so the held counts are the unacknowledged deliveries
		// (but for acks the consumer holds back for a few milliseconds).
		errs[2] = conn.Consume(ctx, amqpbus.ConsumeOptions{
			Queue: opts.Names.DLQ, Prefetch: 4, Concurrency: 4,
		}, w.HandleDead)
	})
	wg.Wait()
	return errors.Join(errs...)
}

// permanentError marks a failure that retrying cannot fix (corrupt data,
// a panic, an unexpected answer); the task fails with the generic code.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return permanentError{err} }

// errCancelled stops work on a task its member cancelled.
var errCancelled = errors.New("task cancelled")

// errGone stops work on a task that expired or was finished elsewhere.
var errGone = errors.New("task gone or finished")

// errClaimLost stops a task resuming from its stored plan after another
// task of the member took its order code.
var errClaimLost = errors.New("order claim lost")

// Handle processes one split-job delivery of the split queue.
func (w *Worker) Handle(ctx context.Context, d amqp.Delivery) amqpbus.Outcome {
	return w.handle(ctx, d, false)
}

// handle processes one split-job delivery; overflow says it came from the
// overflow queue (and is never moved again).
func (w *Worker) handle(ctx context.Context, d amqp.Delivery, overflow bool) amqpbus.Outcome {
	start := w.opts.Clock.Now()
	queue, held := "split", &w.held.split
	if overflow {
		queue, held = "overflow", &w.held.overflow
	}
	defer hold(held)()
	if ctx.Err() != nil {
		return w.settled(queue, w.handBack(ctx, d))
	}
	ctx, job, err := jobqueue.Decode(ctx, d)
	if err != nil {
		w.log.ErrorContext(logging.WithTask(ctx, d.MessageId), "malformed split job; dead-lettering", "err", err)
		return w.settled(queue, amqpbus.Reject)
	}
	ctx = logging.WithTask(ctx, job.GetTaskId())
	if st := job.GetSubmitTime(); st.IsValid() && !d.Redelivered {
		w.m.pickup.Observe(start.Sub(st.AsTime()).Seconds())
	}
	w.log.DebugContext(ctx, "split job received", "redelivered", d.Redelivered)
	if w.gate != nil {
		limit := w.backlog
		if overflow {
			limit = 0
		}
		err := w.gate.enter(ctx, job.GetMemberId(), limit)
		if errors.Is(err, errBacklogFull) {
			if w.moveToOverflow(ctx, d) {
				return w.settled(queue, amqpbus.Ack)
			}
			err = w.gate.enter(ctx, job.GetMemberId(), 0)
		}
		if err != nil {
			// Only a stopping worker leaves the gate unadmitted.
			return w.settled(queue, w.handBack(ctx, d))
		}
		defer w.gate.leave(job.GetMemberId())
		w.m.admitted.Observe(w.opts.Clock.Now().Sub(start).Seconds())
	}
	return w.settled(queue, w.hold(ctx, d, func() amqpbus.Outcome { return w.process(ctx, job, deliveryNumber(d)) }))
}

// hold runs attempt and settles its delivery without spending the job's
// delivery budget on failures that are not the job's own. While attempt
// asks for a requeue (Redis or the fulfilment system unreachable, the
// lease held by another replica) it is retried in place with a growing
// pause for up to OutageHold: the delivery stays unacknowledged, so the
// worker's prefetch pauses consumption during an outage. A stopping worker
// hands the delivery back instead (see handBack). Only a delivery held
// past OutageHold is requeued, which counts one delivery.
func (w *Worker) hold(ctx context.Context, d amqp.Delivery, attempt func() amqpbus.Outcome) amqpbus.Outcome {
	o := attempt()
	deadline := w.opts.Clock.Now().Add(w.opts.OutageHold)
	for held := 0; o == amqpbus.Requeue && ctx.Err() == nil && w.opts.Clock.Now().Before(deadline); held++ {
		w.m.held.Inc()
		if w.sleep(ctx, holdPause(w.opts.RequeueBackoff, held)) != nil {
			break
		}
		o = attempt()
	}
	if o != amqpbus.Requeue {
		return o
	}
	if ctx.Err() != nil {
		return w.handBack(ctx, d)
	}
	n, _ := d.Headers["x-delivery-count"].(int64)
	_ = w.sleep(ctx, requeuePause(w.opts.RequeueBackoff, n))
	return amqpbus.Requeue
}

// maxHoldPause caps the pause between attempts of a held delivery.
const maxHoldPause = 5 * time.Second

// holdPause is the pause after the n-th failed attempt (0 for the first)
// of a held delivery: drawn from [d/2, d] where d is base doubling with
// each attempt up to maxHoldPause, so the replicas holding deliveries
// through the same outage do not all try again at the same instant.
func holdPause(base time.Duration, n int) time.Duration {
	return backoff.Jitter(backoff.Exponential(base, max(base, maxHoldPause), n))
}

// requeuePause is the pause before a delivery redelivered n times before
// is requeued: drawn from [d/2, d] where d is base × 2^n, n counted up to
// 5 (base × 32 at most).
func requeuePause(base time.Duration, n int64) time.Duration {
	return backoff.Jitter(backoff.Exponential(base, base<<5, int(min(max(n, 0), 5))))
}

// handBack returns a delivery that a stopping worker did not finish to its
// queue without spending one of its deliveries (and a dead letter held too
// long while Redis is away, see HandleDead): RabbitMQ counts every
// return of a quorum-queue message (a requeue, or a channel closing with
// it unacknowledged) against the delivery limit, so a copy is published
// and confirmed first and the original acknowledged after (see republish
// for what the copy keeps). A copy that cannot be published falls
// back to a requeue; a crash between the two leaves a duplicate, which the
// worker tolerates (lease, stored plan, idempotency keys).
func (w *Worker) handBack(ctx context.Context, d amqp.Delivery) amqpbus.Outcome {
	if w.pub == nil {
		return amqpbus.Requeue
	}
	// A dead-lettered message goes back to the dead-letter queue; the
	// routing key it was dead-lettered with routes it there.
	if err := w.republish(ctx, d, d.Exchange, d.RoutingKey); err != nil {
		w.log.WarnContext(ctx, "hand back job at shutdown; requeueing", "message_id", d.MessageId, "err", err)
		return amqpbus.Requeue
	}
	w.m.handedBack.Inc()
	return amqpbus.Ack
}

// moveToOverflow publishes a confirmed copy of d to the overflow queue
// and reports whether it did; the caller then acknowledges d. A copy that
// cannot be published leaves d to the gate; a crash between the two leaves
// a duplicate, which the worker tolerates.
func (w *Worker) moveToOverflow(ctx context.Context, d amqp.Delivery) bool {
	if err := w.republish(ctx, d, w.names.Exchange, jobqueue.OverflowRoutingKey); err != nil {
		w.log.WarnContext(ctx, "move job of a member over its backlog to the overflow queue; keeping it", "err", err)
		return false
	}
	w.m.overflowed.Inc()
	return true
}

// republish publishes a confirmed copy of d to exchange with key: the
// message id and headers (trace context, member). A split job's copy
// starts its delivery count afresh; a dead letter's (it carries the
// broker's death record) keeps why and after how many deliveries it died,
// which the dead-letter consumer records.
func (w *Worker) republish(ctx context.Context, d amqp.Delivery, exchange, key string) error {
	_, dead := d.Headers["x-death"]
	if _, ok := d.Headers["x-first-death-reason"]; ok {
		dead = true
	}
	headers := amqp.Table{}
	for k, v := range d.Headers {
		if k != "x-delivery-count" || dead {
			headers[k] = v
		}
	}
	msg := amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
	return w.pub.Publish(context.WithoutCancel(ctx), exchange, key, msg)
}

func (w *Worker) settled(queue string, o amqpbus.Outcome) amqpbus.Outcome {
	names := [...]string{amqpbus.Ack: "ack", amqpbus.Requeue: "requeue", amqpbus.Reject: "reject"}
	w.m.deliveries.WithLabelValues(queue, names[o]).Inc()
	return o
}

// deliveryNumber is which delivery of its message d is: 1 the first, 2
// after one redelivery (the quorum queue's x-delivery-count + 1).
func deliveryNumber(d amqp.Delivery) int64 {
	return deliveries(d.Headers) + 1
}

// process runs the job under the task's lease and decides the delivery's
// outcome; delivery (see deliveryNumber) is recorded as the task's
// attempts when the lease is taken.
func (w *Worker) process(ctx context.Context, job *jobv1.SplitJob, delivery int64) amqpbus.Outcome {
	offer := w.offer(ctx, job, delivery)
	return w.underLease(ctx, job.GetMemberId(), job.GetTaskId(), delivery, offer, func(workCtx context.Context, fence *taskstore.Fence, stored storedPlan) amqpbus.Outcome {
		return w.splitOutcome(ctx, workCtx, job, fence, stored)
	})
}

// storedPlan is a task's stored plan (nil when there is none) and recorded
// shipment outcomes, as read when its lease was taken (taskstore.Claim).
type storedPlan struct {
	plan     []byte
	outcomes map[string][]byte
	record   []byte // the task's record, which the result is written from
	// offered is what became of the plan offered with the lease (built,
	// when it was stored); holder owns the order code when it was claimed.
	offered taskstore.Offered
	holder  string
	built   plan.Plan
}

// offered is a plan built before the task is taken (see offer).
type offered struct {
	offer taskstore.Offer
	built plan.Plan
}

// offer builds the plan of a job's first delivery before its task is
// taken, so that taking the task stores it in the same round trip
// (taskstore.Store.TakeTask). A redelivery most likely finds its plan
// stored and offers none; so does a plan that cannot be built now, which
// loadPlan builds again under the lease, with its errors.
func (w *Worker) offer(ctx context.Context, job *jobv1.SplitJob, delivery int64) offered {
	if delivery != 1 {
		return offered{}
	}
	p, data, err := w.buildPlan(ctx, job)
	if err != nil {
		w.log.DebugContext(ctx, "plan not built before taking the task", "err", err)
		return offered{}
	}
	return offered{offer: taskstore.Offer{Plan: data, OrderCode: job.GetOrderCode()}, built: p}
}

// underLease runs fn under the task's lease, renewed while fn runs (workCtx
// ends with lease.ErrLost as its cause when the lease is lost), and
// releases the lease after (the write of the task's result releases it in
// the same round trip). When the lease cannot be taken it returns the
// outcome takeLease decided. fn gets the task's plan as read with the
// lease. delivery is recorded as the task's attempts when the lease is
// taken (0: not recorded).
func (w *Worker) underLease(ctx context.Context, member, id string, delivery int64, offer offered,
	fn func(workCtx context.Context, fence *taskstore.Fence, stored storedPlan) amqpbus.Outcome) amqpbus.Outcome {
	l, stored, o, ok := w.takeLease(ctx, member, id, delivery, offer)
	if !ok {
		return o
	}
	workCtx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { l.KeepAlive(workCtx, func() { cancel(lease.ErrLost) }) })
	fence := &taskstore.Fence{Key: l.Key, Token: l.Token, Record: stored.record, Release: true}
	defer func() {
		cancel(nil)
		wg.Wait()
		if fence.Released() {
			return
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer rcancel()
		if err := l.Release(rctx); err != nil {
			w.log.WarnContext(ctx, "release task lease", "err", err)
		}
	}()
	return fn(workCtx, fence, stored)
}

// splitOutcome splits job under its lease (workCtx, fence) and decides the
// delivery's outcome.
func (w *Worker) splitOutcome(ctx, workCtx context.Context, job *jobv1.SplitJob, fence *taskstore.Fence, stored storedPlan) amqpbus.Outcome {
	err := w.safeSplit(workCtx, job, fence, stored)
	switch {
	case err == nil, errors.Is(err, errGone):
		return amqpbus.Ack
	case errors.Is(err, errCancelled):
		w.log.InfoContext(ctx, "task cancelled; stopped splitting")
		return amqpbus.Ack
	case errors.Is(context.Cause(workCtx), lease.ErrLost):
		w.log.WarnContext(ctx, "task lease lost; requeueing", "err", err)
		return amqpbus.Requeue
	case ctx.Err() != nil:
		w.log.InfoContext(ctx, "worker stopping; requeueing", "err", err)
		return amqpbus.Requeue
	case errors.Is(err, taskstore.ErrFenced):
		w.log.WarnContext(ctx, "result write fenced off; requeueing")
		return amqpbus.Requeue
	}
	var perm permanentError
	if !errors.As(err, &perm) {
		w.log.WarnContext(ctx, "transient failure; requeueing", "err", err)
		return amqpbus.Requeue
	}
	w.log.ErrorContext(ctx, "split failed", "err", err)
	return w.fail(ctx, job, fence, errcodev1.ErrorCode_ERROR_CODE_GENERIC, msgGeneric)
}

// takeLease acquires the task's lease, recording delivery as the task's
// attempts in the same round trip. When it cannot (ok false) it returns
// the delivery's outcome: Ack when the task is gone or terminal, Requeue
// when another replica kept the lease for LeaseWait or Redis failed.
func (w *Worker) takeLease(ctx context.Context, member, id string, delivery int64, offer offered) (l *lease.Lease, stored storedPlan, o amqpbus.Outcome, ok bool) {
	deadline := w.opts.Clock.Now().Add(w.opts.LeaseWait)
	step := min(100*time.Millisecond, w.opts.LeaseWait/10)
	release := func() {
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			w.log.WarnContext(ctx, "release task lease", "err", err)
		}
	}
	for {
		// The status (and, under a taken lease, the plan) is read in the
		// same round trip, after the lease: checked under the lease (a
		// task finished by the previous holder must not be worked again)
		// and while waiting for it (a finished task needs no lease).
		c := w.store.TakeTask(ctx, member, id, w.opts.Lease, delivery, offer.offer)
		l = c.Lease
		st, err := c.Status, c.StatusErr
		held := errors.Is(c.LeaseErr, lease.ErrHeld)
		if c.LeaseErr != nil && !held {
			w.log.WarnContext(ctx, "acquire task lease; requeueing", "err", c.LeaseErr)
			return nil, stored, amqpbus.Requeue, false
		}
		switch {
		case errors.Is(err, taskstore.ErrNotFound), errors.Is(err, taskstore.ErrExpired):
			w.log.InfoContext(ctx, "task missing or expired; dropping job")
			o = amqpbus.Ack
		case err != nil:
			w.log.WarnContext(ctx, "read task status; requeueing", "err", err)
			o = amqpbus.Requeue
		case st != taskv1.TaskStatus_TASK_STATUS_PROCESSING:
			w.log.InfoContext(ctx, "task already terminal; dropping job", "status", st.String())
			o = amqpbus.Ack
		case !held:
			return l, storedPlan{plan: c.Plan, outcomes: c.Outcomes, record: c.Record,
				offered: c.Offered, holder: c.Holder, built: offer.built}, 0, true
		case !w.opts.Clock.Now().Before(deadline):
			w.log.InfoContext(ctx, "task lease held elsewhere; requeueing")
			return nil, stored, amqpbus.Requeue, false
		default:
			if err := w.sleep(ctx, step); err != nil {
				return nil, stored, amqpbus.Requeue, false
			}
			continue
		}
		if !held {
			release()
		}
		return nil, stored, o, false
	}
}

// fail writes a whole-task failure under the fence and acks (or requeues
// when the write could not be made, or a requested shipment's fate could
// not be found out yet).
func (w *Worker) fail(ctx context.Context, job *jobv1.SplitJob, fence *taskstore.Fence, c errcodev1.ErrorCode, msg string) amqpbus.Outcome {
	if err := w.settleRequested(ctx, job); err != nil {
		var perm permanentError
		if !errors.As(err, &perm) {
			w.log.WarnContext(ctx, "find out requested shipments before failing the task; requeueing", "err", err)
			return amqpbus.Requeue
		}
		w.log.ErrorContext(ctx, "find out requested shipments before failing the task; reported as failed", "err", err)
	}
	partial := w.partialResult(ctx, job, c, msg)
	t, err := w.store.Finish(ctx, job.GetMemberId(), job.GetTaskId(), fence, func(t *taskv1.Task) {
		t.Status = taskv1.TaskStatus_TASK_STATUS_FAILED
		t.ErrorCode = int32(c)
		t.ErrorMsg = msg
		t.Result = partial
	})
	return w.finished(ctx, job, t, err)
}

// finished records the outcome of a Finish and returns the delivery's
// outcome.
func (w *Worker) finished(ctx context.Context, job *jobv1.SplitJob, t *taskv1.Task, err error) amqpbus.Outcome {
	switch {
	case errors.Is(err, taskstore.ErrTerminal), errors.Is(err, taskstore.ErrNotFound), errors.Is(err, taskstore.ErrExpired):
		w.log.InfoContext(ctx, "task finished elsewhere or gone; result dropped", "err", err)
		return amqpbus.Ack
	case err != nil:
		w.log.WarnContext(ctx, "write task result; requeueing", "err", err)
		return amqpbus.Requeue
	}
	w.m.tasks.WithLabelValues(t.GetStatus().String(), code(t.GetErrorCode())).Inc()
	events := map[string]int64{eventrate.TaskFinished: 1}
	if t.GetStatus() == taskv1.TaskStatus_TASK_STATUS_FAILED {
		events[eventrate.TaskFailed+code(t.GetErrorCode())] = 1
	}
	w.count(ctx, events)
	for _, f := range t.GetResult().GetFailures() {
		w.m.itemFailures.WithLabelValues(code(f.GetErrorCode())).Inc()
	}
	if st := job.GetSubmitTime(); st.IsValid() {
		w.m.endToEnd.Observe(w.opts.Clock.Now().Sub(st.AsTime()).Seconds())
	}
	w.log.InfoContext(ctx, "task finished", "status", t.GetStatus().String(), "error_code", t.GetErrorCode(),
		"succeeded", t.GetResult().GetSucceeded(), "failed", t.GetResult().GetFailed())
	return amqpbus.Ack
}

// safeSplit runs split and turns a panic into a permanent error.
func (w *Worker) safeSplit(ctx context.Context, job *jobv1.SplitJob, fence *taskstore.Fence, stored storedPlan) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = permanent(fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
		}
	}()
	return w.split(ctx, job, fence, stored)
}

// split does the work of one task under its lease; stored is its plan as
// read with the lease.
func (w *Worker) split(ctx context.Context, job *jobv1.SplitJob, fence *taskstore.Fence, stored storedPlan) error {
	member, id := job.GetMemberId(), job.GetTaskId()
	p, done, err := w.loadPlan(ctx, job, stored)
	if errors.Is(err, errClaimLost) {
		w.log.WarnContext(ctx, "order code taken by another task; the stored plan is not reused", "order_code", job.GetOrderCode(), "err", err)
		o := w.fail(ctx, job, fence, errcodev1.ErrorCode_ERROR_CODE_ORDER_CLAIM_LOST, msgClaimLost)
		if o != amqpbus.Ack {
			return fmt.Errorf("write claim-lost failure: %w", errRetry)
		}
		return nil
	}
	if errors.Is(err, taskstore.ErrOrderClaimed) {
		w.log.InfoContext(ctx, "order code already claimed by another task", "order_code", job.GetOrderCode())
		o := w.fail(ctx, job, fence, errcodev1.ErrorCode_ERROR_CODE_DUPLICATE_ORDER, msgDuplicateOrder)
		if o != amqpbus.Ack {
			return fmt.Errorf("write duplicate-order failure: %w", errRetry)
		}
		return nil
	}
	if err != nil {
		return err
	}
	last, err := w.shipAll(ctx, job, fence, p, done)
	if err != nil {
		return err
	}
	res := result(p, done)
	rec, err := encodeOutcomes(last)
	if err != nil {
		return err
	}
	t, err := w.store.FinishRecording(ctx, member, id, fence, rec, func(t *taskv1.Task) {
		t.Status = taskv1.TaskStatus_TASK_STATUS_SUCCEEDED
		t.Result = res
	})
	if err != nil {
		w.keepOutcomes(ctx, member, id, last)
	}
	if errors.Is(err, taskstore.ErrFenced) {
		return err
	}
	if w.finished(ctx, job, t, err) != amqpbus.Ack {
		return fmt.Errorf("write result: %w", errRetry)
	}
	return nil
}

// shipAll creates the plan's shipments not done yet, up to
// OrderParallelism at once, recording each outcome in done and in Redis.
// Each shipment is marked requested under fence before anything is
// requested (see markRequested): that mark finds a cancelled task (or a
// lease that lapsed), so no shipment is requested after a cancellation,
// new shipments stop and the running ones end. The first error stops new
// shipments and cancels the running ones.
// When every shipment ends, the outcome of the last to end is not recorded
// but returned (last), to be written with the result.
func (w *Worker) shipAll(ctx context.Context, job *jobv1.SplitJob, fence *taskstore.Fence, p plan.Plan, done map[string]outcome) (last map[string]outcome, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	todo := notDone(p, done)
	r := &shipping{
		w: w, member: job.GetMemberId(), id: job.GetTaskId(), class: w.class(job), fence: fence,
		cancel: cancel, sem: make(chan struct{}, w.opts.OrderParallelism), done: done,
		last: make(map[string]outcome, 1),
	}
	r.remaining.Store(int64(len(todo)))
	var wg sync.WaitGroup
	for i, s := range todo {
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || r.failed() {
			break
		}
		if i == len(todo)-1 {
			// The last shipment (an order's only one, often) runs on the
			// handler's goroutine, whose stack has grown already: a new
			// goroutine would grow one again through the same calls.
			r.shipOne(ctx, s)
			continue
		}
		wg.Go(func() { r.shipOne(ctx, s) })
	}
	wg.Wait()
	err = r.firstErr
	if err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		r.w.keepOutcomes(ctx, r.member, r.id, r.last)
		return nil, err
	}
	return r.last, nil
}

// keepOutcomes records outcomes that were to go with a result that will
// not be written now, for whoever finishes the task (best effort: a
// shipment marked requested is found out again with its idempotency key).
func (w *Worker) keepOutcomes(ctx context.Context, member, id string, outs map[string]outcome) {
	if len(outs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for key, o := range outs {
		if err := w.recordOutcome(ctx, member, id, key, o); err != nil {
			w.log.WarnContext(ctx, "record shipment outcome", "shipment", key, "err", err)
		}
	}
}

// encodeOutcomes encodes shipment outcomes for the task store.
func encodeOutcomes(outs map[string]outcome) (map[string][]byte, error) {
	enc := make(map[string][]byte, len(outs))
	for key, o := range outs {
		data, err := json.Marshal(o)
		if err != nil {
			return nil, permanent(fmt.Errorf("encode shipment outcome: %w", err))
		}
		enc[key] = data
	}
	return enc, nil
}

// notDone returns the shipments of p without an outcome in done.
func notDone(p plan.Plan, done map[string]outcome) []plan.Shipment {
	var todo []plan.Shipment
	for _, s := range p.Shipments {
		if _, ok := done[s.Key]; !ok {
			todo = append(todo, s)
		}
	}
	return todo
}

// shipping is the state one shipAll call shares with its shipments.
type shipping struct {
	w          *Worker
	member, id string
	class      slotpool.Class
	fence      *taskstore.Fence
	cancel     context.CancelCauseFunc
	sem        chan struct{} // a place per running shipment
	done       map[string]outcome
	// remaining counts the shipments not ended yet; the last to end
	// leaves its outcome in last instead of recording it.
	remaining atomic.Int64
	last      map[string]outcome

	mu       sync.Mutex // guards firstErr, done and last
	firstErr error
}

// stop records err as the call's error unless one is recorded: no
// shipment starts after it, the running ones end.
func (r *shipping) stop(err error) {
	r.mu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.mu.Unlock()
}

// fail stops the call with err and cancels the running shipments.
func (r *shipping) fail(err error) {
	r.stop(err)
	r.cancel(err)
}

// failed reports whether the call has stopped.
func (r *shipping) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstErr != nil
}

// shipOne runs shipment s, which holds a place in sem, and records its
// outcome.
func (r *shipping) shipOne(ctx context.Context, s plan.Shipment) {
	held := true
	free := func() {
		if held {
			held = false
			<-r.sem
		}
	}
	defer free()
	defer func() {
		if rec := recover(); rec != nil {
			r.fail(permanent(fmt.Errorf("panic: %v\n%s", rec, debug.Stack())))
		}
	}()
	// The next shipment may start as soon as this one's job has
	// ended, while its slot is released and its outcome recorded:
	// the order never has more than OrderParallelism jobs running
	// at the fulfilment system.
	out, err := r.w.ship(ctx, s, r.class, func(ctx context.Context) error {
		return r.w.markRequested(ctx, r.member, r.id, s.Key, r.fence)
	}, free)
	free()
	if errors.Is(err, errCancelled) || errors.Is(err, errGone) {
		// Ended before it was requested (see markRequested): start
		// nothing more, and let the running ones end with their
		// recorded outcome.
		r.stop(err)
		return
	}
	if err == nil && r.remaining.Add(-1) == 0 {
		// The order's last shipment: its outcome goes with the result.
		r.mu.Lock()
		r.done[s.Key] = out
		r.last[s.Key] = out
		r.mu.Unlock()
		return
	}
	if err == nil {
		err = r.w.recordOutcome(ctx, r.member, r.id, s.Key, out)
	}
	if err != nil {
		r.fail(fmt.Errorf("shipment %s: %w", s.Key, err))
		return
	}
	r.mu.Lock()
	r.done[s.Key] = out
	r.mu.Unlock()
}

// errRetry marks a failure already logged whose job must be requeued.
var errRetry = errors.New("retry later")

// result assembles the task's result from the plan and the shipments'
// outcomes.
func result(p plan.Plan, done map[string]outcome) *taskv1.SplitResult {
	res := &taskv1.SplitResult{Total: int32(p.Total)}
	fails := append([]plan.Failure(nil), p.Failures...)
	for _, s := range p.Shipments {
		out := done[s.Key]
		if out.Failure != nil {
			for _, l := range s.Lines {
				f := *out.Failure
				f.ItemCode = l.ItemCode
				fails = append(fails, f)
			}
			continue
		}
		sh := &taskv1.Shipment{ShipmentId: out.ShipmentID, Warehouse: s.Warehouse, WeightGrams: int32(s.WeightGrams)}
		for _, l := range s.Lines {
			sh.Lines = append(sh.Lines, &taskv1.ShipmentLine{ItemCode: l.ItemCode, Sku: l.SKU, Quantity: int32(l.Quantity)})
		}
		res.Shipments = append(res.Shipments, sh)
	}
	for _, f := range fails {
		res.Failures = append(res.Failures, &taskv1.ItemFailure{ItemCode: f.ItemCode, ErrorCode: f.Code, ErrorMsg: f.Msg})
		if f.Code == int32(errcodev1.ErrorCode_ERROR_CODE_BILL_UNPAID) {
			res.ErrorCode = f.Code
			res.ErrorMsg = plan.Message(errcodev1.ErrorCode_ERROR_CODE_BILL_UNPAID)
		}
	}
	res.Failed = int32(len(fails))
	res.Succeeded = res.Total - res.Failed
	return res
}

// sleep waits d on the worker's clock, or returns ctx's error.
func (w *Worker) sleep(ctx context.Context, d time.Duration) error {
	t := w.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// plans and outcomes are JSON in Redis; a decode failure is corrupt data.
func decodeJSON(what string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return permanent(fmt.Errorf("decode stored %s: %w", what, err))
	}
	return nil
}
