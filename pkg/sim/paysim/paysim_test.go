package paysim_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/sim/paysim"
)

type fixture struct {
	sim      *paysim.Sim
	srv      *httptest.Server
	client   *wechatpay.Client
	clock    *clock.Fake
	platform *rsa.PrivateKey

	mu       sync.Mutex
	received []wechatpay.Transaction
}

// testPublicKeyID is the WeChat Pay public key id of the public-key mode.
const testPublicKeyID = "PUB_KEY_ID_0119000000012025010100000000000001"

// modes are the two ways the provider signs: platform certificates
// (fetched from /v3/certificates) and the WeChat Pay public key.
var modes = []struct{ name, publicKeyID string }{
	{"platform certificate", ""},
	{"public key", testPublicKeyID},
}

func newFixture(t *testing.T) *fixture { return newModeFixture(t, "") }

// newModeFixture starts a simulator in the platform-certificate mode, or
// in the public-key mode when publicKeyID is set (the client then has the
// key configured and never fetches certificates).
func newModeFixture(t *testing.T, publicKeyID string) *fixture {
	t.Helper()
	platform, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{clock: clock.NewFake(time.Unix(1_700_000_000, 0)), platform: platform}
	merchant := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(wechatpay.HeaderSerial) != f.sim.SigningSerial() {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		tx, err := wechatpay.VerifyNotification(r.Header, body, &platform.PublicKey, []byte(wechatpay.DevAPIv3Key), f.clock.Now(), 5*time.Minute)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		f.mu.Lock()
		f.received = append(f.received, tx)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(merchant.Close)
	f.sim = paysim.New(paysim.Options{
		MchID: "1900000001", AppID: "wxapp", APIv3Key: []byte(wechatpay.DevAPIv3Key),
		PlatformKey: platform, MerchantPub: &wechatpay.DevMerchantKey().PublicKey,
		NotifyURL: merchant.URL, MinCloseAge: 5 * time.Minute, Clock: f.clock, PublicKeyID: publicKeyID,
	})
	f.srv = httptest.NewServer(f.sim.Handler())
	t.Cleanup(f.srv.Close)
	var keys wechatpay.KeySource
	if publicKeyID != "" {
		keys = wechatpay.StaticKeys{publicKeyID: &platform.PublicKey}
	}
	f.client = wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: f.srv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: []byte(wechatpay.DevAPIv3Key), Clock: f.clock, Keys: keys,
	})
	return f
}

