// Package reconcile is the payment reconciler: it places orders at the
// provider and then, on a delayed-job queue, queries each unpaid order at
// fixed offsets from its creation (5 s, 30 s, 1 min, 3 min, 5 min, 10 min,
// 30 min by default). A SUCCESS marks the payment PAID and stops; after the
// last unpaid query the order is closed at the provider and then marked
// CLOSED. An uncertain answer (timeout, 5xx, SYSTEM_ERROR, ...) is recorded
// and retried with backoff without using up a schedule slot, and is never
// read as unpaid; a close the provider refuses with ORDERPAID leads to a
// query and PAID, never CLOSED. Notifications mark payments PAID through the
// same idempotent transition.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
)

// Provider is the payment provider's API.
type Provider interface {
	CreateNative(ctx context.Context, o wechatpay.NativeOrder) (string, error)
	Query(ctx context.Context, outTradeNo string) (wechatpay.Transaction, error)
	Close(ctx context.Context, outTradeNo string) error
}

// Jobs is the delayed-job queue the checks run on (pkg/delayq). Job ids are
// order codes.
type Jobs interface {
	Schedule(ctx context.Context, id string, due time.Time, payload []byte) error
	Cancel(ctx context.Context, id string) (bool, error)
}

var (
	// ErrNotFound means the member has no payment with that order code.
	ErrNotFound = errors.New("payment not found")
	// ErrOrderCodeTaken means the order code already has a payment of
	// another member or with other parameters.
	ErrOrderCodeTaken = errors.New("order code already has a different payment")
	// ErrAmountMismatch means a notification's amount differs from the
	// placed amount.
	ErrAmountMismatch = errors.New("notified amount differs from the placed amount")
	// ErrProviderUnavailable means the provider's answer was uncertain; the
	// call may be retried.
	ErrProviderUnavailable = errors.New("payment provider unavailable")
	// ErrProviderRejected means the provider refused the order.
	ErrProviderRejected = errors.New("payment provider rejected the order")
	// ErrPaidAfterClose means the provider reports as paid an order that is
	// closed locally (an inconsistency that needs an operator).
	ErrPaidAfterClose = errors.New("provider reports a closed payment as paid")
)

// DefaultSchedule is the seed's query schedule, as offsets from creation.
var DefaultSchedule = []time.Duration{5 * time.Second, 30 * time.Second, time.Minute, 3 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute}

// DefaultRepairGrace is how long a payment's creation may take before a
// repair schedules a check the creation did not.
const DefaultRepairGrace = 30 * time.Second

// Options configure a Service.
type Options struct {
	// Schedule holds the query offsets from creation, increasing.
	Schedule []time.Duration
	// RetryBase and RetryMax bound the backoff after uncertain answers
	// (doubling from RetryBase).
	RetryBase time.Duration
	RetryMax  time.Duration
	// RepairGrace is how long after a payment's creation began a repair
	// may schedule its check if the creation did not (DefaultRepairGrace
	// when zero).
	RepairGrace time.Duration
	// StoreTimeout bounds storing and scheduling a payment the provider
	// has accepted; it does not end with the caller (5 s when zero).
	StoreTimeout time.Duration
	// NotifyURL is sent with each order for the provider's notification.
	NotifyURL string
	Clock     clock.Clock
	Logger    *slog.Logger
	// Registerer receives the reconciler's metrics (none when nil).
	Registerer prometheus.Registerer
	// Inspector reads the check queue for operators (Stats, Inspect);
	// those calls answer ErrNoInspector when it is nil.
	Inspector Inspector
	// Events counts the provider's answers to checks cluster-wide
	// (eventrate.ProviderAnswer, ProviderUncertain), read back by Stats;
	// nil counts nothing.
	Events *eventrate.Counter
}

// Service reconciles payments.
type Service struct {
	store    *paystore.Store
	provider Provider
	jobs     Jobs
	opts     Options
	log      *slog.Logger

	calls       *prometheus.CounterVec
	transitions *prometheus.CounterVec
}

