package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
)

var (
	notpay = summary{paystore.ActionQuery, wechatpay.TradeStateNotPay}
	closed = summary{paystore.ActionClose, wechatpay.TradeStateClosed}
)

func TestNeverPaidQueriesOnScheduleThenClosesOnce(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	created := h.create("NEVER-1", 100)
	if due, ok := h.jobs.pending(tn("NEVER-1")); !ok || !due.Equal(created.CreateTime.Add(5*time.Second)) {
		t.Fatalf("first check due %v (pending %v), want create+5s", due, ok)
	}
	h.runFor(2 * time.Hour)

	p := h.get("NEVER-1")
	if p.Status != paystore.StatusClosed {
		t.Fatalf("Status = %s, want CLOSED", p.Status)
	}
	want := append(repeat(notpay, 7), closed)
	if diff := cmp.Diff(want, summarise(p.Attempts)); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	for i, off := range h.schedule {
		if got := p.Attempts[i].Time.Sub(created.CreateTime); got != off {
			t.Errorf("query %d at create+%v, want create+%v", i+1, got, off)
		}
	}
	if got := p.Attempts[7].Time.Sub(created.CreateTime); got != 30*time.Minute {
		t.Errorf("close at create+%v, want create+30m", got)
	}
	o, _ := h.sim.Order(tn("NEVER-1"))
	if o.Queries != 7 || o.Closes != 1 || o.TradeState != wechatpay.TradeStateClosed {
		t.Errorf("provider saw %d queries and %d closes (state %s), want 7 and 1 (CLOSED)", o.Queries, o.Closes, o.TradeState)
	}
	if _, ok := h.jobs.pending(tn("NEVER-1")); ok {
		t.Error("a check is still pending after CLOSED")
	}
	if !p.NextCheck.IsZero() || p.ClosedTime.IsZero() {
		t.Errorf("NextCheck = %v, ClosedTime = %v, want unset and set", p.NextCheck, p.ClosedTime)
	}
}

func TestPaidAtQueryK(t *testing.T) {
	for k := 1; k <= 7; k++ {
		t.Run(fmt.Sprintf("query %d", k), func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			code := fmt.Sprintf("PAID-%d", k)
			// Lost callback: the shopper pays just before query k.
			h.sim.SetBehaviour(tn(code), paysim.Behaviour{PayAfter: paysim.Duration(h.schedule[k-1] - time.Millisecond)})
			h.create(code, 100)
			h.runFor(2 * time.Hour)

			p := h.get(code)
			if p.Status != paystore.StatusPaid || p.TransactionID == "" || p.PaidTime.IsZero() {
				t.Fatalf("payment = %+v, want PAID with transaction id and paid time", p)
			}
			want := append(repeat(notpay, k-1), summary{paystore.ActionQuery, wechatpay.TradeStateSuccess})
			if diff := cmp.Diff(want, summarise(p.Attempts)); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			o, _ := h.sim.Order(tn(code))
			if o.Queries != k || o.Closes != 0 {
				t.Errorf("provider saw %d queries and %d closes, want %d and 0", o.Queries, o.Closes, k)
			}
		})
	}
}

// payingProvider lets the shopper pay right before the close reaches the
// provider.
type payingProvider struct {
	reconcile.Provider
	sim *paysim.Sim
}

func (p payingProvider) Close(ctx context.Context, code string) error {
	if _, err := p.sim.Pay(ctx, code, false); err != nil { // code is the out_trade_no here
		return err
	}
	return p.Provider.Close(ctx, code)
}

func TestCloseAnsweringOrderPaidMarksPaid(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.svc = reconcile.New(h.store, payingProvider{Provider: h.client, sim: h.sim}, h.jobs, reconcile.Options{Clock: h.clock})
	h.create("LATE-1", 100)
	h.runFor(2 * time.Hour)

	p := h.get("LATE-1")
	if p.Status != paystore.StatusPaid {
		t.Fatalf("Status = %s, want PAID", p.Status)
	}
	want := append(repeat(notpay, 7), summary{paystore.ActionClose, wechatpay.CodeOrderPaid}, summary{paystore.ActionQuery, wechatpay.TradeStateSuccess})
	if diff := cmp.Diff(want, summarise(p.Attempts)); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if st := h.sim.Stats(); st.ClosedAfterPaid != 0 || st.CloseRefusedPaid != 1 || st.Closes != 0 {
		t.Errorf("provider stats = %+v, want 1 close refused as paid and none closed", st)
	}
}

func TestUncertainAnswersAreRetriedNotConsumed(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.sim.SetBehaviour(tn("FLAKY-1"), paysim.Behaviour{
		QueryFault: paysim.Fault{Code: wechatpay.CodeSystemError, Count: 3},
		CloseFault: paysim.Fault{Code: wechatpay.CodeFrequencyLimited, Status: 429, Count: 2},
	})
	created := h.create("FLAKY-1", 100)
	h.runFor(2 * time.Hour)

	p := h.get("FLAKY-1")
	if p.Status != paystore.StatusClosed {
		t.Fatalf("Status = %s, want CLOSED", p.Status)
	}
	sysErr := summary{paystore.ActionQuery, wechatpay.CodeSystemError}
	limited := summary{paystore.ActionClose, wechatpay.CodeFrequencyLimited}
	want := append(append(repeat(sysErr, 3), repeat(notpay, 7)...), limited, limited, closed)
	if diff := cmp.Diff(want, summarise(p.Attempts)); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	// The first query at its slot, then backoffs of 2s, 4s, 8s, each
	// drawn from [d/2, d], then the slot.
	if got := p.Attempts[0].Time.Sub(created.CreateTime); got != 5*time.Second {
		t.Errorf("attempt 1 at create+%v, want create+5s", got)
	}
	for i, d := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if got := p.Attempts[i+1].Time.Sub(p.Attempts[i].Time); got < d/2 || got > d {
			t.Errorf("attempt %d %v after attempt %d, want within [%v, %v]", i+2, got, i+1, d/2, d)
		}
	}
}