// TestLifecycle places, queries, pays, notifies and closes orders in both
// signing modes; every answer the client accepts verified.
func TestLifecycle(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newModeFixture(t, mode.publicKeyID)

			tx, err := f.client.Query(ctx, "NEVER-SEEN")
			if !wechatpay.IsCode(err, wechatpay.CodeOrderNotExist) || wechatpay.IsUncertain(err) {
				t.Fatalf("Query(unknown) = %+v, %v, want a definite ORDER_NOT_EXIST", tx, err)
			}
			codeURL, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "A1", Description: "tea", AmountFen: 990, NotifyURL: "http://ignored"})
			if err != nil || !strings.HasPrefix(codeURL, "weixin://") {
				t.Fatalf("CreateNative() = %q, %v, want a weixin:// link", codeURL, err)
			}
			again, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "A1", Description: "tea", AmountFen: 990})
			if err != nil || again != codeURL {
				t.Fatalf("CreateNative(again) = %q, %v, want %q", again, err, codeURL)
			}
			if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "A1", Description: "tea", AmountFen: 1}); wechatpay.IsUncertain(err) || err == nil {
				t.Fatalf("CreateNative(other amount) error = %v, want a definite error", err)
			}

			if err := f.client.Close(ctx, "A1"); !wechatpay.IsCode(err, wechatpay.CodeCloseTooEarly) {
				t.Fatalf("Close(young) error = %v, want %s", err, wechatpay.CodeCloseTooEarly)
			}
			if _, err := f.sim.Pay(ctx, "A1", true); err != nil {
				t.Fatalf("Pay() error = %v", err)
			}
			tx, err = f.client.Query(ctx, "A1")
			if err != nil || tx.TradeState != wechatpay.TradeStateSuccess || tx.Amount.Total != 990 || tx.TransactionID == "" {
				t.Fatalf("Query(paid) = %+v, %v, want SUCCESS 990 with a transaction id", tx, err)
			}
			f.clock.Advance(10 * time.Minute)
			if err := f.client.Close(ctx, "A1"); !wechatpay.IsCode(err, wechatpay.CodeOrderPaid) || wechatpay.IsUncertain(err) {
				t.Fatalf("Close(paid) error = %v, want definite ORDERPAID", err)
			}
			f.mu.Lock()
			got := f.received
			f.mu.Unlock()
			if len(got) != 1 || got[0].OutTradeNo != "A1" || got[0].Amount.Total != 990 {
				t.Fatalf("notifications received = %+v, want one for A1 with 990", got)
			}

			if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "B1", Description: "tea", AmountFen: 5}); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(5 * time.Minute)
			for range 2 { // closing is idempotent
				if err := f.client.Close(ctx, "B1"); err != nil {
					t.Fatalf("Close(unpaid) error = %v", err)
				}
			}
			if _, err := f.sim.Pay(ctx, "B1", false); err == nil {
				t.Fatal("Pay(closed) error = nil, want refusal")
			}
			tx, _ = f.client.Query(ctx, "B1")
			if tx.TradeState != wechatpay.TradeStateClosed {
				t.Errorf("Query(closed).TradeState = %q, want CLOSED", tx.TradeState)
			}

			st := f.sim.Stats()
			want := paysim.Stats{Creates: 4, Queries: 3, Closes: 2, CloseAttempts: 4, CloseRefusedPaid: 1, CloseRefusedTooEarly: 1,
				Payments: 1, PayRefusedClosed: 1, Notifies: 1}
			if st != want {
				t.Errorf("Stats() = %+v, want %+v", st, want)
			}
		})
	}
}

func TestFaultsAndBehaviour(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.sim.SetBehaviour("F1", paysim.Behaviour{
		QueryFault: paysim.Fault{Code: wechatpay.CodeSystemError, Count: 2},
		CloseFault: paysim.Fault{Code: wechatpay.CodeFrequencyLimited, Status: 429, Count: 1, Applied: true},
		PayAfter:   paysim.Duration(time.Hour),
	})
	if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "F1", Description: "x", AmountFen: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := f.client.Query(ctx, "F1"); !wechatpay.IsUncertain(err) {
			t.Fatalf("Query #%d error = %v, want uncertain", i+1, err)
		}
	}
	if tx, err := f.client.Query(ctx, "F1"); err != nil || tx.TradeState != wechatpay.TradeStateNotPay {
		t.Fatalf("Query #3 = %+v, %v, want NOTPAY", tx, err)
	}
	f.clock.Advance(6 * time.Minute)
	if err := f.client.Close(ctx, "F1"); !wechatpay.IsUncertain(err) {
		t.Fatalf("Close(fault) error = %v, want uncertain", err)
	}
	if err := f.client.Close(ctx, "F1"); err != nil { // the first one was applied
		t.Fatalf("Close(retry) error = %v", err)
	}
	if o, _ := f.sim.Order("F1"); o.TradeState != wechatpay.TradeStateClosed || o.Queries != 3 || o.Closes != 2 {
		t.Errorf("Order(F1) = %+v, want CLOSED after 3 queries and 2 closes", o)
	}

	f.sim.SetBehaviour("P1", paysim.Behaviour{PayAfter: paysim.Duration(time.Minute)})
	if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "P1", Description: "x", AmountFen: 1}); err != nil {
		t.Fatal(err)
	}
	if tx, _ := f.client.Query(ctx, "P1"); tx.TradeState != wechatpay.TradeStateNotPay {
		t.Errorf("Query(P1 before payAfter) = %q, want NOTPAY", tx.TradeState)
	}
	f.clock.Advance(time.Minute)
	if tx, _ := f.client.Query(ctx, "P1"); tx.TradeState != wechatpay.TradeStateSuccess {
		t.Errorf("Query(P1 after payAfter) = %q, want SUCCESS", tx.TradeState)
	}
}

