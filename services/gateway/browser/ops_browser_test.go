package browser_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// restTask submits or reads a task over REST as member's token.
func restTask(t *testing.T, method, url, token, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = %d %v (%v)", method, url, resp.StatusCode, out, err)
	}
	return out
}

// TestOpsPage drives the operations page in headless Chromium: a task
// whose job is dead-lettered while the fulfilment system is down is found
// on the page and replayed to success; a member's token is refused.
func TestOpsPage(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	st := stacktest.Start(t, stacktest.Options{Env: map[string]string{
		// Dead-letter quickly: two deliveries, short pauses and timeouts.
		"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT":     "2",
		"ORDERFLOW_SPLITWORKER_REQUEUE_BACKOFF":    "50ms",
		"ORDERFLOW_SPLITWORKER_FULFILMENT_TIMEOUT": "500ms",
		"ORDERFLOW_SPLITWORKER_LEASE":              "3s",
		"ORDERFLOW_SPLITWORKER_LEASE_WAIT":         "2s",
		// An outage holds a delivery in place this long before it counts.
		"ORDERFLOW_SPLITWORKER_OUTAGE_HOLD": "200ms",
		// The catalogue is read for every order, so an order submitted
		// while the fulfilment system is down fails at its plan and is
		// dead-lettered. With a catalogue read less than its age before, it
		// would get as far as marking its shipment requested, and its task
		// could only fail once the system is back to say whether the
		// shipment exists.
		"ORDERFLOW_SPLITWORKER_CATALOGUE_MAX_AGE": "0s",
	}, ServiceEnv: map[string]map[string]string{
		// An uncertain provider answer is retried after 30 s: the
		// operator runs the check from the page before that.
		stacktest.Reconciler: {"ORDERFLOW_RECONCILE_RETRY_BASE": "30s", "ORDERFLOW_RECONCILE_RETRY_MAX": "1m"},
	}})
	needs(t, st, stacktest.SplitWorker, stacktest.Fulfilment)
	b := newBrowser(t)
	base := st.URL(stacktest.Gateway)
	member := st.DevToken(t, "member-dl")

	t.Run("AdminReplaysADeadLetteredTask", func(t *testing.T) {
		st.Stop(stacktest.Fulfilment)
		task := restTask(t, "POST", base+"/v1/order-splits", member,
			`{"orderCode":"ORD-DL-1","items":[{"itemCode":"A1","sku":"SKU-TEA-500G","quantity":1}]}`)
		id := task["taskId"].(string)
		deadline := time.Now().Add(waitTimeout)
		for {
			got := restTask(t, "GET", base+"/v1/tasks/"+id, member, "")
			if got["status"] == "TASK_STATUS_FAILED" {
				if got["errorCode"] != float64(10009) {
					t.Fatalf("task failed with %v, want 10009 (dead-lettered)", got)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s not dead-lettered: %v", id, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		st.Start(stacktest.Fulfilment)

		p := b.tab(t, base)
		p.do(chromedp.Navigate(base + "/ops?refreshMs=500"))
		p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
		p.shot("ops-00-sign-in")
		// Development sign-in as an operator, from the keyboard.
		p.do(chromedp.Focus(chromedp.CSS("#operator-id")), chromedp.KeyEvent(kb.Enter))
		p.waitFor("overview", `!document.querySelector("#console").hidden && document.querySelectorAll("#overview-stats .stat").length > 0`)
		// The split-worker's report of its held deliveries is renewed every
		// 2 s: the dead-lettered job's last delivery leaves it by then.
		p.waitFor("no delivery unacknowledged", `[...document.querySelectorAll("#overview-stats .stat")].some(s => s.querySelector(".stat-label").textContent === "queue unacknowledged" && s.querySelector(".stat-value").textContent === "0")`)
		stats := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll("#overview-stats .stat")].map(s => [s.querySelector(".stat-label").textContent, s.querySelector(".stat-value").textContent]))`)
		if stats["dead letters"] != "1" || stats["queue consumers"] == "0" || stats["queue consumers"] == "n/a" {
			t.Errorf("overview = %v, want 1 dead letter and the split-worker consuming", stats)
		}
		if stats["overflow queue ready"] != "0" || stats["overflow queue consumers"] == "0" || stats["overflow queue consumers"] == "n/a" {
			t.Errorf("overview = %v, want the overflow queue empty and consumed", stats)
		}
		// The one split-worker reports its held deliveries: none now.
		if stats["split-workers reporting"] != "1" || stats["queue unacknowledged"] != "0" || stats["dead-letter queue unacknowledged"] != "0" {
			t.Errorf("overview = %v, want 1 split-worker reporting and no delivery unacknowledged", stats)
		}
		// The error rates count the dead letter and its task's failure
		// (10009) in both windows; the stack's Redis prefix is its own.
		// A split-worker writes its counts once a second.
		p.waitFor("error rates counted", `(r => r.length === 2 && r.every(c => c.cells.length === 7 && c.cells[3].textContent === "10009 ×1"))([...document.querySelectorAll("#rates-body tr")])`)
		rates := eval[[][]string](p, `[...document.querySelectorAll("#rates-body tr")].map(r => [...r.cells].map(c => c.textContent))`)
		if len(rates) != 2 {
			t.Fatalf("error rates rows = %q, want 2 (last 5 min, last hour)", rates)
		}
		for _, r := range rates {
			if len(r) != 7 || !strings.HasPrefix(r[1], "1 (") || !strings.HasPrefix(r[2], "1 (100.0 %)") || r[3] != "10009 ×1" || !strings.HasPrefix(r[4], "1 (") {
				t.Errorf("error rates row = %q, want 1 task finished, 1 failed (100 %%) with 10009, 1 dead-lettered", r)
			}
		}
		p.waitFor("dead letter row", fmt.Sprintf(`[...document.querySelectorAll("#dead-body tr")].some(r => r.textContent.includes(%q))`, id))
		p.shot("ops-01-overview-dead-letter")
		// Its details show the attempts: dead-lettered at the delivery
		// limit (2), so a worker took it on a second delivery at least.
		details := fmt.Sprintf(`[...document.querySelectorAll("#dead-body tr")].find(r => r.textContent.includes(%q)).querySelector("button.ghost")`, id)
		p.do(chromedp.Evaluate[chromedp.Void](details + `.click()`))
		p.waitFor("task details", `!document.querySelector("#task-detail").hidden`)
		if sum := eval[string](p, `document.querySelector("#detail-summary").textContent`); !regexp.MustCompile(`^attempts [2-9]\b`).MatchString(sum) {
			t.Errorf("task details summary = %q, want attempts 2 or more (dead-lettered at the delivery limit 2)", sum)
		}

		// Replay: the confirm dialog opens with Cancel focused; cancelling
		// changes nothing, confirming replays.
		replay := fmt.Sprintf(`[...document.querySelectorAll("#dead-body tr")].find(r => r.textContent.includes(%q)).querySelector("button.primary")`, id)
		p.do(chromedp.Evaluate[chromedp.Void](replay + `.click()`))
		p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
		p.shot("ops-02-confirm")
		p.do(chromedp.KeyEvent(kb.Escape))
		p.waitFor("dialog closed", `!document.querySelector("#confirm-dialog").open`)
		if got := restTask(t, "GET", base+"/v1/tasks/"+id, member, ""); got["status"] != "TASK_STATUS_FAILED" {
			t.Fatalf("task after a cancelled confirm = %v, want still FAILED", got["status"])
		}
		p.do(chromedp.Evaluate[chromedp.Void](replay + `.click()`))
		p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
		p.confirm()
		p.waitFor("dead letter gone", fmt.Sprintf(`![...document.querySelectorAll("#dead-body tr")].some(r => r.textContent.includes(%q))`, id))

		// Find it by id: it runs to success now the fulfilment system is back.
		p.setValue("#find-task", id)
		deadline = time.Now().Add(waitTimeout)
		for {
			p.do(chromedp.Click(chromedp.CSS("#find-submit")))
			if eval[bool](p, `document.querySelector("#tasks-body").textContent.includes("SUCCEEDED")`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replayed task never succeeded\npage: %s", p.state())
			}
			time.Sleep(200 * time.Millisecond)
		}
		p.shot("ops-03-replayed-succeeded")
		p.waitFor("audit row", `[...document.querySelectorAll("#audit-body tr")].some(r => r.textContent.includes("ReplayDeadLetter") && r.textContent.includes("operator"))`)
		if got := restTask(t, "GET", base+"/v1/tasks/"+id, member, ""); got["status"] != "TASK_STATUS_SUCCEEDED" {
			t.Errorf("task = %v, want SUCCEEDED", got)
		}
	})

	t.Run("ReplayRefusedAfterTheOrderWasSubmittedAgain", func(t *testing.T) {
		body := `{"orderCode":"ORD-DL-AGAIN","items":[{"itemCode":"A1","sku":"SKU-TEA-500G","quantity":1}]}`
		st.Stop(stacktest.Fulfilment)
		dead := restTask(t, "POST", base+"/v1/order-splits", member, body)["taskId"].(string)
		waitStatus(t, base, member, dead, "TASK_STATUS_FAILED")
		st.Start(stacktest.Fulfilment)
		again := restTask(t, "POST", base+"/v1/order-splits", member, body)["taskId"].(string)
		waitStatus(t, base, member, again, "TASK_STATUS_SUCCEEDED")

		p := b.tab(t, base)
		p.do(chromedp.Navigate(base + "/ops?refreshMs=500"))
		p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
		p.do(chromedp.Focus(chromedp.CSS("#operator-id")), chromedp.KeyEvent(kb.Enter))
		p.waitFor("dead letter row", fmt.Sprintf(`[...document.querySelectorAll("#dead-body tr")].some(r => r.textContent.includes(%q))`, dead))
		replay := fmt.Sprintf(`[...document.querySelectorAll("#dead-body tr")].find(r => r.textContent.includes(%q)).querySelector("button.primary")`, dead)
		p.do(chromedp.Evaluate[chromedp.Void](replay + `.click()`))
		p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
		p.confirm()
		p.waitFor("refusal naming the holder", fmt.Sprintf(`!document.querySelector("#dead-error").hidden && document.querySelector("#dead-error").textContent.includes(%q)`, again))
		p.shot("ops-04-replay-refused")
		if got := restTask(t, "GET", base+"/v1/tasks/"+dead, member, ""); got["status"] != "TASK_STATUS_FAILED" {
			t.Errorf("task after a refused replay = %v, want still FAILED", got["status"])
		}
		if !eval[bool](p, fmt.Sprintf(`[...document.querySelectorAll("#dead-body tr")].some(r => r.textContent.includes(%q))`, dead)) {
			t.Errorf("dead letter left the page after a refused replay, want it kept for discarding")
		}
	})

	t.Run("AdminRunsAStuckPaymentsCheck", func(t *testing.T) {
		needs(t, st, stacktest.Reconciler, stacktest.PaySim)
		sim := st.URL(stacktest.PaySim)
		code := fmt.Sprintf("PAY-OPS-%d", time.Now().UnixNano()%1e9)
		// The first query answers SYSTEM_ERROR: the payment is stuck,
		// its check retried only after 30 s.
		restTask(t, "PUT", sim+"/admin/orders/"+wechatpay.OutTradeNo("member-dl", code)+"/behaviour", "", `{"queryFault":{"code":"SYSTEM_ERROR","count":1}}`)
		restTask(t, "POST", base+"/v1/payments", member, `{"orderCode":"`+code+`","amountFen":990,"description":"tea"}`)
		deadline := time.Now().Add(waitTimeout)
		for {
			got := restTask(t, "GET", base+"/v1/payments/"+code, member, "")
			if attempts, _ := got["attempts"].([]any); len(attempts) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("payment %s never checked: %v", code, got)
			}
			time.Sleep(100 * time.Millisecond)
		}

		p := b.tab(t, base)
		p.do(chromedp.Navigate(base + "/ops?refreshMs=500"))
		p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
		p.do(chromedp.Focus(chromedp.CSS("#operator-id")), chromedp.KeyEvent(kb.Enter))
		row := fmt.Sprintf(`[...document.querySelectorAll("#stuck-body tr")].find(r => r.textContent.includes(%q))`, code)
		p.waitFor("stuck payment row", row+` !== undefined && `+row+`.textContent.includes("uncertain")`)
		stats := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll("#overview-stats .stat")].map(s => [s.querySelector(".stat-label").textContent, s.querySelector(".stat-value").textContent]))`)
		if stats["payments stuck"] == "" || stats["payments stuck"] == "0" || stats["payments unpaid (tracked)"] == "0" || stats["checks pending"] == "" {
			t.Errorf("overview = %v, want the stuck payment counted with the delay queue", stats)
		}
		p.shot("ops-05-stuck-payment")

		// Its details show the check due after the backoff.
		p.do(chromedp.Evaluate[chromedp.Void](row + `.querySelector("button.ghost").click()`))
		p.waitFor("payment detail", `!document.querySelector("#payment-detail").hidden && document.querySelector("#payment-check").textContent.includes("uncertain answers 1")`)

		// The shopper pays; the callback is lost. Running the check now
		// finds the payment paid.
		restTask(t, "POST", sim+"/admin/orders/"+wechatpay.OutTradeNo("member-dl", code)+"/pay?notify=false", "", "")
		p.do(chromedp.Click(chromedp.CSS("#payment-run")))
		p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
		p.confirm()
		deadline = time.Now().Add(waitTimeout)
		for {
			p.do(chromedp.Click(chromedp.CSS("#payment-find")))
			if eval[bool](p, `document.querySelector("#payment-check").textContent.startsWith("PAID")`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("payment never became PAID after its check ran\npage: %s", p.state())
			}
			time.Sleep(200 * time.Millisecond)
		}
		p.waitFor("audit row", `[...document.querySelectorAll("#audit-body tr")].some(r => r.textContent.includes("RunPaymentCheck") && r.textContent.includes("operator"))`)
		p.shot("ops-06-payment-paid")
		if got := restTask(t, "GET", base+"/v1/payments/"+code, member, ""); got["status"] != "PAYMENT_STATUS_PAID" {
			t.Errorf("payment = %v, want PAID", got)
		}
	})

	t.Run("ResetRefusedWithoutConfiguredPool", func(t *testing.T) {
		// This stack's gateway is not told the split-workers' configured
		// pool: the reset is refused and the page says why.
		p := b.tab(t, base)
		p.do(chromedp.Navigate(base + "/ops?refreshMs=500"))
		p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
		p.do(chromedp.Focus(chromedp.CSS("#operator-id")), chromedp.KeyEvent(kb.Enter))
		p.waitFor("slot pool settings", `document.querySelector("#value-capacity").textContent !== ""`)
		before := p.text("#value-capacity")
		p.do(chromedp.Click(chromedp.CSS("#pool-reset")))
		p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
		p.confirm()
		p.waitFor("refusal", `!document.querySelector("#slots-error").hidden`)
		if got := p.text("#slots-error"); !strings.HasPrefix(got, "400: ") || !strings.Contains(got, "ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS") {
			t.Errorf("slots error = %q, want a 400 naming ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS", got)
		}
		if got := p.text("#value-capacity"); got != before {
			t.Errorf("capacity after the refused reset = %q, want %q unchanged", got, before)
		}
	})

	t.Run("MemberTokenRefused", func(t *testing.T) {
		p := b.tab(t, base)
		p.do(chromedp.Navigate(base + "/ops"))
		p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
		p.setValue("#token", member)
		p.do(chromedp.Focus(chromedp.CSS("#token")), chromedp.KeyEvent(kb.Enter))
		p.waitFor("refusal", `!document.querySelector("#overview-error").hidden`)
		if got := p.text("#overview-error"); !strings.Contains(got, "403") {
			t.Errorf("message = %q, want a 403 refusal", got)
		}
		if got := eval[int](p, `document.querySelectorAll("#overview-stats .stat").length`); got != 0 {
			t.Errorf("overview shows %d figures to a member, want none", got)
		}
		p.shot("ops-04-member-refused")
	})
	// Every call the operations page made is one the contract describes.
	checkCallsInContract(t, st, 8)
}

// confirm accepts the open confirm dialog from the keyboard (focus on
// Confirm, Enter), as an operator without a mouse would, and waits for it
// to close. A mouse click computed from the button's box could land on
// the backdrop while the page re-renders under load and do nothing.
func (p *page) confirm() {
	p.t.Helper()
	p.do(chromedp.Focus(chromedp.CSS("#confirm-ok")), chromedp.KeyEvent(kb.Enter))
	p.waitFor("dialog closed", `!document.querySelector("#confirm-dialog").open`)
}

// waitStatus waits until the member's task reaches status.
func waitStatus(t *testing.T, base, member, id, status string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := restTask(t, "GET", base+"/v1/tasks/"+id, member, "")
		if got["status"] == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s = %v, want %s", id, got, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
