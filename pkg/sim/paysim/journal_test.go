package paysim_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
)

// TestRestoreRemembersOrders journals a created, a paid and a closed
// order and restores them into a new simulator: states, transaction ids
// and the payment counters carry over, and a torn line is skipped.
func TestRestoreRemembersOrders(t *testing.T) {
	ctx := context.Background()
	var journal bytes.Buffer
	fc := clock.NewFake(time.Unix(1_700_000_000, 0))
	opts := paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: []byte(wechatpay.DevAPIv3Key),
		PlatformKey: wechatpay.DevMerchantKey(), MerchantPub: &wechatpay.DevMerchantKey().PublicKey,
		MinCloseAge: time.Minute, Clock: fc,
	}
	first := paysim.New(opts)
	first.SetJournal(&journal)
	srv := httptest.NewServer(first.Handler())
	defer srv.Close()
	client := wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: srv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: []byte(wechatpay.DevAPIv3Key), Clock: fc,
	})
	for _, no := range []string{"OPEN", "PAID", "SHUT"} {
		if _, err := client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: no, Description: "tea", AmountFen: 990}); err != nil {
			t.Fatalf("CreateNative(%s) error = %v", no, err)
		}
	}
	if _, err := first.Pay(ctx, "PAID", false); err != nil {
		t.Fatalf("Pay(PAID) error = %v", err)
	}
	fc.Advance(time.Minute)
	if err := client.Close(ctx, "SHUT"); err != nil {
		t.Fatalf("Close(SHUT) error = %v", err)
	}
	journal.WriteString(`{"order":{"outTradeNo":"TORN","tra`)

	second := paysim.New(opts)
	if err := second.Restore(bytes.NewReader(journal.Bytes())); err != nil {
		t.Fatalf("Restore() error = %v", err)
	}
	for no, want := range map[string]string{
		"OPEN": wechatpay.TradeStateNotPay, "PAID": wechatpay.TradeStateSuccess, "SHUT": wechatpay.TradeStateClosed,
	} {
		before, _ := first.Order(no)
		got, ok := second.Order(no)
		if !ok || !got.Known || got.TradeState != want || got.TransactionID != before.TransactionID {
			t.Errorf("Order(%s) after restore = %+v, %v, want %s with transaction %q", no, got, ok, want, before.TransactionID)
		}
	}
	if _, ok := second.Order("TORN"); ok {
		t.Errorf("Order(TORN) restored from a torn line")
	}
	if got := second.Stats(); got.Payments != 1 || got.Closes != 1 || got.ClosedAfterPaid != 0 {
		t.Errorf("Stats() after restore = %+v, want payments 1, closes 1, closedAfterPaid 0", got)
	}
}