// TestPaymentsMeetingAnOutageTogetherAreRetriedAtSpreadTimes: payments
// whose checks all meet the same provider outage at the same instant (as
// on several replicas) are asked again at times spread over the jittered
// backoff [RetryBase/2, RetryBase], not all at once.
func TestPaymentsMeetingAnOutageTogetherAreRetriedAtSpreadTimes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	const n = 20
	var created time.Time
	for i := range n {
		code := fmt.Sprintf("OUTAGE-%d", i)
		h.sim.SetBehaviour(tn(code), paysim.Behaviour{QueryFault: paysim.Fault{Code: wechatpay.CodeSystemError, Status: 503, Count: 1}})
		created = h.create(code, 100).CreateTime
	}
	h.runFor(5 * time.Second) // every first query fails at create+5s
	dues := map[time.Time]bool{}
	for i := range n {
		due, ok := h.jobs.pending(tn(fmt.Sprintf("OUTAGE-%d", i)))
		if wait := due.Sub(created.Add(5 * time.Second)); !ok || wait < time.Second || wait > 2*time.Second {
			t.Errorf("OUTAGE-%d retry due %v after the failure (pending %v), want within [1s, 2s]", i, wait, ok)
		}
		dues[due] = true
	}
	if len(dues) < n/4 {
		t.Errorf("%d payments that met the outage together are retried at %d distinct times, want them spread", n, len(dues))
	}
}

func TestNeverClosedWhileUncertain(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.sim.SetBehaviour(tn("DOWN-1"), paysim.Behaviour{QueryFault: paysim.Fault{Code: wechatpay.CodeSystemError, Status: 503, Count: 1 << 30}})
	h.create("DOWN-1", 100)
	h.runFor(time.Hour)

	p := h.get("DOWN-1")
	if p.Status != paystore.StatusUnpaid || p.Slot != 0 {
		t.Fatalf("Status = %s, slot %d, want UNPAID at slot 0", p.Status, p.Slot)
	}
	for _, a := range p.Attempts {
		if a.Action != paystore.ActionQuery || a.TradeState != wechatpay.CodeSystemError {
			t.Fatalf("attempt %+v, want only uncertain queries", a)
		}
	}
	if o, _ := h.sim.Order(tn("DOWN-1")); o.Closes != 0 {
		t.Errorf("provider saw %d closes, want 0", o.Closes)
	}
	if due, ok := h.jobs.pending(tn("DOWN-1")); !ok || p.NextCheck.IsZero() || !due.Equal(p.NextCheck) {
		t.Errorf("pending check %v (%v), NextCheck %v, want a pending retry at NextCheck", due, ok, p.NextCheck)
	}
}

func TestCloseOfYoungOrderRetried(t *testing.T) {
	h := newHarness(t, harnessOpts{minCloseAge: 35 * time.Minute})
	created := h.create("YOUNG-1", 100)
	h.runFor(2 * time.Hour)

	p := h.get("YOUNG-1")
	if p.Status != paystore.StatusClosed {
		t.Fatalf("Status = %s, want CLOSED", p.Status)
	}
	last := p.Attempts[len(p.Attempts)-1]
	if last.Time.Sub(created.CreateTime) < 35*time.Minute || last.Action != paystore.ActionClose {
		t.Errorf("closed by %+v at create+%v, want a close at or after create+35m", last, last.Time.Sub(created.CreateTime))
	}
	for _, a := range p.Attempts[7 : len(p.Attempts)-1] {
		if a.TradeState != wechatpay.CodeCloseTooEarly {
			t.Errorf("attempt %+v between the last query and the close, want %s", a, wechatpay.CodeCloseTooEarly)
		}
	}
	if o, _ := h.sim.Order(tn("YOUNG-1")); o.Queries != 7 {
		t.Errorf("provider saw %d queries, want 7", o.Queries)
	}
}

func TestApplyNotification(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	h.create("N-1", 500)
	h.runFor(10 * time.Second) // one query

	_, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn("N-1"), TransactionID: "T1", TradeState: "SUCCESS", AmountFen: 499})
	if !errors.Is(err, reconcile.ErrAmountMismatch) {
		t.Fatalf("ApplyNotification(wrong amount) = %v, want ErrAmountMismatch", err)
	}
	if p := h.get("N-1"); p.Status != paystore.StatusUnpaid || len(p.Attempts) != 1 {
		t.Fatalf("after a wrong amount: %s with %d attempts, want UNPAID with 1", p.Status, len(p.Attempts))
	}
	if _, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn("NOPE"), TradeState: "SUCCESS", AmountFen: 1}); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("ApplyNotification(unknown) = %v, want ErrNotFound", err)
	}

	paidAt := h.clock.Now().Add(-time.Second).Truncate(time.Second)
	for range 15 {
		p, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn("N-1"), TransactionID: "T1", TradeState: "SUCCESS", AmountFen: 500, SuccessTime: paidAt})
		if err != nil || p.Status != paystore.StatusPaid {
			t.Fatalf("ApplyNotification() = %s, %v, want PAID", p.Status, err)
		}
	}
	p := h.get("N-1")
	want := []summary{notpay, {paystore.ActionNotify, wechatpay.TradeStateSuccess}}
	if diff := cmp.Diff(want, summarise(p.Attempts)); diff != "" {
		t.Errorf("attempts after 15 notifications (-want +got):\n%s", diff)
	}
	if !p.PaidTime.Equal(paidAt) || p.TransactionID != "T1" {
		t.Errorf("PaidTime %v, TransactionID %q, want %v and T1", p.PaidTime, p.TransactionID, paidAt)
	}
	if _, ok := h.jobs.pending(tn("N-1")); ok {
		t.Error("check still pending after the notification")
	}
	h.runFor(time.Hour)
	if o, _ := h.sim.Order(tn("N-1")); o.Queries != 1 || o.Closes != 0 {
		t.Errorf("provider saw %d queries and %d closes, want 1 and 0", o.Queries, o.Closes)
	}
}

