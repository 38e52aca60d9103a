package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/platform/backoff"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
)

// Check runs the check of an order that came due at due (the delayed job's
// handler). It returns an error only when the job should be retried (Redis
// failed); every provider answer, certain or not, is handled here and
// leads to a recorded attempt and, unless the payment became terminal, a
// scheduled next check. A firing due before the recorded next check (a
// stale schedule) only puts the job back at the recorded time.
func (s *Service) Check(ctx context.Context, code string, due time.Time) error {
	ctx = logging.With(ctx, slog.String("out_trade_no", code))
	p, err := s.store.Get(ctx, code)
	if errors.Is(err, paystore.ErrNotFound) {
		// Expired, or read where it is not (a node that no longer owns
		// its slot): the firing is dropped, and the repair set still
		// holds a payment whose first check this was.
		s.log.WarnContext(ctx, "check of a payment not found; dropped")
		return nil
	}
	if err != nil {
		return err
	}
	if p.Status != paystore.StatusUnpaid {
		// A firing after the transition (the one that made it, run again
		// because its process stopped before the job was done): the
		// day's count may miss it.
		return s.recorded(ctx, p)
	}
	if !p.Tracking {
		return nil
	}
	if due.UnixMilli() < p.NextCheck.UnixMilli() {
		// A repeated Create re-scheduled an older due time while this
		// check moved on: put the job back at the recorded time.
		return s.jobs.Schedule(ctx, code, p.NextCheck, nil)
	}
	// The provider's answers are counted once the check's writes are
	// made, in one round trip.
	n := answers{}
	defer s.count(ctx, n)
	if p.Slot < len(s.opts.Schedule) {
		err = s.query(ctx, p, n)
	} else {
		err = s.close(ctx, p, n)
	}
	if err == nil && len(p.Attempts) == 0 {
		// The first check ran: the repair no longer needs to look.
		if err := s.store.DoneCreating(ctx, code); err != nil {
			// The repair finds the check run and drops the entry.
			s.log.WarnContext(ctx, "first check run; repair entry left", "err", err)
		}
	}
	return err
}

// answers tallies a check's provider answers by event name
// (eventrate.ProviderAnswer, ProviderUncertain).
type answers map[string]int64

// query makes the query of slot p.Slot.
func (s *Service) query(ctx context.Context, p paystore.Payment, n answers) error {
	tx, err := s.provider.Query(ctx, p.TradeNo)
	now := s.opts.Clock.Now()
	if !wechatpay.IsUncertain(err) && wechatpay.IsCode(err, wechatpay.CodeOrderNotExist) {
		// A verified 404: the provider has no such order (it lost it,
		// or does not show it yet). Nobody can pay an order the
		// provider does not know, so this is an unpaid answer: the
		// schedule goes on, a later query still finds the order paid,
		// and the close at its end settles it.
		tx, err = wechatpay.Transaction{OutTradeNo: p.TradeNo, TradeState: wechatpay.CodeOrderNotExist}, nil
	}
	if err != nil {
		s.answered(n, paystore.ActionQuery, wechatpay.ErrorCode(err))
		s.log.WarnContext(ctx, "query answer uncertain; retrying", "err", err)
		return s.retry(ctx, p, paystore.ActionQuery, wechatpay.ErrorCode(err), now, n)
	}
	s.answered(n, paystore.ActionQuery, tx.TradeState)
	a := paystore.Attempt{Time: now, Action: paystore.ActionQuery, TradeState: tx.TradeState}
	switch tx.TradeState {
	case wechatpay.TradeStateSuccess, wechatpay.TradeStateRefund:
		if !s.amountMatches(ctx, p, tx) {
			return s.retry(ctx, p, paystore.ActionQuery, wechatpay.CodeResponseMismatch, now, n)
		}
		return s.markPaid(ctx, p.TradeNo, tx, a, "query")
	case wechatpay.TradeStateClosed:
		return s.markClosed(ctx, p.TradeNo, a, "query")
	case wechatpay.TradeStateNotPay, wechatpay.TradeStateUserPaying, wechatpay.TradeStatePayError, wechatpay.TradeStateRevoked,
		wechatpay.CodeOrderNotExist:
	default:
		s.log.WarnContext(ctx, "unknown trade state; retrying", "trade_state", tx.TradeState)
		return s.retry(ctx, p, paystore.ActionQuery, tx.TradeState, now, n)
	}
	next := p.Slot + 1
	due := now
	if next < len(s.opts.Schedule) {
		due = p.CreateTime.Add(s.opts.Schedule[next])
	}
	out, err := s.store.Step(ctx, p.TradeNo, p.Slot, a, next, due, 0)
	if err == nil && out == paystore.Stale {
		// The slot moved on since the read: another run moved it (and
		// scheduled its next check), or this step was applied and sent
		// again by the Redis client after its reply was lost, which
		// scheduled nothing. Either way the recorded next check is due.
		return s.scheduleRecorded(ctx, p.TradeNo)
	}
	if err != nil || out != paystore.Applied {
		return err
	}
	if p.Retries > 0 {
		// A certain answer after uncertain ones: no longer stuck.
		if err := s.store.ClearStuck(ctx, p.TradeNo); err != nil {
			s.log.WarnContext(ctx, "stuck list not updated", "err", err)
		}
	}
	if next < len(s.opts.Schedule) {
		return s.jobs.Schedule(ctx, p.TradeNo, due, nil)
	}
	p.Slot, p.NextCheck, p.Retries = next, due, 0
	return s.close(ctx, p, n)
}

