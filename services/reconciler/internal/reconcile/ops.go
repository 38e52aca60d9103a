package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/delayq"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
)

// Operators' calls: counts, one payment with its check, the stuck list
// and moving a check.

// Inspector reads the check queue (pkg/delayq) for operators.
type Inspector interface {
	Stats(ctx context.Context) (delayq.Stats, error)
	Lookup(ctx context.Context, id string) (delayq.JobState, error)
}

var (
	// ErrNotUnpaid means the payment is PAID or CLOSED already.
	ErrNotUnpaid = errors.New("payment is not UNPAID")
	// ErrUntracked means the payment's reconciliation was cancelled.
	ErrUntracked = errors.New("payment is not being reconciled")
	// ErrNoInspector means the service was built without Options.Inspector.
	ErrNoInspector = errors.New("check queue inspection unavailable")
	// ErrAmbiguous means several members have a payment under the order
	// code an operator gave alone.
	ErrAmbiguous = errors.New("several members have a payment with this order code")
)

// Stuck reasons (see ListStuck).
const (
	StuckUncertain = "uncertain"
	StuckUntracked = "untracked"
)

// transitioned records that a payment became PAID or CLOSED at at: the
// metric, the day's count, and, when listed (it may be on the stuck list),
// its removal from the stuck list. An error
// means the count is not recorded yet: the caller returns it, so the check
// (or the provider's callback) is run again, finds the payment PAID or
// CLOSED and records it then (see recorded).
func (s *Service) transitioned(ctx context.Context, code string, to paystore.Status, cause string, at time.Time, listed bool) error {
	s.transitions.WithLabelValues(string(to), cause).Inc()
	return s.store.Finished(ctx, code, to, at, listed)
}

// recorded records again a payment found PAID or CLOSED in the day's
// count (adding it again changes nothing), for a transition whose own
// record was lost: its process stopped, or Redis failed, in between.
func (s *Service) recorded(ctx context.Context, p paystore.Payment) error {
	if p.Status != paystore.StatusPaid && p.Status != paystore.StatusClosed {
		return nil
	}
	return s.store.Finished(ctx, p.TradeNo, p.Status, p.DoneTime, p.Listed)
}

// Stats are the check queue's and the payments' counts.
type Stats struct {
	Queue       delayq.Stats
	PaidToday   int64
	ClosedToday int64
	Stuck       int64
	// Answers are the provider's answers to checks over the last 5
	// minutes and the last hour (empty without Options.Events).
	Answers []eventrate.Window
}

// answerWindows are the windows of Stats.Answers, in minutes.
var answerWindows = []int{5, 60}

// Stats reads the counts; "today" is the UTC day of the queue's time.
func (s *Service) Stats(ctx context.Context) (Stats, error) {
	if s.opts.Inspector == nil {
		return Stats{}, ErrNoInspector
	}
	q, err := s.opts.Inspector.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Queue: q}
	if out.PaidToday, out.ClosedToday, err = s.store.TransitionsOn(ctx, q.Now); err != nil {
		return Stats{}, err
	}
	if out.Stuck, err = s.store.StuckCount(ctx); err != nil {
		return Stats{}, err
	}
	if s.opts.Events != nil {
		if out.Answers, err = s.opts.Events.Windows(ctx, answerWindows...); err != nil {
			return Stats{}, err
		}
	}
	return out, nil
}

// resolve finds the out_trade_no of the one payment under an order code
// (of any member): ErrNotFound when none, ErrAmbiguous when several
// members use the code.
func (s *Service) resolve(ctx context.Context, code string) (string, error) {
	members, err := s.store.CodeMembers(ctx, code)
	switch {
	case err != nil:
		return "", err
	case len(members) == 0:
		return "", ErrNotFound
	case len(members) > 1:
		return "", ErrAmbiguous
	}
	return wechatpay.OutTradeNo(members[0], code), nil
}