func TestCreateIdempotentAndOwned(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	first := h.create("C-1", 100)
	again := h.create("C-1", 100)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("repeated Create (-first +again):\n%s", diff)
	}
	if o, _ := h.sim.Order(tn("C-1")); o.Creates != 1 {
		t.Errorf("provider saw %d creates, want 1", o.Creates)
	}
	tests := []struct {
		member string
		amount int64
		desc   string
	}{
		{"m1", 101, "order C-1"},
		{"m1", 100, "other"},
	}
	for _, tt := range tests {
		if _, err := h.svc.Create(ctx, tt.member, "C-1", tt.amount, tt.desc); !errors.Is(err, reconcile.ErrOrderCodeTaken) {
			t.Errorf("Create(%s, %d, %q) = %v, want ErrOrderCodeTaken", tt.member, tt.amount, tt.desc, err)
		}
	}
	if _, err := h.svc.Get(ctx, "m2", "C-1"); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("Get(other member) = %v, want ErrNotFound", err)
	}
	if _, err := h.svc.CancelTracking(ctx, "m2", "C-1"); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("CancelTracking(other member) = %v, want ErrNotFound", err)
	}
	p, err := h.svc.CancelTracking(ctx, "m1", "C-1")
	if err != nil || p.Tracking || p.Status != paystore.StatusUnpaid {
		t.Fatalf("CancelTracking() = %+v, %v, want UNPAID untracked", p, err)
	}
	h.runFor(time.Hour)
	if o, _ := h.sim.Order(tn("C-1")); o.Queries != 0 || o.Closes != 0 {
		t.Errorf("provider saw %d queries and %d closes after CancelTracking, want none", o.Queries, o.Closes)
	}
}

// TestRandomInterleavings races shoppers paying (with and without
// callbacks, repeated callbacks) against queries and closes of many orders
// fired concurrently.
func TestRandomInterleavings(t *testing.T) {
	const orders = 60
	h := newHarness(t, harnessOpts{minCloseAge: time.Minute})
	h.parallel = true
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	racy := &racyProvider{Provider: h.client, h: h, rng: rand.New(rand.NewPCG(seed, 3))}
	h.svc = reconcile.New(h.store, racy, h.jobs, reconcile.Options{
		Schedule: h.schedule, RetryBase: 2 * time.Second, RetryMax: 20 * time.Second, Clock: h.clock,
	})

	for i := range orders {
		code := fmt.Sprintf("R-%d", i)
		if rng.IntN(4) == 0 {
			h.sim.SetBehaviour(tn(code), paysim.Behaviour{
				QueryFault: paysim.Fault{Code: wechatpay.CodeSystemError, Count: rng.IntN(3)},
				CloseFault: paysim.Fault{Code: wechatpay.CodeSystemError, Count: rng.IntN(3), Applied: rng.IntN(2) == 0},
			})
		}
		h.create(code, int64(100+i))
	}
	// Shoppers pay at random moments, some around the closing time.
	type payment struct {
		code   string
		at     time.Duration
		notify int
	}
	var pays []payment
	for i := range orders {
		if rng.IntN(3) == 0 {
			continue
		}
		at := time.Duration(rng.Int64N(int64(35 * time.Minute)))
		if rng.IntN(3) == 0 {
			at = 30*time.Minute + time.Duration(rng.Int64N(int64(2*time.Second))) - time.Second
		}
		pays = append(pays, payment{fmt.Sprintf("R-%d", i), at, rng.IntN(3)})
	}

	start := h.clock.Now()
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		h.runFor(2 * time.Hour)
	})
	var applied sync.Map
	for _, p := range pays {
		wg.Go(func() {
			for h.clock.Now().Sub(start) < p.at {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Microsecond):
				}
			}
			if _, err := h.sim.Pay(ctx, tn(p.code), false); err != nil {
				return // closed first: the shopper was too late
			}
			o, _ := h.sim.Order(tn(p.code))
			for range p.notify {
				_, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn(p.code), TransactionID: o.TransactionID,
					TradeState: wechatpay.TradeStateSuccess, AmountFen: o.AmountFen, SuccessTime: o.PaidTime})
				if err != nil {
					t.Errorf("ApplyNotification(%s) = %v", p.code, err)
				}
				applied.Store(p.code, true)
			}
		})
	}
	wg.Wait()
	racy.wg.Wait()
	h.runFor(2 * time.Hour) // checks rescheduled by late notifications' races

	var paid, closedN int
	for i := range orders {
		code := fmt.Sprintf("R-%d", i)
		p := h.get(code)
		o, _ := h.sim.Order(tn(code))
		switch {
		case p.Status == paystore.StatusPaid && o.TradeState == wechatpay.TradeStateSuccess:
			paid++
		case p.Status == paystore.StatusClosed && o.TradeState == wechatpay.TradeStateClosed:
			closedN++
		default:
			t.Errorf("%s: local %s, provider %s; want both PAID/SUCCESS or both CLOSED", code, p.Status, o.TradeState)
		}
		if o.Queries > 7+3+1 { // 7 slots, at most 2 injected faults, 1 query after ORDERPAID
			t.Errorf("%s: %d queries, want at most 11", code, o.Queries)
		}
	}
	st := h.sim.Stats()
	if st.ClosedAfterPaid != 0 {
		t.Errorf("ClosedAfterPaid = %d, want 0", st.ClosedAfterPaid)
	}
	t.Logf("%d paid, %d closed; provider stats %+v", paid, closedN, st)
}

