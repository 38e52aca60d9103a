package wechatpay_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
)

var apiV3Key = []byte(wechatpay.DevAPIv3Key)

func TestRequestSignatureRoundTrip(t *testing.T) {
	key := wechatpay.DevMerchantKey()
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"mchid":"1900000001"}`)
	h, err := wechatpay.SignRequest(key, "1900000001", "SERIAL", "POST", "/v3/pay/transactions/out-trade-no/A1/close", body, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		pub     *rsa.PublicKey
		path    string
		body    string
		now     time.Time
		wantErr bool
	}{
		{"valid", &key.PublicKey, "/v3/pay/transactions/out-trade-no/A1/close", string(body), now, false},
		{"other key", &other.PublicKey, "/v3/pay/transactions/out-trade-no/A1/close", string(body), now, true},
		{"other path", &key.PublicKey, "/v3/pay/transactions/out-trade-no/A2/close", string(body), now, true},
		{"tampered body", &key.PublicKey, "/v3/pay/transactions/out-trade-no/A1/close", `{"mchid":"1"}`, now, true},
		{"stale", &key.PublicKey, "/v3/pay/transactions/out-trade-no/A1/close", string(body), now.Add(6 * time.Minute), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := wechatpay.VerifyRequest(tt.pub, h, "POST", tt.path, []byte(tt.body), tt.now, 5*time.Minute)
			if (err != nil) != tt.wantErr {
				t.Fatalf("VerifyRequest() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, wechatpay.ErrBadSignature) {
				t.Errorf("VerifyRequest() error = %v, want ErrBadSignature", err)
			}
			if !tt.wantErr && a.MchID != "1900000001" {
				t.Errorf("MchID = %q, want 1900000001", a.MchID)
			}
		})
	}
}

func TestVerifyNotification(t *testing.T) {
	platform, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	tx := wechatpay.Transaction{
		MchID: "1900000001", OutTradeNo: "ORDER-1", TransactionID: "4200001", TradeState: wechatpay.TradeStateSuccess,
		SuccessTime: now.Format(time.RFC3339), Amount: wechatpay.Amount{Total: 1234, Currency: "CNY"},
	}
	good, err := wechatpay.BuildNotification("N1", tx, platform, "P1", apiV3Key, now)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := wechatpay.BuildNotification("N1", tx, forger, "P1", apiV3Key, now)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := wechatpay.BuildNotification("N1", tx, platform, "P1", apiV3Key, now.Add(-6*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := wechatpay.BuildNotification("N1", tx, platform, "P1", []byte("another-apiv3-key-of-32-bytes!!!"), now)
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte(nil), good.Body...)
	tampered[len(tampered)-3] ^= 1

	tests := []struct {
		name    string
		n       wechatpay.SignedNotification
		body    []byte
		wantErr error
	}{
		{"valid", good, good.Body, nil},
		{"forged signature", forged, forged.Body, wechatpay.ErrBadSignature},
		{"stale timestamp", stale, stale.Body, wechatpay.ErrBadSignature},
		{"tampered body", good, tampered, wechatpay.ErrBadSignature},
		{"missing headers", wechatpay.SignedNotification{Header: http.Header{}}, good.Body, wechatpay.ErrBadSignature},
		{"other APIv3 key", wrongKey, wrongKey.Body, wechatpay.ErrBadNotification},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wechatpay.VerifyNotification(tt.n.Header, tt.body, &platform.PublicKey, apiV3Key, now, 5*time.Minute)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("VerifyNotification() error = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				if diff := cmp.Diff(tx, got); diff != "" {
					t.Errorf("VerifyNotification() transaction (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestIsUncertain(t *testing.T) {
	tests := []struct {
		err  error
		want bool
		code string
	}{
		{&wechatpay.APIError{Status: 500, Code: "SYSTEM_ERROR"}, true, "SYSTEM_ERROR"},
		{&wechatpay.APIError{Status: 429, Code: "FREQUENCY_LIMITED"}, true, "FREQUENCY_LIMITED"},
		{&wechatpay.APIError{Status: 400, Code: "BANKERROR"}, true, "BANKERROR"},
		{&wechatpay.APIError{Status: 502}, true, "HTTP_502"},
		{&wechatpay.APIError{Status: 400, Code: "ORDERPAID"}, false, "ORDERPAID"},
		{&wechatpay.APIError{Status: 404, Code: "ORDER_NOT_EXIST"}, false, "ORDER_NOT_EXIST"},
		{fmt.Errorf("close order X: %w", &wechatpay.APIError{Status: 400, Code: "ORDER_CLOSED"}), false, "ORDER_CLOSED"},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), true, "TIMEOUT"},
		{&url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, true, "NETWORK_ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := wechatpay.IsUncertain(tt.err); got != tt.want {
				t.Errorf("IsUncertain(%v) = %v, want %v", tt.err, got, tt.want)
			}
			if got := wechatpay.ErrorCode(tt.err); got != tt.code {
				t.Errorf("ErrorCode(%v) = %q, want %q", tt.err, got, tt.code)
			}
		})
	}
	if wechatpay.IsUncertain(nil) {
		t.Error("IsUncertain(nil) = true, want false")
	}
}

func TestKeysPEMRoundTrip(t *testing.T) {
	key := wechatpay.DevMerchantKey()
	pub, err := wechatpay.ParsePublicKey(wechatpay.MarshalPublicKeyPEM(&key.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(&key.PublicKey) {
		t.Error("ParsePublicKey(MarshalPublicKeyPEM(k)) differs from k")
	}
	if a, b := wechatpay.KeySerial(pub), wechatpay.KeySerial(&key.PublicKey); a != b || len(a) != 40 {
		t.Errorf("KeySerial = %q and %q, want equal 40-char serials", a, b)
	}
}