// New returns a Service.
func New(store *paystore.Store, provider Provider, jobs Jobs, opts Options) *Service {
	if len(opts.Schedule) == 0 {
		opts.Schedule = DefaultSchedule
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = time.Second
	}
	if opts.RetryMax < opts.RetryBase {
		opts.RetryMax = max(time.Minute, opts.RetryBase)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.RepairGrace <= 0 {
		opts.RepairGrace = DefaultRepairGrace
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		store: store, provider: provider, jobs: jobs, opts: opts, log: opts.Logger,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_reconciler_provider_calls_total",
			Help: "Calls to the payment provider by action and answer (trade state or error code).",
		}, []string{"action", "answer"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_reconciler_transitions_total",
			Help: "Payments that became PAID or CLOSED, by cause.",
		}, []string{"to", "cause"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.calls, s.transitions)
	}
	return s
}

// ParseSchedule checks a schedule: at least one offset, each positive and
// later than the previous.
func ParseSchedule(offsets []time.Duration) error {
	if len(offsets) == 0 {
		return errors.New("schedule must have at least one offset")
	}
	for i, d := range offsets {
		if d <= 0 || (i > 0 && d <= offsets[i-1]) {
			return fmt.Errorf("schedule offsets must be positive and increasing, got %v", offsets)
		}
	}
	return nil
}

// providerDescription is the description the provider shows the shopper:
// the caller's, or "Order <code>" when the caller sent none (the API makes
// it optional; the provider requires one).
func providerDescription(code, description string) string {
	if description != "" {
		return description
	}
	return "Order " + code
}

// Create places the order at the provider and schedules its first check.
// It is idempotent: the same member placing the same order again gets the
// stored payment; the same order code again with another amount or
// description answers ErrOrderCodeTaken. Payments are the member's own:
// another member's equal order code is another order (see
// wechatpay.OutTradeNo), so nothing here tells whether it exists.
func (s *Service) Create(ctx context.Context, member, code string, amountFen int64, description string) (paystore.Payment, error) {
	tradeNo := wechatpay.OutTradeNo(member, code)
	p, err := s.store.Get(ctx, tradeNo)
	switch {
	case err == nil:
		return s.existing(ctx, p, member, amountFen, description)
	case !errors.Is(err, paystore.ErrNotFound):
		return paystore.Payment{}, err
	}
	codeURL, err := s.provider.CreateNative(ctx, wechatpay.NativeOrder{
		OutTradeNo: tradeNo, Description: providerDescription(code, description), AmountFen: amountFen, NotifyURL: s.opts.NotifyURL,
	})
	s.calls.WithLabelValues("CREATE", answer(err, "OK")).Inc()
	if err != nil {
		if wechatpay.IsUncertain(err) {
			return paystore.Payment{}, fmt.Errorf("%w: %w", ErrProviderUnavailable, err)
		}
		return paystore.Payment{}, fmt.Errorf("%w: %w", ErrProviderRejected, err)
	}
	// The provider has the order now: record and schedule it even if the
	// caller goes away, so the payment is never stored without a check.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.StoreTimeout)
	defer cancel()
	now := s.opts.Clock.Now()
	p = paystore.Payment{
		TradeNo: tradeNo, OrderCode: code, Member: member, AmountFen: amountFen, Description: description, CodeURL: codeURL,
		Status: paystore.StatusUnpaid, Tracking: true, CreateTime: now, NextCheck: now.Add(s.opts.Schedule[0]),
	}
	if err := s.store.IndexCode(ctx, code, member); err != nil {
		return paystore.Payment{}, err
	}
	// The payment stays in the repair set until its first check has run
	// (see Check), not only until the check is scheduled: the queue's keys
	// live on another Redis Cluster master than the payment's, so an
	// acknowledged schedule can still be lost (a failover or split-brain
	// of that master, a firing that read the payment as missing on a
	// node that no longer owned it). Whatever stopped the first check, a
	// repair schedules it again once it is a grace late (see
	// RepairSchedules).
	if err := s.store.MarkCreating(ctx, tradeNo, p.NextCheck.Add(s.opts.RepairGrace)); err != nil {
		return paystore.Payment{}, err
	}
	switch err := s.store.Create(ctx, p); {
	case errors.Is(err, paystore.ErrExists):
		p, err := s.store.Get(ctx, tradeNo)
		if err != nil {
			return paystore.Payment{}, err
		}
		return s.existing(ctx, p, member, amountFen, description)
	case err != nil:
		return paystore.Payment{}, err
	}
	if err := s.jobs.Schedule(ctx, tradeNo, p.NextCheck, nil); err != nil {
		return paystore.Payment{}, fmt.Errorf("schedule first check of %s: %w", tradeNo, err)
	}
	p.CreateTime, p.NextCheck = p.CreateTime.Truncate(time.Millisecond).UTC(), p.NextCheck.Truncate(time.Millisecond).UTC()
	return p, nil
}