// racyProvider makes some shoppers pay (and the provider notify) at the
// very moment a query or close is on its way, from another goroutine.
type racyProvider struct {
	reconcile.Provider
	h  *harness
	wg sync.WaitGroup

	mu  sync.Mutex
	rng *rand.Rand
}

func (r *racyProvider) maybePay(code string) {
	r.mu.Lock()
	pay, notify, delay := r.rng.IntN(20) == 0, r.rng.IntN(2) == 0, time.Duration(r.rng.IntN(300))*time.Microsecond
	r.mu.Unlock()
	if !pay {
		return
	}
	r.wg.Go(func() {
		ctx := context.Background()
		if _, err := r.h.sim.Pay(ctx, tn(code), false); err != nil || !notify {
			return
		}
		o, _ := r.h.sim.Order(tn(code))
		for range 2 {
			if _, err := r.h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn(code), TransactionID: o.TransactionID,
				TradeState: wechatpay.TradeStateSuccess, AmountFen: o.AmountFen, SuccessTime: o.PaidTime}); err != nil {
				r.h.t.Errorf("ApplyNotification(%s) = %v", code, err)
			}
		}
	})
	time.Sleep(delay)
}

func (r *racyProvider) Query(ctx context.Context, code string) (wechatpay.Transaction, error) {
	r.maybePay(code)
	return r.Provider.Query(ctx, code)
}

func (r *racyProvider) Close(ctx context.Context, code string) error {
	r.maybePay(code)
	return r.Provider.Close(ctx, code)
}

func TestStaleFiringOnlyReschedules(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	created := h.create("STALE-1", 100)
	h.runFor(10 * time.Second) // query 1 at +5s; next due at +30s
	if err := h.svc.Check(context.Background(), "STALE-1", created.NextCheck); err != nil {
		t.Fatalf("Check(stale due) = %v", err)
	}
	if o, _ := h.sim.Order(tn("STALE-1")); o.Queries != 1 {
		t.Errorf("provider saw %d queries after a stale firing, want 1", o.Queries)
	}
	if due, ok := h.jobs.pending(tn("STALE-1")); !ok || !due.Equal(created.CreateTime.Add(30*time.Second)) {
		t.Errorf("pending check at %v (%v), want create+30s", due, ok)
	}
}

// TestCreateSchedulesTheFirstCheckWhateverTheCaller: once the provider
// has the order, the payment is stored and its first check scheduled even
// if the caller goes away in between.
func TestCreateSchedulesTheFirstCheckWhateverTheCaller(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	h.jobs.beforeSchedule = cancel // the caller gives up right after the store
	_, _ = h.svc.Create(ctx, "m1", "C-1", 100, "order C-1")
	h.jobs.beforeSchedule = nil
	if _, ok := h.jobs.pending(tn("C-1")); !ok {
		t.Fatal("no check scheduled for a stored UNPAID payment whose caller went away")
	}
	h.runFor(time.Hour)
	if p := h.get("C-1"); p.Status != paystore.StatusClosed {
		t.Errorf("payment after its schedule = %s, want CLOSED", p.Status)
	}
}

// TestRepairSchedulesPaymentsStoredButNotScheduled stops a Create between
// storing the payment and scheduling its check (the reconciler dies, or
// the queue is unreachable): the repair finds the UNPAID payment without a
// pending check after its grace and schedules it; the payment then ends
// CLOSED at the provider and locally. A payment still inside its grace,
// and one whose Create finished, are left alone.
func TestRepairSchedulesPaymentsStoredButNotScheduled(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	h.jobs.failSchedule = 1
	if _, err := h.svc.Create(ctx, "m1", "C-LOST", 100, "order C-LOST"); err == nil {
		t.Fatal("Create() with the queue failing = nil, want the error")
	}
	h.create("C-OK", 100)
	if n, err := h.svc.RepairSchedules(ctx, 100); err != nil || n != 0 {
		t.Errorf("RepairSchedules() inside the grace = %d, %v; want 0 (a Create may still be running)", n, err)
	}
	h.runFor(reconcile.DefaultSchedule[0])
	h.clock.Advance(reconcile.DefaultRepairGrace + time.Second)
	if n, err := h.svc.RepairSchedules(ctx, 100); err != nil || n != 1 {
		t.Errorf("RepairSchedules() after the grace = %d, %v; want 1", n, err)
	}
	due, ok := h.jobs.pending(tn("C-LOST"))
	if !ok || !due.Equal(h.get("C-LOST").NextCheck) {
		t.Fatalf("pending check of the repaired payment = %v, %v; want its stored next check %v", due, ok, h.get("C-LOST").NextCheck)
	}
	if n, err := h.svc.RepairSchedules(ctx, 100); err != nil || n != 0 {
		t.Errorf("RepairSchedules() again = %d, %v; want 0 (nothing left to repair)", n, err)
	}
	h.runFor(time.Hour)
	for _, code := range []string{"C-LOST", "C-OK"} {
		if p := h.get(code); p.Status != paystore.StatusClosed {
			t.Errorf("payment %s after its schedule = %s, want CLOSED", code, p.Status)
		}
		if o, _ := h.sim.Order(tn(code)); o.Closes != 1 {
			t.Errorf("provider saw %d closes of %s, want 1", o.Closes, code)
		}
	}
}