// close closes the order at the provider after its last unpaid query.
func (s *Service) close(ctx context.Context, p paystore.Payment, n answers) error {
	err := s.provider.Close(ctx, p.TradeNo)
	now := s.opts.Clock.Now()
	s.answered(n, paystore.ActionClose, answer(err, "CLOSED"))
	switch {
	case err == nil, wechatpay.IsCode(err, wechatpay.CodeOrderClosed):
		return s.markClosed(ctx, p.TradeNo, paystore.Attempt{Time: now, Action: paystore.ActionClose, TradeState: wechatpay.TradeStateClosed}, "close")
	case wechatpay.IsCode(err, wechatpay.CodeOrderNotExist):
		// The provider has no such order, so it can never be paid.
		return s.markClosed(ctx, p.TradeNo, paystore.Attempt{Time: now, Action: paystore.ActionClose, TradeState: wechatpay.CodeOrderNotExist}, "close")
	case wechatpay.IsCode(err, wechatpay.CodeOrderPaid):
		return s.closeRefusedPaid(ctx, p, now, n)
	default:
		s.log.WarnContext(ctx, "close not confirmed; retrying", "err", err)
		return s.retry(ctx, p, paystore.ActionClose, wechatpay.ErrorCode(err), now, n)
	}
}

// closeRefusedPaid handles ORDERPAID: the shopper paid after the last
// query, so the order must become PAID.
func (s *Service) closeRefusedPaid(ctx context.Context, p paystore.Payment, at time.Time, n answers) error {
	out, err := s.store.Step(ctx, p.TradeNo, p.Slot,
		paystore.Attempt{Time: at, Action: paystore.ActionClose, TradeState: wechatpay.CodeOrderPaid}, p.Slot, p.NextCheck, p.Retries)
	if err != nil || out != paystore.Applied {
		return err
	}
	tx, err := s.provider.Query(ctx, p.TradeNo)
	now := s.opts.Clock.Now()
	s.answered(n, paystore.ActionQuery, answer(err, tx.TradeState))
	paid := err == nil && (tx.TradeState == wechatpay.TradeStateSuccess || tx.TradeState == wechatpay.TradeStateRefund)
	if paid && s.amountMatches(ctx, p, tx) {
		return s.markPaid(ctx, p.TradeNo, tx, paystore.Attempt{Time: now, Action: paystore.ActionQuery, TradeState: tx.TradeState}, "close-refused")
	}
	state := tx.TradeState
	switch {
	case err != nil:
		state = wechatpay.ErrorCode(err)
	case paid:
		state = wechatpay.CodeResponseMismatch
	}
	// Paid per the close answer but not confirmed by the query: ask again
	// later; the next run closes again, gets ORDERPAID again and queries.
	s.log.WarnContext(ctx, "close answered ORDERPAID but the query did not confirm; retrying", "trade_state", state, "err", err)
	return s.retry(ctx, p, paystore.ActionQuery, state, now, n)
}