func TestRejectsBadSignature(t *testing.T) {
	f := newFixture(t)
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	forger := wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: f.srv.URL, MchID: "1900000001", AppID: "wxapp", Key: other, Clock: f.clock,
		Keys: wechatpay.StaticKeys{f.sim.SigningSerial(): &f.platform.PublicKey},
	})
	_, err = forger.Query(context.Background(), "A1")
	if !wechatpay.IsCode(err, wechatpay.CodeSignError) {
		t.Fatalf("Query(forged) error = %v, want SIGN_ERROR", err)
	}
	resp, err := http.Get(f.srv.URL + "/v3/pay/transactions/out-trade-no/A1?mchid=1900000001")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned query status = %d, want 401", resp.StatusCode)
	}
	if got := f.sim.Stats().BadSignatures; got != 2 {
		t.Errorf("Stats().BadSignatures = %d, want 2", got)
	}
}

func TestPlatformKeysFromCertificates(t *testing.T) {
	f := newFixture(t)
	keys := wechatpay.NewPlatformKeys(f.client.PlatformKeys, f.clock)
	pub, err := keys.Key(context.Background(), f.sim.PlatformSerial())
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(&f.platform.PublicKey) {
		t.Error("fetched platform key differs from the simulator's")
	}
	if _, err := keys.Key(context.Background(), "UNKNOWN"); err == nil {
		t.Error("Key(UNKNOWN) error = nil, want ErrUnknownSerial")
	}
}

func TestAdminHTTP(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: "H1", Description: "x", AmountFen: 7}); err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) int {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
		if strings.HasSuffix(path, "behaviour") {
			req.Method = http.MethodPut
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("/admin/orders/N1/behaviour", `{"neverPay":true,"latency":"1ms"}`); got != http.StatusOK {
		t.Errorf("PUT behaviour = %d, want 200", got)
	}
	if got := post("/admin/orders/N1/behaviour", `{"bogus":1}`); got != http.StatusBadRequest {
		t.Errorf("PUT behaviour(unknown field) = %d, want 400", got)
	}
	if got := post("/admin/orders/NOPE/pay?notify=true", ""); got != http.StatusNotFound {
		t.Errorf("pay(unknown) = %d, want 404", got)
	}
	if got := post("/admin/orders/H1/pay?notify=true", ""); got != http.StatusOK {
		t.Errorf("pay(H1) = %d, want 200", got)
	}
	if got := post("/admin/orders/H1/notify", ""); got != http.StatusOK {
		t.Errorf("notify(H1) = %d, want 200", got)
	}
	f.mu.Lock()
	n := len(f.received)
	f.mu.Unlock()
	if n != 2 {
		t.Errorf("notifications received = %d, want 2", n)
	}
	resp, err := http.Get(f.srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, k := range []string{`"queries"`, `"closes"`, `"closedAfterPaid"`, `"notifies":2`, `"creates":1`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("GET /stats = %s, want it to contain %s", b, k)
		}
	}
}

// TestTamperedAnswersRefused has the simulator answer queries of a placed,
// unpaid order with a SUCCESS that was tampered with, in both signing
// modes. The client refuses each (an uncertain error naming the refusal),
// except a signed answer with another amount, which only the caller can
// judge: it is returned as is for the caller to compare.
func TestTamperedAnswersRefused(t *testing.T) {
	wantCode := map[string]string{
		paysim.TamperBody:       wechatpay.CodeBadResponseSignature,
		paysim.TamperSerial:     wechatpay.CodeBadResponseSignature,
		paysim.TamperSignature:  wechatpay.CodeBadResponseSignature,
		paysim.TamperMchID:      wechatpay.CodeResponseMismatch,
		paysim.TamperAppID:      wechatpay.CodeResponseMismatch,
		paysim.TamperOutTradeNo: wechatpay.CodeResponseMismatch,
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newModeFixture(t, mode.publicKeyID)
			for _, kind := range paysim.TamperKinds {
				code := "T-" + strings.ToUpper(strings.ReplaceAll(kind, "_", ""))
				if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: code, Description: "tea", AmountFen: 990}); err != nil {
					t.Fatal(err)
				}
				f.sim.SetBehaviour(code, paysim.Behaviour{Tamper: kind})
				tx, err := f.client.Query(ctx, code)
				if kind == paysim.TamperAmount {
					if err != nil || tx.Amount.Total == 990 {
						t.Errorf("Query(%s) = %+v, %v, want the signed answer with its other amount", kind, tx, err)
					}
					continue
				}
				if err == nil || !wechatpay.IsUncertain(err) || wechatpay.ErrorCode(err) != wantCode[kind] {
					t.Errorf("Query(tampered %s) = %+v, %v (code %s), want an uncertain %s", kind, tx, err, wechatpay.ErrorCode(err), wantCode[kind])
				}
				f.sim.SetBehaviour(code, paysim.Behaviour{})
				if tx, err := f.client.Query(ctx, code); err != nil || tx.TradeState != wechatpay.TradeStateNotPay {
					t.Errorf("Query(%s untampered) = %+v, %v, want NOTPAY", code, tx, err)
				}
			}
			if got, want := f.sim.Stats().TamperedAnswers, int64(len(paysim.TamperKinds)); got != want {
				t.Errorf("Stats().TamperedAnswers = %d, want %d", got, want)
			}
		})
	}
}