// RepairSchedules finds up to limit payments whose first check has not
// run a repair grace after it was due (their creation stopped before
// scheduling it, or the scheduled check was lost) and schedules the check
// of each that is still UNPAID, tracked and without any check recorded, at
// its stored next-check time (scheduling an id that is already pending
// only sets the same time again). Such a payment stays in the repair set,
// due again after the grace, until its first check runs. It returns how
// many it scheduled.
func (s *Service) RepairSchedules(ctx context.Context, limit int) (int, error) {
	codes, err := s.store.ClaimCreating(ctx, s.opts.Clock.Now(), s.opts.RepairGrace, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, code := range codes {
		p, err := s.store.Get(ctx, code)
		switch {
		case errors.Is(err, paystore.ErrNotFound):
			// Never stored (or expired): no check to schedule.
		case err != nil:
			return n, err
		case p.Status == paystore.StatusUnpaid && p.Tracking && !p.NextCheck.IsZero() && len(p.Attempts) == 0:
			if err := s.jobs.Schedule(ctx, code, p.NextCheck, nil); err != nil {
				return n, fmt.Errorf("repair check of %s: %w", code, err)
			}
			s.log.WarnContext(ctx, "scheduled the first check of a payment that had none run a grace after it was due",
				"out_trade_no", code, "due", p.NextCheck)
			n++
			// Left in the set (claimed until the grace passes again)
			// until the check runs.
			continue
		}
		if err := s.store.DoneCreating(ctx, code); err != nil {
			return n, err
		}
	}
	return n, nil
}

// RunRepair calls RepairSchedules every interval until ctx ends.
func (s *Service) RunRepair(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, interval, func() {
		if _, err := s.RepairSchedules(ctx, 100); err != nil {
			s.log.WarnContext(ctx, "payment schedule repair failed; will retry", "err", err)
		}
	})
}

// existing answers a repeated Create, rescheduling the pending check in
// case the first Create stopped between storing and scheduling.
func (s *Service) existing(ctx context.Context, p paystore.Payment, member string, amountFen int64, description string) (paystore.Payment, error) {
	if p.Member != member || p.AmountFen != amountFen || p.Description != description {
		return paystore.Payment{}, ErrOrderCodeTaken
	}
	if p.Status == paystore.StatusUnpaid && p.Tracking && !p.NextCheck.IsZero() {
		if err := s.jobs.Schedule(ctx, p.TradeNo, p.NextCheck, nil); err != nil {
			return paystore.Payment{}, fmt.Errorf("reschedule check of %s: %w", p.TradeNo, err)
		}
	}
	return p, nil
}

// Get returns a member's payment.
func (s *Service) Get(ctx context.Context, member, code string) (paystore.Payment, error) {
	p, err := s.store.Get(ctx, wechatpay.OutTradeNo(member, code))
	if errors.Is(err, paystore.ErrNotFound) || (err == nil && p.Member != member) {
		return paystore.Payment{}, ErrNotFound
	}
	return p, err
}

