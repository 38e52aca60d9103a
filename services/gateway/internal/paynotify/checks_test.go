package paynotify_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/gateway/internal/paynotify"
)

// TestNotificationMustNameThisMerchant: a correctly signed notification
// whose mchid, appid, currency or event type differ from the
// configuration is refused with 400 and never reaches the reconciler; a
// notification id already applied is answered 204 without being applied
// again, also by another handler sharing the Redis record.
func TestNotificationMustNameThisMerchant(t *testing.T) {
	platform, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Unix(1_900_000_000, 0))
	l := &ledger{placed: map[string]int64{"O-1": 1000, "O-2": 500}, paid: map[string]string{}}
	newHandler := func() http.Handler {
		return paynotify.NewHandler(paynotify.Options{
			Keys: wechatpay.StaticKeys{"SERIAL": &platform.PublicKey}, APIv3Key: []byte(wechatpay.DevAPIv3Key),
			Reconciler: l, Clock: clk, MchID: "MCH-1", AppID: "APP-1", Redis: rdb, Prefix: prefix,
		})
	}
	h := newHandler()
	good := wechatpay.Transaction{
		AppID: "APP-1", MchID: "MCH-1", OutTradeNo: "O-1", TransactionID: "T-O-1", TradeState: wechatpay.TradeStateSuccess,
		SuccessTime: clk.Now().Format(time.RFC3339), Amount: wechatpay.Amount{Total: 1000, Currency: "CNY"},
	}
	sign := func(id string, tx wechatpay.Transaction) wechatpay.SignedNotification {
		n, err := wechatpay.BuildNotification(id, tx, platform, "SERIAL", []byte(wechatpay.DevAPIv3Key), clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	otherMch, otherApp, otherCurrency := good, good, good
	otherMch.MchID, otherApp.AppID, otherCurrency.Amount.Currency = "MCH-2", "APP-2", "USD"
	refund := sign("N-refund", good)
	refund = resign(t, platform, refund, func(n *wechatpay.Notification) { n.EventType = "REFUND.SUCCESS" })
	for name, n := range map[string]wechatpay.SignedNotification{
		"another merchant's mchid": sign("N-mch", otherMch),
		"another appid":            sign("N-app", otherApp),
		"another currency":         sign("N-cur", otherCurrency),
		"another event type":       refund,
	} {
		if got := postNotification(h, n); got != http.StatusBadRequest {
			t.Errorf("%s: POST = %d, want 400", name, got)
		}
	}
	if l.calls != 0 {
		t.Fatalf("reconciler called %d times for refused notifications, want 0", l.calls)
	}

	n := sign("N-1", good)
	if got := postNotification(h, n); got != http.StatusNoContent {
		t.Fatalf("first delivery: POST = %d, want 204", got)
	}
	for i, hh := range []http.Handler{h, h, newHandler()} {
		if got := postNotification(hh, n); got != http.StatusNoContent {
			t.Fatalf("replay %d: POST = %d, want 204", i+1, got)
		}
	}
	if l.calls != 1 || l.effects != 1 {
		t.Errorf("after 3 replays: reconciler called %d times, %d effects; want 1 and 1", l.calls, l.effects)
	}
	ttl, err := rdb.TTL(t.Context(), paynotify.SeenKey(prefix, "N-1")).Result()
	if err != nil || ttl < 47*time.Hour || ttl > 48*time.Hour {
		t.Errorf("TTL of the notification's record = %v, %v; want about 48h", ttl, err)
	}
}

// resign changes the envelope of n with edit and signs it again with key
// (the provider's side).
func resign(t *testing.T, key *rsa.PrivateKey, n wechatpay.SignedNotification, edit func(*wechatpay.Notification)) wechatpay.SignedNotification {
	t.Helper()
	var env wechatpay.Notification
	if err := json.Unmarshal(n.Body, &env); err != nil {
		t.Fatal(err)
	}
	edit(&env)
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := strconv.ParseInt(n.Header.Get(wechatpay.HeaderTimestamp), 10, 64)
	h, err := wechatpay.SignResponse(key, n.Header.Get(wechatpay.HeaderSerial), body, time.Unix(ts, 0))
	if err != nil {
		t.Fatal(err)
	}
	return wechatpay.SignedNotification{Body: body, Header: h}
}