// TestRepairSchedulesAFirstCheckLostAfterItWasScheduled loses the first
// check of a payment after Create scheduled it and answered (a Redis
// failover or split-brain losing the queue's write on another master than
// the payment's, or a firing dropped because the payment read as missing):
// the payment stays in the repair set until its first check runs, so the
// repair finds it UNPAID with no check run after its first check's due
// time plus the grace and schedules it; the payment then ends CLOSED. A
// payment whose first check ran is left alone.
func TestRepairSchedulesAFirstCheckLostAfterItWasScheduled(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	h.create("C-GONE", 100)
	h.create("C-RAN", 100)
	if ok, _ := h.jobs.Cancel(ctx, tn("C-GONE")); !ok {
		t.Fatal("no pending check after Create")
	}
	h.runFor(reconcile.DefaultSchedule[0])
	if got := len(h.get("C-RAN").Attempts); got != 1 {
		t.Fatalf("C-RAN has %d attempts after its first check's due time, want 1", got)
	}
	h.clock.Advance(reconcile.DefaultRepairGrace + time.Second)
	if n, err := h.svc.RepairSchedules(ctx, 100); err != nil || n != 1 {
		t.Fatalf("RepairSchedules() after the first check's due time and the grace = %d, %v; want 1", n, err)
	}
	if due, ok := h.jobs.pending(tn("C-GONE")); !ok || !due.Equal(h.get("C-GONE").NextCheck) {
		t.Fatalf("pending check of C-GONE = %v, %v; want its stored next check %v", due, ok, h.get("C-GONE").NextCheck)
	}
	h.runFor(time.Hour)
	for _, code := range []string{"C-GONE", "C-RAN"} {
		if p := h.get(code); p.Status != paystore.StatusClosed {
			t.Errorf("payment %s after its schedule = %s, want CLOSED", code, p.Status)
		}
	}
	if n, err := h.svc.RepairSchedules(ctx, 100); err != nil || n != 0 {
		t.Errorf("RepairSchedules() once both are CLOSED = %d, %v; want 0", n, err)
	}
}

// TestResentStepStillSchedulesTheNextCheck has the Redis client send the
// step recording the first NOTPAY query twice (its first reply lost on a
// reset connection, as the slow-and-lossy Redis row does): the second
// finds the slot moved on and answers STALE. The check still schedules
// the next one at the recorded time, and the payment ends CLOSED.
func TestResentStepStillSchedulesTheNextCheck(t *testing.T) {
	h := newHarness(t, harnessOpts{resentStep: true})
	h.create("C-RESENT", 100)
	h.runFor(reconcile.DefaultSchedule[0])
	p := h.get("C-RESENT")
	if p.Slot != 1 {
		t.Fatalf("slot after the first check = %d, want 1", p.Slot)
	}
	if due, ok := h.jobs.pending(tn("C-RESENT")); !ok || !due.Equal(p.NextCheck) {
		t.Fatalf("pending check after the first = %v, %v; want the recorded next check %v", due, ok, p.NextCheck)
	}
	h.runFor(time.Hour)
	if p := h.get("C-RESENT"); p.Status != paystore.StatusClosed {
		t.Errorf("payment after its schedule = %s, want CLOSED", p.Status)
	}
}

// TestTamperedAnswersNeverMarkPaid has the provider's query answers claim
// SUCCESS in every way the merchant must refuse (body changed after
// signing, another key's serial, a bad signature, another mchid, appid,
// amount or out_trade_no), in both signing modes. The payment stays
// UNPAID and unclosed with every answer recorded as an uncertain one and
// retried; once the answers are genuine again the real payment is
// confirmed.
func TestTamperedAnswersNeverMarkPaid(t *testing.T) {
	wantState := map[string]string{
		paysim.TamperBody: wechatpay.CodeBadResponseSignature, paysim.TamperSerial: wechatpay.CodeBadResponseSignature,
		paysim.TamperSignature: wechatpay.CodeBadResponseSignature,
		paysim.TamperMchID:     wechatpay.CodeResponseMismatch, paysim.TamperAppID: wechatpay.CodeResponseMismatch,
		paysim.TamperAmount: wechatpay.CodeResponseMismatch, paysim.TamperOutTradeNo: wechatpay.CodeResponseMismatch,
	}
	for _, mode := range []struct{ name, publicKeyID string }{
		{"platform certificate", ""},
		{"public key", "PUB_KEY_ID_0119000000012025010100000000000001"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{publicKeyID: mode.publicKeyID})
			for _, kind := range paysim.TamperKinds {
				code := tamperedOrder(kind)
				h.sim.SetBehaviour(tn(code), paysim.Behaviour{Tamper: kind})
				h.create(code, 100)
			}
			h.runFor(10 * time.Minute)
			for _, kind := range paysim.TamperKinds {
				code := tamperedOrder(kind)
				p := h.get(code)
				if p.Status != paystore.StatusUnpaid || p.Slot != 0 || len(p.Attempts) < 3 {
					t.Fatalf("%s: Status = %s, slot %d, %d attempts; want UNPAID at slot 0, retried", kind, p.Status, p.Slot, len(p.Attempts))
				}
				for _, a := range p.Attempts {
					if a.Action != paystore.ActionQuery || a.TradeState != wantState[kind] {
						t.Fatalf("%s: attempt %+v, want only queries answered %s", kind, a, wantState[kind])
					}
				}
				if o, _ := h.sim.Order(tn(code)); o.Closes != 0 {
					t.Errorf("%s: provider saw %d closes, want 0", kind, o.Closes)
				}

				h.sim.SetBehaviour(tn(code), paysim.Behaviour{})
				if _, err := h.sim.Pay(context.Background(), tn(code), false); err != nil {
					t.Fatal(err)
				}
			}
			h.runFor(time.Minute)
			for _, kind := range paysim.TamperKinds {
				code := tamperedOrder(kind)
				o, _ := h.sim.Order(tn(code))
				if p := h.get(code); p.Status != paystore.StatusPaid || p.TransactionID != o.TransactionID {
					t.Errorf("%s after genuine answers: Status = %s, transaction %q; want PAID with %q", kind, p.Status, p.TransactionID, o.TransactionID)
				}
			}
		})
	}
}

