package paystore

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestTransitionsOnlyMoveForward runs every transition script: a payment
// moves from UNPAID to PAID or CLOSED once, never out of either, a step
// for a slot that moved on changes nothing, and a payment whose tracking
// stopped takes no more steps but can still end.
func TestTransitionsOnlyMoveForward(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := New(rdb, prefix, time.Hour)
	t0 := time.UnixMilli(time.Now().UnixMilli()).UTC()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, code := range []string{"P1", "P2"} {
		p := Payment{TradeNo: code, OrderCode: "SO-" + code, Member: "m1", AmountFen: 1999, CreateTime: t0, NextCheck: at(5 * time.Second)}
		if err := s.Create(ctx, p); err != nil {
			t.Fatalf("Create(%q) = %v, want nil", code, err)
		}
		if err := s.Create(ctx, p); !errors.Is(err, ErrExists) {
			t.Fatalf("Create(%q) again = %v, want %v", code, err, ErrExists)
		}
	}
	query := Attempt{Time: at(5 * time.Second), Action: ActionQuery, TradeState: "NOTPAY"}
	listed := map[string]bool{} // what MarkPaid and MarkClosed reported
	paid := func(code, tx string, paidAt, seen time.Duration) func() (Outcome, error) {
		return func() (Outcome, error) {
			o, l, err := s.MarkPaid(ctx, code, tx, at(paidAt), Attempt{Time: at(seen), Action: ActionNotify, TradeState: "SUCCESS"})
			listed[code] = listed[code] || l
			return o, err
		}
	}
	closed := func(code string, d time.Duration) func() (Outcome, error) {
		return func() (Outcome, error) {
			o, l, err := s.MarkClosed(ctx, code, at(d), Attempt{Time: at(d), Action: ActionClose, TradeState: "CLOSED"})
			listed[code] = listed[code] || l
			return o, err
		}
	}
	steps := []struct {
		name string
		do   func() (Outcome, error)
		want Outcome
	}{
		{"step a slot that moved on", func() (Outcome, error) { return s.Step(ctx, "P1", 3, query, 4, at(time.Minute), 0) }, Stale},
		{"step", func() (Outcome, error) { return s.Step(ctx, "P1", 0, query, 1, at(30*time.Second), 1) }, Applied},
		{"move the next check", func() (Outcome, error) { return s.SetNextCheck(ctx, "P1", at(10*time.Second)) }, Applied},
		{"mark paid", paid("P1", "tx-1", 9*time.Second, 10*time.Second), Applied},
		{"mark paid again", paid("P1", "tx-2", 11*time.Second, 11*time.Second), AlreadyPaid},
		{"close a paid payment", closed("P1", time.Hour), AlreadyPaid},
		{"stop tracking a paid payment", func() (Outcome, error) { return s.StopTracking(ctx, "P1") }, AlreadyPaid},
		{"step a paid payment", func() (Outcome, error) { return s.Step(ctx, "P1", 1, query, 2, at(time.Minute), 0) }, AlreadyPaid},
		{"stop tracking", func() (Outcome, error) { return s.StopTracking(ctx, "P2") }, Applied},
		{"stop tracking again", func() (Outcome, error) { return s.StopTracking(ctx, "P2") }, Untracked},
		{"step an untracked payment", func() (Outcome, error) { return s.Step(ctx, "P2", 0, query, 1, at(time.Minute), 0) }, Untracked},
		{"move an untracked payment's check", func() (Outcome, error) { return s.SetNextCheck(ctx, "P2", at(time.Minute)) }, Untracked},
		{"close an untracked payment", closed("P2", 2*time.Minute), Applied},
		{"pay a closed payment", paid("P2", "tx-3", 3*time.Minute, 3*time.Minute), AlreadyClosed},
		{"step a missing payment", func() (Outcome, error) { return s.Step(ctx, "P3", 0, query, 1, at(time.Minute), 0) }, Missing},
		{"stop tracking a missing payment", func() (Outcome, error) { return s.StopTracking(ctx, "P3") }, Missing},
	}
	for _, st := range steps {
		got, err := st.do()
		if err != nil || got != st.want {
			t.Errorf("%s = %q, %v; want %q", st.name, got, err, st.want)
		}
	}
	// P1 had an uncertain answer, P2 stopped being tracked: both may be on
	// the stuck list.
	if want := map[string]bool{"P1": true, "P2": true}; !maps.Equal(listed, want) {
		t.Errorf("listed reported by MarkPaid and MarkClosed = %v, want %v", listed, want)
	}
	p1, err := s.Get(ctx, "P1")
	if err != nil {
		t.Fatal(err)
	}
	if p1.Status != StatusPaid || p1.TransactionID != "tx-1" || !p1.PaidTime.Equal(at(9*time.Second)) || !p1.DoneTime.Equal(at(10*time.Second)) ||
		p1.Slot != 1 || p1.Retries != 1 || !p1.Listed || !p1.NextCheck.IsZero() || len(p1.Attempts) != 2 {
		t.Errorf("Get(%q) = %+v, want PAID by tx-1 at +9s (done +10s), slot 1, 1 retry, listed, no next check, 2 attempts", "P1", p1)
	}
	p2, err := s.Get(ctx, "P2")
	if err != nil {
		t.Fatal(err)
	}
	if p2.Status != StatusClosed || p2.Tracking || !p2.ClosedTime.Equal(at(2*time.Minute)) || len(p2.Attempts) != 1 {
		t.Errorf("Get(%q) = %+v, want CLOSED at +2m, untracked, 1 attempt", "P2", p2)
	}
	if _, err := s.Get(ctx, "P3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(%q) = %v, want %v", "P3", err, ErrNotFound)
	}
}
