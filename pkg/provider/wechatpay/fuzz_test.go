package wechatpay_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
)

// fuzzNow is the time the fuzzed notifications are checked at; the seed
// corpus (testdata/fuzz/FuzzVerifyNotification) is signed for it.
var fuzzNow = time.Unix(1_700_000_000, 0)

// FuzzVerifyNotification feeds arbitrary signature headers and bodies to
// VerifyNotification. It must never panic; it must never accept a
// notification whose signature is not exactly the one the platform key
// makes for it (PKCS #1 v1.5 signatures are deterministic, so the fuzzer
// cannot have forged one); and it must never accept anything under a key
// the signer does not hold, nor decrypt under another APIv3 key.
func FuzzVerifyNotification(f *testing.F) {
	platform := wechatpay.DevMerchantKey() // public in the repository: only for tests
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		f.Fatal(err)
	}
	apiV3 := []byte(wechatpay.DevAPIv3Key)
	n, err := wechatpay.BuildNotification("n-1", wechatpay.Transaction{OutTradeNo: "F1", TradeState: wechatpay.TradeStateSuccess},
		platform, "SERIAL", apiV3, fuzzNow)
	if err != nil {
		f.Fatal(err)
	}
	h := n.Header
	if _, err := wechatpay.VerifyNotification(h, n.Body, &platform.PublicKey, apiV3, fuzzNow, 5*time.Minute); err != nil {
		f.Fatalf("VerifyNotification(seed) error = %v", err)
	}
	f.Add(h.Get(wechatpay.HeaderTimestamp), h.Get(wechatpay.HeaderNonce), h.Get(wechatpay.HeaderSignature), n.Body)
	f.Add("", "", "", []byte("{}"))
	f.Add("1700000000", "nonce", "not base64!", []byte(`{"resource_type":"encrypt-resource"}`))
	f.Add("-9223372036854775808", "n", "AAAA", []byte(nil))

	f.Fuzz(func(t *testing.T, ts, nonce, sig string, body []byte) {
		header := http.Header{}
		header.Set(wechatpay.HeaderTimestamp, ts)
		header.Set(wechatpay.HeaderNonce, nonce)
		header.Set(wechatpay.HeaderSignature, sig)
		header.Set(wechatpay.HeaderSerial, "SERIAL")
		window := 5 * time.Minute

		if tx, err := wechatpay.VerifyNotification(header, body, &other.PublicKey, apiV3, fuzzNow, window); err == nil {
			t.Fatalf("VerifyNotification(other key) = %+v, nil; want an error", tx)
		}
		tx, err := wechatpay.VerifyNotification(header, body, &platform.PublicKey, apiV3, fuzzNow, window)
		if err != nil {
			return
		}
		want, err := wechatpay.Sign(platform, wechatpay.NotifyMessage(ts, nonce, body))
		if err != nil || want != sig {
			t.Fatalf("VerifyNotification accepted signature %q, the key signs %q (%v)", sig, want, err)
		}
		if tx.OutTradeNo == "" {
			t.Fatalf("VerifyNotification accepted a transaction without out_trade_no: %+v", tx)
		}
		wrongKey := []byte("0123456789abcdef0123456789abcdef")
		if tx, err := wechatpay.VerifyNotification(header, body, &platform.PublicKey, wrongKey, fuzzNow, window); err == nil {
			t.Fatalf("VerifyNotification(wrong APIv3 key) = %+v, nil; want an error", tx)
		}
	})
}
