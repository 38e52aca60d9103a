// Package interop_test proves the payment simulator and the gateway's
// payment callback against a real third-party WeChat Pay v3 SDK: the npm
// package wechatpay-axios-plugin, pinned by testdata/sdk/package-lock.json
// and installed with npm ci. testdata/sdk/merchant.js is a merchant built
// with it.
package interop_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/npmtest"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Main(m)) }

// sdkDir holds the SDK's package.json, its lock file and merchant.js.
const sdkDir = "testdata/sdk"

// publicKeyID is the WeChat Pay public key id of the public-key mode.
const publicKeyID = "PUB_KEY_ID_0119000000012025010100000000000042"

// minCloseAge is the simulator's minimum close age in these stacks.
const minCloseAge = 2 * time.Second

// step is one line merchant.js prints.
type step struct {
	Step      string `json:"step"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Body      string `json:"body"`
	Verified  string `json:"verified"`
	RefusedBy string `json:"refusedBy"`
	Error     string `json:"error"`
}

// runMerchant runs merchant.js with the command and config and returns
// its steps by name.
func runMerchant(t *testing.T, command string, cfg map[string]any) map[string]step {
	t.Helper()
	in, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "merchant.js", command)
	cmd.Dir = sdkDir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node merchant.js %s: %v\n%s%s", command, err, out, stderr.String())
	}
	steps := map[string]step{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var s step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("merchant.js printed %q: %v", sc.Text(), err)
		}
		steps[s.Step] = s
	}
	return steps
}

// writePEM writes a PEM block into the test's temporary directory.
func writePEM(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWechatpaySDKInterop runs the SDK as a merchant against the simulator
// in both signing modes (platform certificate and WeChat Pay public key),
// then sends notifications built with the SDK's primitives to the
// gateway's callback, each against a stack of real processes.
func TestWechatpaySDKInterop(t *testing.T) {
	npmtest.Install(t, sdkDir, "wechatpay-axios-plugin")
	for _, mode := range []struct {
		name        string
		publicKeyID string
	}{{"platform certificate", ""}, {"public key", publicKeyID}} {
		t.Run(mode.name, func(t *testing.T) {
			platform, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				t.Fatal(err)
			}
			platformPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(platform)})
			platformFile := writePEM(t, "platform.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(platform))
			signingSerial := wechatpay.KeySerial(&platform.PublicKey)
			payEnv := map[string]string{}
			simEnv := map[string]string{
				"ORDERFLOW_PAYSIM_PLATFORM_KEY_FILE": platformFile,
				"ORDERFLOW_PAYSIM_MIN_CLOSE_AGE":     minCloseAge.String(),
			}
			if mode.publicKeyID != "" {
				signingSerial = mode.publicKeyID
				simEnv["ORDERFLOW_PAYSIM_PUBLIC_KEY_ID"] = mode.publicKeyID
				pubDER, err := x509.MarshalPKIXPublicKey(&platform.PublicKey)
				if err != nil {
					t.Fatal(err)
				}
				payEnv["ORDERFLOW_PAY_PUBLIC_KEY_FILE"] = writePEM(t, "wechatpay_pub.pem", "PUBLIC KEY", pubDER)
				payEnv["ORDERFLOW_PAY_PUBLIC_KEY_ID"] = mode.publicKeyID
			}
			// The schedule's first query comes after the notifications:
			// they, not a query, mark the payment paid.
			recEnv := map[string]string{"ORDERFLOW_RECONCILE_SCHEDULE": "5m"}
			for k, v := range payEnv {
				recEnv[k] = v
			}
			st := stacktest.Start(t, stacktest.Options{
				Services: []string{stacktest.Gateway, stacktest.Reconciler, stacktest.PaySim},
				ServiceEnv: map[string]map[string]string{
					stacktest.PaySim: simEnv, stacktest.Gateway: payEnv, stacktest.Reconciler: recEnv,
				},
			})
			merchantKey := wechatpay.DevMerchantKey()
			merchantDER, err := x509.MarshalPKCS8PrivateKey(merchantKey)
			if err != nil {
				t.Fatal(err)
			}
			cfg := map[string]any{
				"baseURL": st.URL(stacktest.PaySim), "mchid": "1900000001", "appid": "wxorderflowdev00001",
				"merchantSerial": wechatpay.KeySerial(&merchantKey.PublicKey),
				"merchantKeyPem": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: merchantDER})),
				"signingSerial":  signingSerial, "signingPublicKeyPem": string(wechatpay.MarshalPublicKeyPEM(&platform.PublicKey)),
				"platformKeyPem": string(platformPEM), "apiv3Key": wechatpay.DevAPIv3Key,
				"publicKeyMode": mode.publicKeyID != "", "minCloseAgeMs": minCloseAge.Milliseconds(),
				"prefix": fmt.Sprintf("IO%d", time.Now().UnixNano()),
			}

			t.Run("merchant calls", func(t *testing.T) { checkProviderCalls(t, runMerchant(t, "provider", cfg), mode.publicKeyID != "") })
			t.Run("notifications", func(t *testing.T) { checkNotifications(t, st, cfg) })
		})
	}
}

// answer is what a step of the merchant's calls must get.
type answer struct {
	status int
	code   string
	// has lists strings the body must contain; lacks strings it must not.
	has, lacks []string
}

func checkProviderCalls(t *testing.T, steps map[string]step, publicKeyMode bool) {
	want := map[string]answer{
		"create":               {status: 200, has: []string{`"code_url":"weixin://`}},
		"create again":         {status: 200, has: []string{`"code_url":"weixin://`}},
		"create second":        {status: 200},
		"query unpaid":         {status: 200, has: []string{`"trade_state":"NOTPAY"`, `"total":990`}, lacks: []string{"payer_total", "transaction_id"}},
		"query unknown":        {status: 404, code: "ORDER_NOT_EXIST"},
		"close unknown":        {status: 404, code: "ORDER_NOT_EXIST"},
		"close too early":      {status: 400, code: wechatpay.CodeCloseTooEarly},
		"query paid":           {status: 200, has: []string{`"trade_state":"SUCCESS"`, `"payer_total":990`, `"transaction_id":"`, `"success_time":"`}},
		"close paid":           {status: 400, code: "ORDERPAID"},
		"close unpaid":         {status: 204},
		"close closed":         {status: 204},
		"query closed":         {status: 200, has: []string{`"trade_state":"CLOSED"`}, lacks: []string{"payer_total"}},
		"wrong merchant key":   {status: 401, code: "SIGN_ERROR"},
		"wrong mchid":          {status: 401, code: "SIGN_ERROR"},
		"wrong mchid in query": {status: 400, code: "PARAM_ERROR"},
		"create tampered":      {status: 200},
		"certificates":         {status: 200, has: []string{`"entries":1`, `"sameKey":true`}},
	}
	if publicKeyMode {
		want["certificates"] = answer{status: 404, code: "NOT_FOUND"}
	}
	for name, w := range want {
		s, ok := steps[name]
		switch {
		case !ok:
			t.Errorf("%s: no answer reported", name)
			continue
		case s.Status != w.status || s.Code != w.code:
			t.Errorf("%s: %d %q (%s; %s), want %d %q", name, s.Status, s.Code, s.Body, s.Error, w.status, w.code)
			continue
		case s.Verified == "":
			t.Errorf("%s: answer %d not verified: %s", name, s.Status, s.Error)
		}
		for _, h := range w.has {
			if !strings.Contains(s.Body, h) {
				t.Errorf("%s: body %s, want it to contain %s", name, s.Body, h)
			}
		}
		for _, l := range w.lacks {
			if strings.Contains(s.Body, l) {
				t.Errorf("%s: body %s, want no %s", name, s.Body, l)
			}
		}
	}
	// A SUCCESS whose signature was corrupted: the SDK itself refuses it.
	if s := steps["query tampered"]; s.RefusedBy != "sdk" || s.Error != "EV3_RES_HEADER_SIGNATURE_DIGEST" {
		t.Errorf("query tampered: %+v, want the SDK to refuse it with EV3_RES_HEADER_SIGNATURE_DIGEST", s)
	}
}