// TestPublicKeyModeServesNoCertificates checks that in the public-key mode
// GET /v3/certificates answers 404, so a client without the public key
// configured verifies nothing, and that GET /admin/public-key hands out
// the key under its id.
func TestPublicKeyModeServesNoCertificates(t *testing.T) {
	ctx := context.Background()
	f := newModeFixture(t, testPublicKeyID)
	if _, err := f.client.PlatformKeys(ctx); !wechatpay.IsCode(err, wechatpay.CodeNotFound) {
		t.Errorf("PlatformKeys() error = %v, want NOT_FOUND", err)
	}
	fetching := wechatpay.NewClient(wechatpay.ClientOptions{
		BaseURL: f.srv.URL, MchID: "1900000001", AppID: "wxapp", Key: wechatpay.DevMerchantKey(),
		APIv3Key: []byte(wechatpay.DevAPIv3Key), Clock: f.clock,
	})
	if _, err := fetching.Query(ctx, "X1"); !wechatpay.IsUncertain(err) || wechatpay.ErrorCode(err) != wechatpay.CodeBadResponseSignature {
		t.Errorf("Query() without the public key = %v, want an uncertain %s", err, wechatpay.CodeBadResponseSignature)
	}
	resp, err := http.Get(f.srv.URL + "/admin/public-key")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Serial, PublicKeyPem string }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	pub, err := wechatpay.ParsePublicKey([]byte(got.PublicKeyPem))
	if err != nil || got.Serial != testPublicKeyID || !pub.Equal(&f.platform.PublicKey) {
		t.Errorf("GET /admin/public-key = serial %q, key error %v; want %s and the signing key", got.Serial, err, testPublicKeyID)
	}
}