// Inspect returns the payment under an order code (any member's) and the
// state of its check.
func (s *Service) Inspect(ctx context.Context, code string) (paystore.Payment, delayq.JobState, error) {
	tradeNo, err := s.resolve(ctx, code)
	if err != nil {
		return paystore.Payment{}, delayq.JobState{}, err
	}
	return s.inspect(ctx, tradeNo)
}

// inspect returns the payment of an out_trade_no and its check.
func (s *Service) inspect(ctx context.Context, code string) (paystore.Payment, delayq.JobState, error) {
	if s.opts.Inspector == nil {
		return paystore.Payment{}, delayq.JobState{}, ErrNoInspector
	}
	p, err := s.store.Get(ctx, code)
	if errors.Is(err, paystore.ErrNotFound) {
		return paystore.Payment{}, delayq.JobState{}, ErrNotFound
	}
	if err != nil {
		return paystore.Payment{}, delayq.JobState{}, err
	}
	js, err := s.opts.Inspector.Lookup(ctx, code)
	if err != nil {
		return paystore.Payment{}, delayq.JobState{}, err
	}
	return p, js, nil
}

// StuckPayment is an entry of ListStuck.
type StuckPayment struct {
	Payment paystore.Payment
	Check   delayq.JobState
	Reason  string
	Since   time.Time
}

// ListStuck returns up to n stuck payments from offset off, oldest first,
// and the stuck list's length: UNPAID payments whose last provider answers
// were uncertain (retried with backoff) and UNPAID payments whose tracking
// was cancelled. Entries that no longer apply (the payment moved on or
// expired) are dropped from the list on the way.
func (s *Service) ListStuck(ctx context.Context, off, n int) ([]StuckPayment, int64, error) {
	refs, total, err := s.store.Stuck(ctx, off, n)
	if err != nil {
		return nil, 0, err
	}
	var out []StuckPayment
	for _, r := range refs {
		p, js, err := s.inspect(ctx, r.TradeNo)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, 0, err
		}
		reason := ""
		switch {
		case err != nil || p.Status != paystore.StatusUnpaid:
		case !p.Tracking:
			reason = StuckUntracked
		case p.Retries > 0:
			reason = StuckUncertain
		}
		if reason == "" {
			if err := s.store.ClearStuck(ctx, r.TradeNo); err != nil {
				return nil, 0, err
			}
			continue
		}
		out = append(out, StuckPayment{Payment: p, Check: js, Reason: reason, Since: r.Since})
	}
	return out, total, nil
}

// RescheduleCheck moves the next check of an UNPAID tracked payment to at:
// the payment's recorded next check first, then the delayed job, so a
// check that fires in between finds the two consistent either way (an
// earlier firing puts itself back at the recorded time). The check runs
// the schedule step that was due; later steps keep their offsets from the
// payment's creation.
func (s *Service) RescheduleCheck(ctx context.Context, orderCode string, at time.Time) (paystore.Payment, delayq.JobState, error) {
	code, err := s.resolve(ctx, orderCode)
	if err != nil {
		return paystore.Payment{}, delayq.JobState{}, err
	}
	out, err := s.store.SetNextCheck(ctx, code, at)
	if err != nil {
		return paystore.Payment{}, delayq.JobState{}, err
	}
	switch out {
	case paystore.Applied:
	case paystore.Missing:
		return paystore.Payment{}, delayq.JobState{}, ErrNotFound
	case paystore.Untracked:
		return paystore.Payment{}, delayq.JobState{}, ErrUntracked
	default:
		return paystore.Payment{}, delayq.JobState{}, fmt.Errorf("%w: it is %s", ErrNotUnpaid, out)
	}
	if err := s.jobs.Schedule(ctx, code, at, nil); err != nil {
		return paystore.Payment{}, delayq.JobState{}, fmt.Errorf("reschedule check of %s: %w", code, err)
	}
	s.log.InfoContext(ctx, "payment check rescheduled", "order_code", orderCode, "out_trade_no", code, "check_time", at)
	return s.inspect(ctx, code)
}