func checkNotifications(t *testing.T, st *stacktest.Stack, cfg map[string]any) {
	const member, code = "interop-member", "SO-INTEROP-1"
	token := st.DevToken(t, member)
	gw := st.URL(stacktest.Gateway)
	if status, body := restCall(t, http.MethodPost, gw+"/v1/payments", token, `{"orderCode":"`+code+`","amountFen":1990}`); status != http.StatusOK {
		t.Fatalf("POST /v1/payments = %d %s, want 200", status, body)
	}
	cfg["notifyURL"] = gw + "/v1/payments/notify"
	cfg["outTradeNo"] = wechatpay.OutTradeNo(member, code)
	cfg["amountFen"] = 1990
	steps := runMerchant(t, "notify", cfg)
	for _, w := range []struct {
		step   string
		status int
	}{
		{"forged", http.StatusUnauthorized},
		{"stale", http.StatusUnauthorized},
		{"wrong merchant", http.StatusBadRequest},
		{"genuine", http.StatusNoContent},
		{"replayed", http.StatusNoContent},
	} {
		if s := steps[w.step]; s.Status != w.status {
			t.Errorf("notification %s: %d %s, want %d", w.step, s.Status, s.Body, w.status)
		}
	}
	status, body := restCall(t, http.MethodGet, gw+"/v1/payments/"+code, token, "")
	var p struct {
		Status   string
		Attempts []struct{ Action, TradeState string }
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || status != http.StatusOK {
		t.Fatalf("GET /v1/payments/%s = %d %s (%v)", code, status, body, err)
	}
	// Paid once, by the genuine notification; the replay applied nothing.
	if p.Status != "PAYMENT_STATUS_PAID" || len(p.Attempts) != 1 || p.Attempts[0].Action != "NOTIFY" {
		t.Errorf("payment after the notifications = %s, want PAID with one NOTIFY attempt", body)
	}
}

// restCall sends a JSON request to the gateway and returns the status and
// body.
func restCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
