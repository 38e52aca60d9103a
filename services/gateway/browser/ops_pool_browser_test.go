package browser_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// TestOpsPoolSettings drives the slot pool's settings on the operations
// page in headless Chromium: N set through the API by operator alice
// shows as set by her, the weights as written from the split-workers'
// configuration; Reset to configuration, once confirmed, writes the
// configured N back and the page shows it, and every setting, from
// configuration, written by the operator who asked.
func TestOpsPoolSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	st := stacktest.Start(t, stacktest.Options{Env: map[string]string{
		// The split-workers' configured pool, which the gateway is told
		// too so that it can reset the pool to it.
		"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": "3",
		"ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS": "member-heavy=2",
	}})
	needs(t, st, stacktest.SplitWorker)
	b := newBrowser(t)
	base := st.URL(stacktest.Gateway)

	alice := st.AdminToken(t, "alice")
	set := restTask(t, "PUT", base+"/v1/ops/slot-pool/capacity", alice, `{"capacity":1}`)
	if got := set["stats"].(map[string]any)["capacity"]; got != float64(1) {
		t.Fatalf("PUT capacity 1: capacity = %v, want 1", got)
	}

	p := b.tab(t, base)
	p.do(chromedp.Navigate(base + "/ops?refreshMs=500"))
	p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
	// Development sign-in as admin "operator", from the keyboard.
	p.do(chromedp.Focus(chromedp.CSS("#operator-id")), chromedp.KeyEvent(kb.Enter))
	p.waitFor("slot pool settings", `document.querySelector("#origin-capacity").textContent !== ""`)
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector("#slots").scrollIntoView()`))
	p.shot("ops-10-pool-set-by-operator")
	if got := p.text("#value-capacity"); got != "1" {
		t.Errorf("capacity shown = %q, want alice's 1", got)
	}
	if got := eval[string](p, `document.querySelector("#capacity").value`); got != "1" {
		t.Errorf("capacity field = %q, want alice's 1", got)
	}
	if got := p.text("#origin-capacity"); !strings.HasPrefix(got, "set by operator alice at ") {
		t.Errorf("capacity origin = %q, want set by operator alice at a time", got)
	}
	if got := p.text("#value-weights"); !strings.Contains(got, "member-heavy ×2") {
		t.Errorf("weights shown = %q, want member-heavy ×2", got)
	}
	for _, setting := range []string{"fairness", "weights"} {
		if got := p.text("#origin-" + setting); !strings.HasPrefix(got, "from configuration, written by ") {
			t.Errorf("%s origin = %q, want from configuration (the split-worker's start)", setting, got)
		}
	}

	// Reset: cancelling the confirm changes nothing, confirming resets.
	p.do(chromedp.Click(chromedp.CSS("#pool-reset")))
	p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
	if got := p.text("#confirm-text"); !strings.Contains(got, "configuration") {
		t.Errorf("confirm text = %q, want it to name the configuration", got)
	}
	p.do(chromedp.KeyEvent(kb.Escape))
	p.waitFor("dialog closed", `!document.querySelector("#confirm-dialog").open`)
	pool := restTask(t, "GET", base+"/v1/ops/slot-pool", alice, "")
	if got := pool["stats"].(map[string]any)["capacity"]; got != float64(1) {
		t.Fatalf("capacity after a cancelled confirm = %v, want still 1", got)
	}
	p.do(chromedp.Click(chromedp.CSS("#pool-reset")))
	p.waitFor("confirm dialog", `document.querySelector("#confirm-dialog").open`)
	p.confirm()
	p.waitFor("configured N shown", `document.querySelector("#value-capacity").textContent === "3" && document.querySelector("#capacity").value === "3"`)
	p.shot("ops-11-pool-reset")
	for _, setting := range []string{"capacity", "fairness", "weights"} {
		if got := p.text("#origin-" + setting); !strings.HasPrefix(got, "from configuration, written by operator at ") {
			t.Errorf("%s origin after the reset = %q, want from configuration, written by operator (who asked)", setting, got)
		}
	}
	if got := p.text("#value-weights"); !strings.Contains(got, "member-heavy ×2") {
		t.Errorf("weights shown after the reset = %q, want member-heavy ×2", got)
	}
	if !eval[bool](p, `document.querySelector("#slots-error").hidden`) {
		t.Errorf("slots error = %q, want none", p.text("#slots-error"))
	}
	pool = restTask(t, "GET", base+"/v1/ops/slot-pool", alice, "")
	if got := pool["stats"].(map[string]any)["capacity"]; got != float64(3) {
		t.Errorf("capacity after the reset = %v, want the configured 3", got)
	}
	p.waitFor("audit row", `[...document.querySelectorAll("#audit-body tr")].some(r => r.textContent.includes("ResetSlotPoolToConfiguration") && r.textContent.includes("operator"))`)
}