// CancelTracking stops reconciling a member's unpaid payment (without
// closing it at the provider). A terminal payment is returned unchanged.
func (s *Service) CancelTracking(ctx context.Context, member, code string) (paystore.Payment, error) {
	p, err := s.Get(ctx, member, code)
	if err != nil {
		return paystore.Payment{}, err
	}
	code = p.TradeNo
	out, err := s.store.StopTracking(ctx, code)
	if err != nil {
		return paystore.Payment{}, err
	}
	if out == paystore.Applied {
		if _, err := s.jobs.Cancel(ctx, code); err != nil {
			// The check finds the payment untracked and stops by itself.
			s.log.WarnContext(ctx, "cancel pending check", "out_trade_no", code, "err", err)
		}
		// UNPAID with nothing left to close or confirm it: an operator's
		// matter, listed with the stuck payments.
		if err := s.store.MarkStuck(ctx, code, s.opts.Clock.Now()); err != nil {
			s.log.WarnContext(ctx, "stuck list not updated", "order_code", code, "err", err)
		}
	}
	return s.store.Get(ctx, code)
}

// Notification is a verified provider notification.
type Notification struct {
	// OutTradeNo is the provider's out_trade_no (wechatpay.OutTradeNo).
	OutTradeNo    string
	TransactionID string
	TradeState    string
	AmountFen     int64
	SuccessTime   time.Time
}

// ApplyNotification applies a verified notification: a SUCCESS for the
// placed amount marks the payment PAID (once; repeats change nothing) and
// cancels its pending check. A different amount answers ErrAmountMismatch
// and changes nothing.
func (s *Service) ApplyNotification(ctx context.Context, n Notification) (paystore.Payment, error) {
	p, err := s.store.Get(ctx, n.OutTradeNo)
	if errors.Is(err, paystore.ErrNotFound) {
		return paystore.Payment{}, ErrNotFound
	}
	if err != nil {
		return paystore.Payment{}, err
	}
	if n.AmountFen != p.AmountFen {
		return paystore.Payment{}, fmt.Errorf("%w: notified %d fen, placed %d", ErrAmountMismatch, n.AmountFen, p.AmountFen)
	}
	if n.TradeState != wechatpay.TradeStateSuccess {
		return p, nil
	}
	paid := n.SuccessTime
	if paid.IsZero() {
		paid = s.opts.Clock.Now()
	}
	now := s.opts.Clock.Now()
	out, listed, err := s.store.MarkPaid(ctx, n.OutTradeNo, n.TransactionID, paid,
		paystore.Attempt{Time: now, Action: paystore.ActionNotify, TradeState: n.TradeState})
	if err != nil {
		return paystore.Payment{}, err
	}
	switch out {
	case paystore.Applied:
		// Counted before the pending check is cancelled: when the count
		// fails (or this process stops first), the provider's repeated
		// callback or the check still pending records it.
		if err := s.transitioned(ctx, n.OutTradeNo, paystore.StatusPaid, "notify", now, listed); err != nil {
			return paystore.Payment{}, err
		}
		if _, err := s.jobs.Cancel(ctx, n.OutTradeNo); err != nil {
			// A check that still fires finds the payment PAID and stops.
			s.log.WarnContext(ctx, "cancel pending check", "out_trade_no", n.OutTradeNo, "err", err)
		}
	case paystore.AlreadyClosed:
		s.log.ErrorContext(ctx, "provider notified payment of a closed order", "out_trade_no", n.OutTradeNo, "transaction_id", n.TransactionID)
		return paystore.Payment{}, ErrPaidAfterClose
	}
	p, err = s.store.Get(ctx, n.OutTradeNo)
	if err != nil {
		return paystore.Payment{}, err
	}
	if out == paystore.AlreadyPaid {
		// A repeated callback: the first one's count may have been lost.
		if err := s.recorded(ctx, p); err != nil {
			return paystore.Payment{}, err
		}
	}
	return p, nil
}

func answer(err error, ok string) string {
	if err != nil {
		return wechatpay.ErrorCode(err)
	}
	return ok
}