// rawCall sends a request signed by the development merchant and returns
// the answer's status and body after checking the answer's signature.
func (f *fixture) rawCall(t *testing.T, method, pathAndQuery, body string) (int, string) {
	t.Helper()
	auth, err := wechatpay.SignRequest(wechatpay.DevMerchantKey(), "1900000001", "", method, pathAndQuery, []byte(body), f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, f.srv.URL+pathAndQuery, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := wechatpay.VerifySignature(resp.Header, b, &f.platform.PublicKey, f.clock.Now(), 5*time.Minute); err != nil {
		t.Errorf("%s %s: answer signature: %v", method, pathAndQuery, err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestAnswersAsTheProviderDocuments checks the wire answers the provider
// documents for the native order calls: an order never created is 404
// ORDER_NOT_EXIST for a query and a close, payer_total is sent only once
// the order is paid, a paid order refuses to close with 400 ORDERPAID and
// closing an order twice answers 204 both times.
func TestAnswersAsTheProviderDocuments(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, no := range []string{"U1", "U2"} {
		if _, err := f.client.CreateNative(ctx, wechatpay.NativeOrder{OutTradeNo: no, Description: "tea", AmountFen: 990}); err != nil {
			t.Fatal(err)
		}
	}
	query := func(no string) string { return "/v3/pay/transactions/out-trade-no/" + no + "?mchid=1900000001" }
	closePath := func(no string) string { return "/v3/pay/transactions/out-trade-no/" + no + "/close" }
	const closeBody = `{"mchid":"1900000001"}`

	type call struct {
		name, method, path, body string
		before                   func()
		wantStatus               int
		wantCode                 string // the error code, or "" for a success
		wantHas, wantLacks       []string
	}
	calls := []call{
		{name: "query of an order never created", method: http.MethodGet, path: query("NEVER-SEEN"),
			wantStatus: http.StatusNotFound, wantCode: "ORDER_NOT_EXIST"},
		{name: "query of an unpaid order", method: http.MethodGet, path: query("U1"),
			wantStatus: http.StatusOK, wantHas: []string{`"trade_state":"NOTPAY"`, `"total":990`},
			wantLacks: []string{"payer_total", "transaction_id", "success_time"}},
		{name: "close of an order never created", method: http.MethodPost, path: closePath("NEVER-SEEN"), body: closeBody,
			wantStatus: http.StatusNotFound, wantCode: "ORDER_NOT_EXIST"},
		{name: "query of a paid order", method: http.MethodGet, path: query("U1"),
			before: func() {
				if _, err := f.sim.Pay(ctx, "U1", false); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: http.StatusOK, wantHas: []string{`"trade_state":"SUCCESS"`, `"payer_total":990`, `"transaction_id":"42`, `"success_time"`}},
		{name: "close of a paid order", method: http.MethodPost, path: closePath("U1"), body: closeBody,
			before:     func() { f.clock.Advance(6 * time.Minute) },
			wantStatus: http.StatusBadRequest, wantCode: "ORDERPAID"},
		{name: "close of an unpaid order", method: http.MethodPost, path: closePath("U2"), body: closeBody,
			wantStatus: http.StatusNoContent},
		{name: "close of a closed order", method: http.MethodPost, path: closePath("U2"), body: closeBody,
			wantStatus: http.StatusNoContent},
		{name: "query of a closed order", method: http.MethodGet, path: query("U2"),
			wantStatus: http.StatusOK, wantHas: []string{`"trade_state":"CLOSED"`}, wantLacks: []string{"payer_total", "transaction_id"}},
	}
	for _, c := range calls {
		if c.before != nil {
			c.before()
		}
		status, body := f.rawCall(t, c.method, c.path, c.body)
		if status != c.wantStatus {
			t.Errorf("%s: status = %d (%s), want %d", c.name, status, body, c.wantStatus)
			continue
		}
		if c.wantCode != "" {
			var e wechatpay.APIError
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != c.wantCode || e.Message == "" {
				t.Errorf("%s: body = %s, want {code: %s, message: …}", c.name, body, c.wantCode)
			}
		}
		for _, s := range c.wantHas {
			if !strings.Contains(body, s) {
				t.Errorf("%s: body = %s, want it to contain %s", c.name, body, s)
			}
		}
		for _, s := range c.wantLacks {
			if strings.Contains(body, s) {
				t.Errorf("%s: body = %s, want no %s", c.name, body, s)
			}
		}
	}
}