// tamperedOrder is the order code of the test of a kind of tampering.
func tamperedOrder(kind string) string {
	return "TAMPER-" + strings.ToUpper(strings.ReplaceAll(kind, "_", "-"))
}

// TestOrderCodesArePerMember: another member's order code answers exactly
// like a code nobody used (no ALREADY_EXISTS oracle), and placing an order
// under it creates that member's own payment, leaving the first member's
// untouched (nobody can take a code away from its owner). Before payments
// were keyed by member and order code, m2's Create answered
// ErrOrderCodeTaken.
func TestOrderCodesArePerMember(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	first := h.create("SHARED-1", 100)
	_, errTaken := h.svc.Get(ctx, "m2", "SHARED-1")
	_, errNone := h.svc.Get(ctx, "m2", "NOBODY-1")
	if !errors.Is(errTaken, reconcile.ErrNotFound) || fmt.Sprint(errTaken) != fmt.Sprint(errNone) {
		t.Errorf("Get(m2, m1's code) = %v; Get(m2, unused code) = %v; want the same ErrNotFound", errTaken, errNone)
	}
	theirs, err := h.svc.Create(ctx, "m2", "SHARED-1", 250, "m2's own order")
	if err != nil {
		t.Fatalf("Create(m2, m1's code) = %v, want m2's own payment", err)
	}
	if theirs.TradeNo == first.TradeNo || theirs.AmountFen != 250 || theirs.Member != "m2" || theirs.OrderCode != "SHARED-1" {
		t.Errorf("m2's payment = %+v, want its own out_trade_no for 250 fen", theirs)
	}
	if got := h.get("SHARED-1"); got.AmountFen != 100 || got.TradeNo != first.TradeNo || got.Member != "m1" {
		t.Errorf("m1's payment after m2's Create = %+v, want unchanged", got)
	}
	for member, want := range map[string]int64{"m1": 100, "m2": 250} {
		o, ok := h.sim.Order(wechatpay.OutTradeNo(member, "SHARED-1"))
		if !ok || o.AmountFen != want {
			t.Errorf("provider order of %s = %+v (found %v), want %d fen", member, o, ok, want)
		}
	}
}

// TestOperatorsFindPaymentsByOrderCode: an operator's call by order code
// alone reaches the one member's payment under it, and is refused as
// ambiguous once two members use the code.
func TestOperatorsFindPaymentsByOrderCode(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	h.create("ONE-1", 100)
	at := h.clock.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, _, err := h.svc.RescheduleCheck(ctx, "ONE-1", at); err != nil && !errors.Is(err, reconcile.ErrNoInspector) {
		t.Fatalf("RescheduleCheck(ONE-1) = %v", err)
	}
	if got := h.get("ONE-1").NextCheck; !got.Equal(at) {
		t.Errorf("next check after RescheduleCheck = %v, want %v", got, at)
	}
	h.create("AMB-1", 100)
	if _, err := h.svc.Create(ctx, "m2", "AMB-1", 300, "m2's"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.RescheduleCheck(ctx, "AMB-1", at); !errors.Is(err, reconcile.ErrAmbiguous) {
		t.Errorf("RescheduleCheck(a code two members use) = %v, want ErrAmbiguous", err)
	}
	if _, _, err := h.svc.RescheduleCheck(ctx, "NOBODY-1", at); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("RescheduleCheck(unused code) = %v, want ErrNotFound", err)
	}
}