// amountMatches reports whether a paid answer is for the placed amount.
// The client has already checked its signature, mchid, appid and
// out_trade_no; a signed answer with another amount is not trusted either:
// it is recorded as RESPONSE_MISMATCH and asked again, never marked PAID.
func (s *Service) amountMatches(ctx context.Context, p paystore.Payment, tx wechatpay.Transaction) bool {
	if tx.Amount.Total == p.AmountFen {
		return true
	}
	s.log.ErrorContext(ctx, "provider reports the order paid with another amount; not marking it paid",
		"amount_fen", tx.Amount.Total, "placed_fen", p.AmountFen, "transaction_id", tx.TransactionID)
	return false
}

// retry records an uncertain (or unusable) answer and schedules the same
// slot again after a jittered backoff (see retryDelay).
func (s *Service) retry(ctx context.Context, p paystore.Payment, action, state string, now time.Time, n answers) error {
	retries := p.Retries + 1
	due := now.Add(s.retryDelay(retries))
	out, err := s.store.Step(ctx, p.TradeNo, p.Slot, paystore.Attempt{Time: now, Action: action, TradeState: state}, p.Slot, due, retries)
	if err != nil || out != paystore.Applied {
		return err
	}
	n[eventrate.ProviderUncertain]++
	if err := s.store.MarkStuck(ctx, p.TradeNo, now); err != nil {
		s.log.WarnContext(ctx, "stuck list not updated", "err", err)
	}
	return s.jobs.Schedule(ctx, p.TradeNo, due, nil)
}

// answered records a provider's answer to a check: the metric, and the
// answer in the check's tally.
func (s *Service) answered(n answers, action, answer string) {
	s.calls.WithLabelValues(action, answer).Inc()
	n[eventrate.ProviderAnswer]++
}

// count adds a check's tally to the cluster-wide counts; a failure loses
// the counts only (logged).
func (s *Service) count(ctx context.Context, n answers) {
	if s.opts.Events == nil || len(n) == 0 {
		return
	}
	if err := s.opts.Events.AddAll(context.WithoutCancel(ctx), n); err != nil {
		s.log.WarnContext(ctx, "count provider answers", "err", err)
	}
}

// retryDelay is the wait before check retry number retries (1 for the
// first), drawn from [d/2, d] where d is RetryBase doubling per retry up
// to RetryMax: replicas whose checks all met the same provider outage do
// not all ask again at the same instant. It never exceeds RetryMax. It
// is truncated to whole milliseconds, the resolution the store keeps
// times at, so the scheduled check and the recorded NextCheck agree.
func (s *Service) retryDelay(retries int) time.Duration {
	d := backoff.Exponential(s.opts.RetryBase, s.opts.RetryMax, retries-1)
	return backoff.Jitter(d).Truncate(time.Millisecond)
}

func (s *Service) markPaid(ctx context.Context, code string, tx wechatpay.Transaction, a paystore.Attempt, cause string) error {
	paid := tx.PaidAt()
	if paid.IsZero() {
		paid = a.Time
	}
	out, listed, err := s.store.MarkPaid(ctx, code, tx.TransactionID, paid, a)
	if err != nil {
		return err
	}
	switch out {
	case paystore.Applied:
		s.log.InfoContext(ctx, "payment confirmed by query", "transaction_id", tx.TransactionID)
		return s.transitioned(ctx, code, paystore.StatusPaid, cause, a.Time, listed)
	case paystore.AlreadyClosed:
		// Retrying cannot help; an operator must look at it.
		s.log.ErrorContext(ctx, "provider reports a closed payment as paid", "transaction_id", tx.TransactionID, "err", ErrPaidAfterClose)
	}
	return nil
}

func (s *Service) markClosed(ctx context.Context, code string, a paystore.Attempt, cause string) error {
	out, listed, err := s.store.MarkClosed(ctx, code, a.Time, a)
	if err != nil {
		return err
	}
	if out == paystore.Applied {
		s.log.InfoContext(ctx, "payment timed out and was closed")
		return s.transitioned(ctx, code, paystore.StatusClosed, cause, a.Time, listed)
	}
	return nil
}

// scheduleRecorded schedules the check of a tracked UNPAID payment at its
// recorded next-check time (a pending check at that time only stays).
func (s *Service) scheduleRecorded(ctx context.Context, code string) error {
	p, err := s.store.Get(ctx, code)
	if errors.Is(err, paystore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.Status != paystore.StatusUnpaid || !p.Tracking || p.NextCheck.IsZero() {
		return nil
	}
	return s.jobs.Schedule(ctx, code, p.NextCheck, nil)
}
