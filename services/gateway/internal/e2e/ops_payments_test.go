package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// adminToken asks the gateway's development login for an operator's token
// with the admin role.
func adminToken(t *testing.T, gw, operator string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"memberId": operator, "roles": []string{"admin"}})
	resp, err := http.Post(gw+"/v1/dev/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		t.Fatalf("dev login as admin: %s %v", resp.Status, err)
	}
	return out.Token
}

// field walks m along keys.
func field(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, _ := v.(map[string]any)
		v = mm[k]
	}
	return v
}

// stuckEntry returns the stuck list's entry of code, if listed.
func stuckEntry(t *testing.T, gw, admin, code string) map[string]any {
	t.Helper()
	st, body := call(t, "GET", gw+"/v1/ops/stuck-payments?pageSize=100", admin, nil)
	if st != 200 {
		t.Fatalf("GET /v1/ops/stuck-payments = %d %v", st, body)
	}
	list, _ := body["payments"].([]any)
	for _, e := range list {
		if m := e.(map[string]any); field(m, "payment", "orderCode") == code {
			return m
		}
	}
	return nil
}

// TestOpsPayments exercises the operations API on payments across the
// real processes: a payment whose query answered SYSTEM_ERROR is listed
// as stuck with its check; its check is moved, then run now after the
// shopper paid without a callback, and the payment becomes PAID; a
// cancelled tracking lists it as untracked; bad input names its field;
// the mutations are audited.
func TestOpsPayments(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{ServiceEnv: map[string]map[string]string{
		// Uncertain answers are retried after 30 s: the test moves and
		// runs the check itself.
		stacktest.Reconciler: {"ORDERFLOW_RECONCILE_RETRY_BASE": "30s", "ORDERFLOW_RECONCILE_RETRY_MAX": "1m"},
	}})
	gw, sim := s.URL(stacktest.Gateway), s.URL(stacktest.PaySim)
	member := s.DevToken(t, "payer")
	admin := adminToken(t, gw, "operator")
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	code, dropped := "OPS-"+suffix, "OPSDROP-"+suffix

	if st, body := call(t, "PUT", sim+"/admin/orders/"+wechatpay.OutTradeNo("payer", code)+"/behaviour", "", map[string]any{"queryFault": map[string]any{"code": "SYSTEM_ERROR", "count": 1}}); st != 200 {
		t.Fatalf("simulator behaviour = %d %v", st, body)
	}
	for _, c := range []string{code, dropped} {
		if st, body := call(t, "POST", gw+"/v1/payments", member, map[string]any{"orderCode": c, "amountFen": 500, "description": "tea"}); st != 200 {
			t.Fatalf("POST /v1/payments %s = %d %v", c, st, body)
		}
	}

	// The first query (1 s) answers SYSTEM_ERROR: listed as uncertain,
	// the same step due again after the backoff.
	var entry map[string]any
	until(t, code+" listed as stuck", 20*time.Second, func() bool {
		entry = stuckEntry(t, gw, admin, code)
		return entry != nil
	})
	if entry["reason"] != "uncertain" || entry["memberId"] != "payer" || field(entry, "check", "uncertainRetries") != float64(1) ||
		field(entry, "check", "scheduled") != true || field(entry, "check", "step") != float64(0) {
		t.Errorf("stuck entry = %v, want reason uncertain, member payer, 1 uncertain retry of step 0, scheduled", entry)
	}
	st, ov := call(t, "GET", gw+"/v1/ops/overview", admin, nil)
	if st != 200 || ov["paymentsError"] != "" {
		t.Fatalf("overview = %d %v", st, ov)
	}
	for _, k := range []string{"pending", "unpaidTracked", "stuck"} {
		if n, _ := field(ov, "payments", k).(string); n == "" || n == "0" {
			t.Errorf("overview payments.%s = %v, want at least 1 (%v)", k, field(ov, "payments", k), ov["payments"])
		}
	}
	if field(ov, "payments", "nextDueTime") == nil {
		t.Errorf("overview payments = %v, want a next due time", ov["payments"])
	}
	// The provider's answers over the last 5 minutes and the last hour:
	// the one SYSTEM_ERROR is the one uncertain answer.
	answers, _ := field(ov, "payments", "answers").([]any)
	if len(answers) != 2 {
		t.Errorf("overview payments.answers = %v, want two windows", answers)
	}
	for _, a := range answers {
		a, _ := a.(map[string]any)
		if n, _ := a["answers"].(string); a["uncertain"] != "1" || n == "" || n == "0" {
			t.Errorf("overview payments.answers window = %v, want 1 uncertain of at least 1 answer", a)
		}
	}

	// Found by order code alone (any member); another member's is 404.
	if st, p := call(t, "GET", gw+"/v1/ops/payments/"+code, admin, nil); st != 200 || p["memberId"] != "payer" || field(p, "payment", "status") != "PAYMENT_STATUS_UNPAID" {
		t.Errorf("GET /v1/ops/payments/%s = %d %v, want payer's UNPAID payment", code, st, p)
	}
	if st, p := call(t, "GET", gw+"/v1/ops/members/someone/payments/"+code, admin, nil); st != 404 {
		t.Errorf("GET as another member's = %d %v, want 404", st, p)
	}

	// Bad input names its field.
	for _, tc := range []struct{ body map[string]any }{
		{map[string]any{}},
		{map[string]any{"checkTime": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}},
		{map[string]any{"checkTime": time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339)}},
	} {
		st, body := call(t, "POST", gw+"/v1/ops/payments/"+code+":reschedule", admin, tc.body)
		if st != 400 || !fieldNamed(body, "checkTime") {
			t.Errorf("reschedule %v = %d %v, want 400 naming checkTime", tc.body, st, body)
		}
	}
	if st, body := call(t, "POST", gw+"/v1/ops/payments/NOPE-"+suffix+":runCheck", admin, map[string]any{}); st != 404 {
		t.Errorf("runCheck of an unknown payment = %d %v, want 404", st, body)
	}

	// Moved an hour ahead: the check's due time follows.
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	st, r := call(t, "POST", gw+"/v1/ops/payments/"+code+":reschedule", admin, map[string]any{"checkTime": later.Format(time.RFC3339)})
	if due, _ := field(r, "check", "dueTime").(string); st != 200 || due != later.Format("2006-01-02T15:04:05Z") {
		t.Fatalf("reschedule to %v = %d %v, want the check due then", later, st, r)
	}
	if got, _ := field(r, "payment", "nextCheckTime").(string); got != later.Format("2006-01-02T15:04:05Z") {
		t.Errorf("payment nextCheckTime after reschedule = %q, want %v", got, later)
	}

	// The shopper pays, the callback is lost; running the check now finds
	// the payment paid.
	if st, body := call(t, "POST", sim+"/admin/orders/"+wechatpay.OutTradeNo("payer", code)+"/pay?notify=false", "", nil); st != 200 {
		t.Fatalf("simulator pay = %d %v", st, body)
	}
	if st, body := call(t, "POST", gw+"/v1/ops/payments/"+code+":runCheck", admin, map[string]any{}); st != 200 {
		t.Fatalf("runCheck = %d %v", st, body)
	}
	until(t, code+" PAID after the check ran", 20*time.Second, func() bool {
		_, p := call(t, "GET", gw+"/v1/payments/"+code, member, nil)
		return p["status"] == "PAYMENT_STATUS_PAID"
	})
	if e := stuckEntry(t, gw, admin, code); e != nil {
		t.Errorf("paid payment still listed as stuck: %v", e)
	}
	if st, body := call(t, "POST", gw+"/v1/ops/payments/"+code+":runCheck", admin, map[string]any{}); st != 400 || reason(body) != "PAYMENT_FINISHED" {
		t.Errorf("runCheck of a PAID payment = %d %v, want 400 PAYMENT_FINISHED", st, body)
	}
	if _, ov := call(t, "GET", gw+"/v1/ops/overview", admin, nil); field(ov, "payments", "paidToday") == "0" {
		t.Errorf("overview payments = %v, want paidToday counted", ov["payments"])
	}

	// Tracking cancelled by an operator: listed as untracked.
	if st, body := call(t, "POST", gw+"/v1/ops/members/payer/payments/"+dropped+":cancelTracking", admin, map[string]any{}); st != 200 {
		t.Fatalf("cancelTracking = %d %v", st, body)
	}
	if e := stuckEntry(t, gw, admin, dropped); e == nil || e["reason"] != "untracked" || field(e, "check", "scheduled") == true {
		t.Errorf("stuck entry of the untracked payment = %v, want reason untracked and no check", e)
	}

	// Every mutation is in the audit stream with its actor.
	_, audit := call(t, "GET", gw+"/v1/ops/audit?pageSize=50", admin, nil)
	seen := map[string]bool{}
	for _, e := range audit["events"].([]any) {
		m := e.(map[string]any)
		if m["actor"] == "operator" && m["result"] == "ok" {
			seen[m["action"].(string)] = true
		}
	}
	for _, a := range []string{"ReschedulePaymentCheck", "RunPaymentCheck", "CancelPaymentTracking"} {
		if !seen[a] {
			t.Errorf("audit has no successful %s by operator: %v", a, audit["events"])
		}
	}
}

// reason is the ErrorInfo reason of an error body.
func reason(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		if r, ok := d.(map[string]any)["reason"].(string); ok {
			return r
		}
	}
	return ""
}

// fieldNamed reports whether an error body names field in a BadRequest
// field violation or in its message.
func fieldNamed(body map[string]any, name string) bool {
	details, _ := body["details"].([]any)
	for _, d := range details {
		vs, _ := d.(map[string]any)["fieldViolations"].([]any)
		for _, v := range vs {
			if v.(map[string]any)["field"] == name {
				return true
			}
		}
	}
	return false
}