// TestDayCountsSurviveACrashBetweenTransitionAndCount makes each
// transition the way a replica does that stops right after it (the
// payment PAID or CLOSED, its day's count not written), then lets the
// work be done again as it would be — the check's job fires again after
// its lease, the provider repeats its callback — and checks that the
// day's counts are exact: each payment counted once, however often it is
// found finished.
func TestDayCountsSurviveACrashBetweenTransitionAndCount(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	day := h.clock.Now()
	counts := func() (int64, int64) {
		t.Helper()
		paid, closed, err := h.store.TransitionsOn(ctx, day)
		if err != nil {
			t.Fatal(err)
		}
		return paid, closed
	}

	// Paid by a check: the replica stops after MarkPaid; the check's job
	// fires again (twice: the second after the count was made).
	h.create("C-PAID", 100)
	due := h.get("C-PAID").NextCheck
	if out, _, err := h.store.MarkPaid(ctx, tn("C-PAID"), "T1", h.clock.Now(), paystore.Attempt{Time: h.clock.Now(), Action: paystore.ActionQuery, TradeState: wechatpay.TradeStateSuccess}); err != nil || out != paystore.Applied {
		t.Fatalf("MarkPaid() = %v, %v", out, err)
	}
	for range 2 {
		if err := h.svc.Check(ctx, tn("C-PAID"), due); err != nil {
			t.Fatalf("Check(after the crash) = %v", err)
		}
	}
	if paid, closed := counts(); paid != 1 || closed != 0 {
		t.Errorf("after a paid check run again: paid %d, closed %d today, want 1 and 0", paid, closed)
	}

	// Closed: the same.
	h.create("C-CLOSED", 100)
	due = h.get("C-CLOSED").NextCheck
	if out, _, err := h.store.MarkClosed(ctx, tn("C-CLOSED"), h.clock.Now(), paystore.Attempt{Time: h.clock.Now(), Action: paystore.ActionClose, TradeState: wechatpay.TradeStateClosed}); err != nil || out != paystore.Applied {
		t.Fatalf("MarkClosed() = %v, %v", out, err)
	}
	if err := h.svc.Check(ctx, tn("C-CLOSED"), due); err != nil {
		t.Fatalf("Check(after the crash) = %v", err)
	}
	if paid, closed := counts(); paid != 1 || closed != 1 {
		t.Errorf("after a closing check run again: paid %d, closed %d today, want 1 and 1", paid, closed)
	}

	// Paid by a callback: the replica stops after MarkPaid; the provider
	// repeats the callback (three times).
	h.create("N-PAID", 100)
	if out, _, err := h.store.MarkPaid(ctx, tn("N-PAID"), "T2", h.clock.Now(), paystore.Attempt{Time: h.clock.Now(), Action: paystore.ActionNotify, TradeState: wechatpay.TradeStateSuccess}); err != nil || out != paystore.Applied {
		t.Fatalf("MarkPaid() = %v, %v", out, err)
	}
	for range 3 {
		if _, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn("N-PAID"), TransactionID: "T2", TradeState: "SUCCESS", AmountFen: 100}); err != nil {
			t.Fatalf("ApplyNotification(repeated) = %v", err)
		}
	}
	// And a whole paid path, checks and callbacks, counts it once too.
	h.create("FULL", 100)
	h.runFor(10 * time.Second)
	for range 2 {
		if _, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn("FULL"), TransactionID: "T3", TradeState: "SUCCESS", AmountFen: 100}); err != nil {
			t.Fatal(err)
		}
	}
	h.runFor(time.Hour)
	if paid, closed := counts(); paid != 3 || closed != 1 {
		t.Errorf("after repeated callbacks: paid %d, closed %d today, want 3 and 1", paid, closed)
	}
}

// TestCreateWithoutDescriptionNamesTheOrder places a payment whose caller
// gave no description (the API makes it optional): the provider requires
// one, so the order goes out described by its order code, while the stored
// payment keeps what the caller sent and a repeat stays idempotent.
func TestCreateWithoutDescriptionNamesTheOrder(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	p, err := h.svc.Create(ctx, "m1", "NODESC-1", 100, "")
	if err != nil {
		t.Fatalf("Create(no description) = %v, want the order placed", err)
	}
	if p.Description != "" {
		t.Errorf("stored description = %q, want what the caller sent (empty)", p.Description)
	}
	again, err := h.svc.Create(ctx, "m1", "NODESC-1", 100, "")
	if err != nil || again.TradeNo != p.TradeNo {
		t.Errorf("repeated Create(no description) = %+v, %v, want the stored payment", again, err)
	}
	if o, _ := h.sim.Order(tn("NODESC-1")); o.Creates != 1 {
		t.Errorf("provider saw %d creates, want 1", o.Creates)
	}
}

// unhappyCase is a case of TestProviderUnhappyAnswers.
type unhappyCase struct {
	name      string
	behaviour paysim.Behaviour
	runFor    time.Duration
	// wantStatus and wantAttempts are the payment after runFor;
	// wantAttempts lists a prefix when wantMore is set.
	wantStatus   paystore.Status
	wantAttempts []summary
	wantMore     bool
	// wantProvider is the order's state at the provider.
	wantProvider string
	// then, when set, lifts the fault; the payment must then end
	// thenStatus within a minute.
	then       bool
	thenStatus paystore.Status
}

