package reconcile_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/delayq"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
)

// TestChecksNeverRecordedBeforeDueOnLopsidedSync runs the real delay queue
// (due times compared with Redis TIME) with the service's clock synced to
// Redis TIME over a connection whose replies are seen late, as on a loaded
// machine. Every check must be recorded at or after creation + its offset.
func TestChecksNeverRecordedBeforeDueOnLopsidedSync(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	now := redisconn.NewServerClock(testenv.SlowRepliesRedis(t, 200*time.Millisecond), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := now.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sim := paysim.New(paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: []byte(wechatpay.DevAPIv3Key),
		PlatformKey: testPlatformKey(t), MerchantPub: &wechatpay.DevMerchantKey().PublicKey,
	})
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	client := wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: srv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: []byte(wechatpay.DevAPIv3Key),
	})
	schedule := []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond}
	queue := delayq.New(rdb, delayq.Options{Name: prefix + ":reconcile"})
	svc := reconcile.New(paystore.New(rdb, prefix, time.Hour), client, queue, reconcile.Options{
		Schedule: schedule, RetryBase: time.Second, NotifyURL: "http://merchant/notify", Clock: now,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = queue.Run(ctx, func(ctx context.Context, j delayq.Job) error { return svc.Check(ctx, j.ID, j.Due) })
	}()
	defer func() { cancel(); <-done }()

	codes := []string{"e1", "e2", "e3", "e4"}
	for _, code := range codes {
		if _, err := svc.Create(ctx, "m1", code, 100, "order "+code); err != nil {
			t.Fatalf("Create(%s) = %v", code, err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, code := range codes {
		var p paystore.Payment
		for {
			var err error
			if p, err = svc.Get(ctx, "m1", code); err != nil {
				t.Fatalf("Get(%s) = %v", code, err)
			}
			if p.Status == paystore.StatusClosed || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if p.Status != paystore.StatusClosed {
			t.Fatalf("%s: status %s after 20s, want CLOSED (attempts %v)", code, p.Status, p.Attempts)
		}
		k := 0
		for _, a := range p.Attempts {
			var offset time.Duration
			switch {
			case a.Action == paystore.ActionQuery && a.TradeState == wechatpay.TradeStateNotPay && k < len(schedule):
				offset = schedule[k]
				k++
			case a.Action == paystore.ActionClose:
				offset = schedule[len(schedule)-1]
			default:
				continue
			}
			if due := p.CreateTime.Add(offset); a.Time.Before(due) {
				t.Errorf("%s: %s #%d recorded at %s, %s before its due time %s (created %s)", code, a.Action, k,
					a.Time.Format("15:04:05.000"), due.Sub(a.Time), due.Format("15:04:05.000"), p.CreateTime.Format("15:04:05.000"))
			}
		}
		if k != len(schedule) {
			t.Errorf("%s: %d scheduled queries recorded, want %d (attempts %v)", code, k, len(schedule), p.Attempts)
		}
	}
}
