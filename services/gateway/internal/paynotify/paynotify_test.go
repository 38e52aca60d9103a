package paynotify_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/gateway/internal/paynotify"
)

// ledger stands in for the reconciler: it knows placed amounts and marks
// orders paid once.
type ledger struct {
	mu     sync.Mutex
	placed map[string]int64
	paid   map[string]string
	calls  int
	// effects counts UNPAID -> PAID transitions.
	effects int
}

func (l *ledger) ApplyNotification(_ context.Context, in *reconcilerv1.ApplyNotificationRequest, _ ...grpc.CallOption) (*reconcilerv1.ApplyNotificationResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	amount, ok := l.placed[in.GetOrderCode()]
	switch {
	case !ok:
		return nil, status.Error(codes.NotFound, "payment does not exist")
	case amount != in.GetAmountFen():
		return nil, status.Error(codes.InvalidArgument, "amount_fen: does not match")
	}
	if _, done := l.paid[in.GetOrderCode()]; !done {
		l.paid[in.GetOrderCode()] = in.GetTransactionId()
		l.effects++
	}
	return &reconcilerv1.ApplyNotificationResponse{}, nil
}

func TestNotifyHandler(t *testing.T) {
	platform, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_900_000_000, 0))
	apiV3 := []byte(wechatpay.DevAPIv3Key)
	l := &ledger{placed: map[string]int64{"O-1": 1000}, paid: map[string]string{}}
	h := paynotify.NewHandler(paynotify.Options{
		Keys: wechatpay.StaticKeys{"SERIAL": &platform.PublicKey}, APIv3Key: apiV3, Reconciler: l, Clock: clk,
	})
	build := func(key *rsa.PrivateKey, code string, amount int64, at time.Time) wechatpay.SignedNotification {
		return buildNotification(t, key, "SERIAL", code, amount, at)
	}
	post := func(n wechatpay.SignedNotification) int { return postNotification(h, n) }

	otherSerial := build(platform, "O-1", 1000, clk.Now())
	otherSerial.Header = otherSerial.Header.Clone()
	otherSerial.Header.Set(wechatpay.HeaderSerial, "OTHER")

	refused := []struct {
		name string
		n    wechatpay.SignedNotification
		want int
	}{
		{"forged signature", build(forger, "O-1", 1000, clk.Now()), http.StatusUnauthorized},
		{"serial not configured", otherSerial, http.StatusUnauthorized},
		{"stale timestamp", build(platform, "O-1", 1000, clk.Now().Add(-6*time.Minute)), http.StatusUnauthorized},
		{"future timestamp", build(platform, "O-1", 1000, clk.Now().Add(6*time.Minute)), http.StatusUnauthorized},
		{"no signature", wechatpay.SignedNotification{Body: build(platform, "O-1", 1000, clk.Now()).Body, Header: http.Header{}}, http.StatusUnauthorized},
		{"wrong amount", build(platform, "O-1", 999, clk.Now()), http.StatusBadRequest},
		{"unknown order", build(platform, "O-404", 1000, clk.Now()), http.StatusNotFound},
		{"oversized", wechatpay.SignedNotification{Body: bytes.Repeat([]byte("x"), paynotify.MaxBody+1), Header: http.Header{}}, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if got := post(tt.n); got != tt.want {
				t.Errorf("POST = %d, want %d", got, tt.want)
			}
		})
	}
	if l.effects != 0 || len(l.paid) != 0 {
		t.Fatalf("after refused notifications: %d effects, paid %v; want none", l.effects, l.paid)
	}
	if l.calls != 2 {
		t.Errorf("reconciler called %d times, want 2 (only for verified notifications)", l.calls)
	}

	n := build(platform, "O-1", 1000, clk.Now())
	for i := range 15 {
		if got := post(n); got != http.StatusNoContent {
			t.Fatalf("replay %d: POST = %d, want 204", i+1, got)
		}
	}
	if l.effects != 1 || l.paid["O-1"] != "T-O-1" {
		t.Errorf("after 15 replays: %d effects, paid %v; want 1 effect for O-1", l.effects, l.paid)
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/payments/notify", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d, want 405", rec.Code)
	}
}

// buildNotification returns a SUCCESS notification of code for amount,
// signed by key under serial at time at.
func buildNotification(t *testing.T, key *rsa.PrivateKey, serial, code string, amount int64, at time.Time) wechatpay.SignedNotification {
	t.Helper()
	n, err := wechatpay.BuildNotification("N-"+code, wechatpay.Transaction{
		OutTradeNo: code, TransactionID: "T-" + code, TradeState: wechatpay.TradeStateSuccess,
		SuccessTime: at.Format(time.RFC3339), Amount: wechatpay.Amount{Total: amount, Currency: "CNY"},
	}, key, serial, []byte(wechatpay.DevAPIv3Key), at)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// postNotification posts n to h and returns the HTTP status.
func postNotification(h http.Handler, n wechatpay.SignedNotification) int {
	req := httptest.NewRequest(http.MethodPost, "/v1/payments/notify", bytes.NewReader(n.Body))
	for k, v := range n.Header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}