// TestProviderUnhappyAnswers runs a payment through the schedule while
// the provider gives one of its documented unhappy answers, and checks
// what the reconciler records, that it closes nothing the provider has
// not closed (or does not know), and that a payment left UNPAID is still
// tracked with its next check pending. ORDERPAID on a close the shopper
// paid just before is TestCloseAnsweringOrderPaidMarksPaid; tampered
// query answers are TestTamperedAnswersNeverMarkPaid.
func TestProviderUnhappyAnswers(t *testing.T) {
	const forever = 1 << 30
	var (
		notExist   = summary{paystore.ActionQuery, wechatpay.CodeOrderNotExist}
		badSigned  = summary{paystore.ActionClose, wechatpay.CodeBadResponseSignature}
		closePaid  = summary{paystore.ActionClose, wechatpay.CodeOrderPaid}
		paid       = summary{paystore.ActionQuery, wechatpay.TradeStateSuccess}
		retryQuery = summary{paystore.ActionQuery, wechatpay.TradeStateNotPay}
	)
	tests := []unhappyCase{{
		// The provider lost the order (or never got it): nobody can pay
		// it, so every query counts as an unpaid answer and the close
		// at the end of the schedule settles it.
		name: "query and close answer 404 ORDER_NOT_EXIST",
		behaviour: paysim.Behaviour{
			QueryFault: paysim.Fault{Code: wechatpay.CodeOrderNotExist, Status: 404, Count: forever},
			CloseFault: paysim.Fault{Code: wechatpay.CodeOrderNotExist, Status: 404, Count: forever},
		},
		runFor:       2 * time.Hour,
		wantStatus:   paystore.StatusClosed,
		wantAttempts: append(repeat(notExist, 7), summary{paystore.ActionClose, wechatpay.CodeOrderNotExist}),
		wantProvider: wechatpay.TradeStateNotPay,
	}, {
		// An order the provider knows only later (it answered 404 to
		// the first queries) is still found paid.
		name: "404 ORDER_NOT_EXIST, then paid",
		behaviour: paysim.Behaviour{
			QueryFault: paysim.Fault{Code: wechatpay.CodeOrderNotExist, Status: 404, Count: 2},
			PayAfter:   paysim.Duration(59 * time.Second),
		},
		runFor:       2 * time.Hour,
		wantStatus:   paystore.StatusPaid,
		wantAttempts: []summary{notExist, notExist, paid},
		wantProvider: wechatpay.TradeStateSuccess,
	}, {
		// ORDERPAID on a close while the query says NOTPAY: not paid and
		// not closed; the close is made again.
		name:         "close answers ORDERPAID the query does not confirm",
		behaviour:    paysim.Behaviour{CloseFault: paysim.Fault{Code: wechatpay.CodeOrderPaid, Status: 400, Count: 1}},
		runFor:       2 * time.Hour,
		wantStatus:   paystore.StatusClosed,
		wantAttempts: append(repeat(notpay, 7), closePaid, retryQuery, closed),
		wantProvider: wechatpay.TradeStateClosed,
	}}
	for _, f := range []paysim.Fault{
		{Code: wechatpay.CodeSystemError, Count: 2},
		{Code: wechatpay.CodeFrequencyLimited, Status: 429, Count: 2},
	} {
		// Retried with backoff, without using a schedule slot.
		retried := summary{paystore.ActionQuery, f.Code}
		tests = append(tests, unhappyCase{
			name:         "query answers " + f.Code,
			behaviour:    paysim.Behaviour{QueryFault: f},
			runFor:       2 * time.Hour,
			wantStatus:   paystore.StatusClosed,
			wantAttempts: append(append(repeat(retried, 2), repeat(notpay, 7)...), closed),
			wantProvider: wechatpay.TradeStateClosed,
		})
	}
	for _, kind := range paysim.TamperCloseKinds {
		// The provider closed the order but its answer does not verify:
		// the reconciler cannot know, so it keeps closing (idempotent)
		// and records nothing as closed until an answer verifies.
		tests = append(tests, unhappyCase{
			name:         "close answer tampered: " + kind,
			behaviour:    paysim.Behaviour{TamperClose: kind},
			runFor:       2 * time.Hour,
			wantStatus:   paystore.StatusUnpaid,
			wantAttempts: append(repeat(notpay, 7), badSigned, badSigned),
			wantMore:     true,
			wantProvider: wechatpay.TradeStateClosed,
			then:         true,
			thenStatus:   paystore.StatusClosed,
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			const code = "UNHAPPY-1"
			h.sim.SetBehaviour(tn(code), tt.behaviour)
			h.create(code, 100)
			h.runFor(tt.runFor)

			p := h.get(code)
			if p.Status != tt.wantStatus {
				t.Fatalf("Status = %s after %d attempts, want %s", p.Status, len(p.Attempts), tt.wantStatus)
			}
			got := summarise(p.Attempts)
			if tt.wantMore && len(got) > len(tt.wantAttempts) {
				for _, a := range got[len(tt.wantAttempts):] {
					if a != tt.wantAttempts[len(tt.wantAttempts)-1] {
						t.Errorf("attempt %v after %v, want only more of the last", a, tt.wantAttempts)
					}
				}
				got = got[:len(tt.wantAttempts)]
			}
			if diff := cmp.Diff(tt.wantAttempts, got); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if o, _ := h.sim.Order(tn(code)); o.TradeState != tt.wantProvider {
				t.Errorf("provider's state = %s, want %s", o.TradeState, tt.wantProvider)
			}
			if st := h.sim.Stats(); st.ClosedAfterPaid != 0 {
				t.Errorf("provider closed %d paid orders, want 0", st.ClosedAfterPaid)
			}
			assertTracked(t, h, code, p)
			if !tt.then {
				return
			}
			stuck, err := h.store.StuckCount(context.Background())
			if err != nil || stuck != 1 {
				t.Errorf("StuckCount() = %d, %v, want 1 while the answers do not verify", stuck, err)
			}
			h.sim.SetBehaviour(tn(code), paysim.Behaviour{})
			h.runFor(time.Minute)
			p = h.get(code)
			if p.Status != tt.thenStatus {
				t.Fatalf("after the fault: Status = %s, want %s", p.Status, tt.thenStatus)
			}
			assertTracked(t, h, code, p)
			if stuck, err := h.store.StuckCount(context.Background()); err != nil || stuck != 0 {
				t.Errorf("StuckCount() = %d, %v after a verified answer, want 0", stuck, err)
			}
		})
	}
}

// assertTracked checks that an UNPAID payment is tracked with its next
// check pending at its recorded time, and that a terminal one has none.
func assertTracked(t *testing.T, h *harness, code string, p paystore.Payment) {
	t.Helper()
	due, pending := h.jobs.pending(tn(code))
	if p.Status != paystore.StatusUnpaid {
		if pending {
			t.Errorf("%s payment has a check pending at %v, want none", p.Status, due)
		}
		return
	}
	if !p.Tracking || p.NextCheck.IsZero() || !pending || !due.Equal(p.NextCheck) {
		t.Errorf("UNPAID payment: tracking %v, NextCheck %v, pending %v at %v; want tracked with its check pending at NextCheck",
			p.Tracking, p.NextCheck, pending, due)
	}
}
