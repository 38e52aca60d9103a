package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
)

// stuckWrites records the commands sent to the stuck list's keys.
type stuckWrites struct {
	mu   sync.Mutex
	cmds [][]string
}

func (w *stuckWrites) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *stuckWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.record(cmd)
		return next(ctx, cmd)
	}
}

func (w *stuckWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			w.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (w *stuckWrites) record(cmd redis.Cmder) {
	args := make([]string, len(cmd.Args()))
	for i, a := range cmd.Args() {
		args[i] = fmt.Sprint(a)
	}
	if len(args) > 1 && strings.Contains(args[1], "{paystuck") {
		w.mu.Lock()
		w.cmds = append(w.cmds, args)
		w.mu.Unlock()
	}
}

// naming returns the recorded commands with code among their arguments.
func (w *stuckWrites) naming(code string) [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out [][]string
	for _, c := range w.cmds {
		if slices.Contains(c[2:], code) {
			out = append(out, c)
		}
	}
	return out
}

// TestFinishingTouchesTheStuckListOnlyForPaymentsListedThere: a payment
// that ends without ever being listed as stuck (paid at a query, closed
// after its last one) sends nothing to the stuck list; one listed on an
// uncertain answer, or when its tracking was cancelled, leaves the list
// when it ends.
func TestFinishingTouchesTheStuckListOnlyForPaymentsListedThere(t *testing.T) {
	w := &stuckWrites{}
	h := newHarness(t, harnessOpts{hook: w})
	ctx := context.Background()
	h.sim.SetBehaviour(tn("CLEAN-PAID"), paysim.Behaviour{PayAfter: paysim.Duration(h.schedule[1] - time.Millisecond)})
	h.sim.SetBehaviour(tn("FLAKY-PAID"), paysim.Behaviour{
		QueryFault: paysim.Fault{Code: wechatpay.CodeSystemError, Count: 1},
		PayAfter:   paysim.Duration(h.schedule[0] + time.Millisecond),
	})
	for _, code := range []string{"CLEAN-PAID", "CLEAN-CLOSED", "FLAKY-PAID", "CANCELLED"} {
		h.create(code, 100)
	}
	if _, err := h.svc.CancelTracking(ctx, "m1", "CANCELLED"); err != nil {
		t.Fatal(err)
	}
	if n, err := h.store.StuckCount(ctx); err != nil || n != 1 {
		t.Fatalf("StuckCount() after a cancelled tracking = %d, %v; want 1", n, err)
	}
	h.runFor(2 * time.Hour)
	if _, err := h.svc.ApplyNotification(ctx, reconcile.Notification{OutTradeNo: tn("CANCELLED"), TransactionID: "T-C", TradeState: wechatpay.TradeStateSuccess, AmountFen: 100}); err != nil {
		t.Fatal(err)
	}

	for code, want := range map[string]paystore.Status{
		"CLEAN-PAID": paystore.StatusPaid, "CLEAN-CLOSED": paystore.StatusClosed, "FLAKY-PAID": paystore.StatusPaid, "CANCELLED": paystore.StatusPaid,
	} {
		if p := h.get(code); p.Status != want {
			t.Fatalf("%s is %s, want %s", code, p.Status, want)
		}
	}
	if n := len(w.naming(tn("FLAKY-PAID"))); n < 2 {
		t.Errorf("FLAKY-PAID: %d stuck list commands, want it listed and then removed", n)
	}
	for _, code := range []string{"CLEAN-PAID", "CLEAN-CLOSED"} {
		if cmds := w.naming(tn(code)); len(cmds) != 0 {
			t.Errorf("%s, never listed as stuck, sent the stuck list %v; want nothing", code, cmds)
		}
	}
	// Removed when they ended, not by a reader checking the list.
	if n, err := h.store.StuckCount(ctx); err != nil || n != 0 {
		t.Errorf("StuckCount() after every payment ended = %d, %v; want 0", n, err)
	}
	if paid, closed, err := h.store.TransitionsOn(ctx, h.clock.Now()); err != nil || paid != 3 || closed != 1 {
		t.Errorf("TransitionsOn() = %d paid, %d closed, %v; want 3, 1", paid, closed, err)
	}
}
