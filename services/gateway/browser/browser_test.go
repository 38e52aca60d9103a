package browser_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/services/gateway/browser/qrtest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Main(m)) }

// chromiumPath is Debian's chromium, installed by `make test-deps`
// (deploy/local/ensure-test-deps.sh).
const chromiumPath = "/usr/bin/chromium"

// waitTimeout bounds every wait for the page to reach a state.
const waitTimeout = 20 * time.Second

// browser is one headless Chromium shared by the subtests; each subtest
// opens its own tab (and so its own sessionStorage, i.e. its own member).
type browser struct {
	ctx     context.Context
	shotDir string

	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing: the browser tests need Debian's chromium "+
			"(run `make test-deps`): %v", chromiumPath, err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	// Start the browser now, on a context without a deadline.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	shotDir := os.Getenv("ORDERFLOW_SCREENSHOT_DIR")
	if shotDir == "" {
		var err error
		if shotDir, err = os.MkdirTemp("", "orderflow-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(shotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shotDir)
	b := &browser{ctx: ctx, shotDir: shotDir}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return b
}

// listen records console errors and uncaught exceptions of a tab.
func (b *browser) listen(tab string) func(ev any) {
	return func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			var parts []string
			for _, a := range ev.Args {
				if a.Value != nil {
					parts = append(parts, string(a.Value))
				} else {
					parts = append(parts, a.Description)
				}
			}
			msg = "console.error: " + strings.Join(parts, " ")
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			desc := d.Text
			if d.Exception != nil {
				desc += " " + d.Exception.Description
			}
			msg = fmt.Sprintf("uncaught exception at %s:%d:%d: %s", d.URL, d.LineNumber+1, d.ColumnNumber+1, desc)
		default:
			return
		}
		b.mu.Lock()
		b.errs = append(b.errs, tab+": "+msg)
		b.mu.Unlock()
	}
}

// checkErrors fails the test for every console error or exception seen.
func (b *browser) checkErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("browser: %s", e)
	}
	b.errs = nil
}

// page is one tab on the stack's web page.
type page struct {
	t    *testing.T
	b    *browser
	ctx  context.Context
	base string
}

// tab opens a new tab; it is closed when the subtest ends.
func (b *browser) tab(t *testing.T, base string) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(b.listen(t.Name())))
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		b.checkErrors(t)
	})
	return &page{t: t, b: b, ctx: ctx, base: base}
}

// do runs the steps, failing the test on error.
func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("browser: %v\npage: %s", err, p.state())
	}
}

func eval[T any](p *page, js string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// state describes the visible page for failure messages.
func (p *page) state() string {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.querySelector("main").innerText`))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

// waitFor polls the JavaScript condition until it is true.
func (p *page) waitFor(what, cond string) {
	p.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waiting for %s (%s): timed out (last error %v)\npage: %s", what, cond, err, p.state())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// setValue sets an input's value as typing would (an input event follows).
func (p *page) setValue(sel, value string) {
	p.t.Helper()
	eval[bool](p, fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q;
		e.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`, sel, value))
}

// text is the trimmed text content of the first element matching sel.
func (p *page) text(sel string) string {
	p.t.Helper()
	return eval[string](p, fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").trim()`, sel))
}

// shot writes a PNG screenshot of the whole page.
func (p *page) shot(name string) {
	p.t.Helper()
	p.screenshot(name, chromedp.FullScreenshot(100))
}

// screenshot writes a PNG screenshot taken by capture.
func (p *page) screenshot(name string, capture chromedp.Action[[]byte]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout)
	defer cancel()
	buf, err := chromedp.Run(ctx, capture)
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(p.b.shotDir, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

// open navigates to the page with query and hash (e.g. "?pollMs=200",
// "#/history").
func (p *page) open(query, hash string) {
	p.t.Helper()
	p.do(chromedp.Navigate(p.base + "/" + query + hash))
	p.waitFor("page script", `document.readyState === "complete" && [...document.querySelectorAll(".view")].some(v => !v.hidden)`)
}

// signIn signs in as member from the login view, typing the id and
// pressing Enter.
func (p *page) signIn(member string) {
	p.t.Helper()
	p.waitFor("login form", `!document.querySelector("#view-login").hidden`)
	p.setValue("#member-id", "")
	p.do(chromedp.SendKeys(chromedp.CSS("#member-id"), member+kb.Enter))
	p.waitFor("signed in", fmt.Sprintf(`sessionStorage.getItem("orderflow.member") === %q && document.querySelector("#view-login").hidden`, member))
}

// taskDone waits until the task view shows a terminal status.
func (p *page) taskDone() string {
	p.t.Helper()
	p.waitFor("terminal task", `["Succeeded","Failed","Cancelled"].includes(document.querySelector("#task-badge").textContent)`)
	return p.text("#task-badge")
}

// submitSample submits the prefilled sample order with a click and returns
// the task id.
func (p *page) submitSample() string {
	p.t.Helper()
	p.waitFor("split form", `!document.querySelector("#view-split").hidden && document.querySelectorAll("#items tr").length > 0`)
	p.do(chromedp.Click(chromedp.CSS("#submit-split")))
	p.waitFor("task view", `!document.querySelector("#view-task").hidden && document.querySelector("#task-id").textContent !== ""`)
	return p.text("#task-id")
}

// needs fails the test unless the stack runs every named service: a
// missing service is a broken build, not a reason to skip.
func needs(t *testing.T, st *stacktest.Stack, names ...string) {
	t.Helper()
	for _, n := range names {
		if !st.Has(n) {
			t.Fatalf("the stack does not run service %s", n)
		}
	}
}

// TestPage drives the web page in headless Chromium against a whole stack.
func TestPage(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	st := stacktest.Start(t, stacktest.Options{})
	b := newBrowser(t)
	base := st.URL(stacktest.Gateway)
	needs(t, st, stacktest.SplitWorker, stacktest.Fulfilment, stacktest.Reconciler, stacktest.PaySim)
	var taskOfA string

	t.Run("KeyboardSubmitAndResult", func(t *testing.T) {
		p := b.tab(t, base)
		p.open("?pollMs=200", "")
		p.shot("00-sign-in")
		p.signIn("member-a")
		p.waitFor("split form", `!document.querySelector("#view-split").hidden && document.querySelectorAll("#items tr").length === 6`)
		p.shot("01-split-form")
		// Tab from the order code to the submit button, then press Enter.
		p.do(chromedp.Focus(chromedp.CSS("#order-code")))
		for i := 0; ; i++ {
			if eval[string](p, `document.activeElement.id`) == "submit-split" {
				break
			}
			if i == 60 {
				t.Fatalf("Tab never reached the submit button; focus is on %s", eval[string](p, `document.activeElement.outerHTML`))
			}
			p.do(chromedp.KeyEvent(kb.Tab))
		}
		p.screenshot("01-keyboard-focus", chromedp.CaptureScreenshot())
		// Record every status the badge shows.
		p.do(chromedp.Evaluate[chromedp.Void](`window.__badges = [];
			new MutationObserver(() => __badges.push(document.querySelector("#task-badge").textContent))
				.observe(document.querySelector("#task-badge"), {childList: true, characterData: true, subtree: true});`))
		p.do(chromedp.KeyEvent(kb.Enter))
		p.waitFor("task view", `!document.querySelector("#view-task").hidden && document.querySelector("#task-id").textContent !== ""`)
		taskOfA = p.text("#task-id")
		p.shot("02-submitted")
		if got := p.taskDone(); got != "Succeeded" {
			t.Fatalf("final badge = %q, want Succeeded\npage: %s", got, p.state())
		}
		if got := eval[[]string](p, `__badges`); len(got) == 0 || got[0] != "Processing" {
			t.Errorf("badge history = %q, want it to start with Processing", got)
		}
		stats := eval[[]string](p, `[...document.querySelectorAll("#task-summary .stat-value")].map(e => e.textContent)`)
		if want := []string{"6", "4", "2"}; strings.Join(stats, ",") != strings.Join(want, ",") {
			t.Errorf("summary (items, succeeded, failed) = %v, want %v", stats, want)
		}
		fails := eval[[]string](p, `[...document.querySelectorAll("#failures tr")].map(r => r.cells[0].textContent + "=" + r.cells[1].textContent)`)
		if want := "A4=10002,A5=10004"; strings.Join(fails, ",") != want {
			t.Errorf("failed items = %v, want %s", fails, want)
		}
		ships := eval[[]string](p, `[...document.querySelectorAll("#shipments tr")].map(r => r.cells[1].textContent)`)
		if len(ships) < 2 || !strings.Contains(strings.Join(ships, ","), "WH-BEIJING") || !strings.Contains(strings.Join(ships, ","), "WH-SHANGHAI") {
			t.Errorf("shipment warehouses = %v, want WH-BEIJING and WH-SHANGHAI", ships)
		}
		if eval[bool](p, `document.querySelector("#bill-dialog").open`) {
			t.Error("bill dialog is open for a member without an unpaid bill")
		}
		p.shot("03-result-with-failures")
	})

	t.Run("WatchStream", func(t *testing.T) {
		p := b.tab(t, base)
		p.open("?follow=watch&pollMs=60000", "")
		p.signIn("member-w")
		p.submitSample()
		// Polling every minute would not get there in time: the stream does.
		if got := p.taskDone(); got != "Succeeded" {
			t.Fatalf("final badge = %q, want Succeeded", got)
		}
		if got := eval[int](p, `document.querySelectorAll("#failures tr").length`); got != 2 {
			t.Errorf("failed items shown = %d, want 2", got)
		}
	})

	t.Run("InvalidFieldNamed", func(t *testing.T) {
		p := b.tab(t, base)
		p.open("", "")
		p.signIn("member-a")
		p.waitFor("split form", `document.querySelectorAll("#items tr").length === 6`)
		p.setValue(`#items tr:nth-child(2) .in-qty`, "0")
		p.do(chromedp.Click(chromedp.CSS("#submit-split")))
		p.waitFor("field error", `!document.querySelector("#split-error").hidden`)
		if got := p.text("#split-error"); !strings.Contains(got, "items[1].quantity") {
			t.Errorf("error = %q, want it to name items[1].quantity", got)
		}
		if got := eval[string](p, `document.activeElement.dataset.field + ":" + document.activeElement.getAttribute("aria-invalid")`); got != "items[1].quantity:true" {
			t.Errorf("focused field = %q, want the invalid quantity", got)
		}
	})

	t.Run("OtherMembersTaskRefused", func(t *testing.T) {
		if taskOfA == "" {
			t.Fatal("no task of member A: KeyboardSubmitAndResult failed")
		}
		p := b.tab(t, base)
		// Open the task link before signing in: the page asks for a sign-in
		// and then opens the link.
		p.open("?pollMs=200", "#/task/"+taskOfA)
		p.signIn("member-b")
		p.waitFor("refusal", `!document.querySelector("#task-error").hidden`)
		if got, want := p.text("#task-error"), "does not exist or has expired"; !strings.Contains(got, want) {
			t.Errorf("message = %q, want it to contain %q", got, want)
		}
		if got := p.text("#task-badge"); got != "" {
			t.Errorf("badge = %q, want none", got)
		}
	})

	t.Run("BillUnpaidDialog", func(t *testing.T) {
		p := b.tab(t, base)
		p.open("?pollMs=200", "")
		p.signIn("member-unpaid")
		p.waitFor("split form", `document.querySelectorAll("#items tr").length === 6`)
		p.do(chromedp.Click(chromedp.CSS("#add-item")))
		p.waitFor("new row", `document.querySelectorAll("#items tr").length === 7 && document.activeElement.classList.contains("in-sku")`)
		p.do(chromedp.KeyEvent("SKU-GIFT-CARD"))
		p.submitSample()
		p.taskDone()
		p.waitFor("dialog", `document.querySelector("#bill-dialog").open`)
		p.shot("04-bill-unpaid-dialog")
		if got := eval[string](p, `document.activeElement.id`); got != "bill-go" {
			t.Errorf("focus in dialog = %q, want bill-go", got)
		}
		fails := eval[[]string](p, `[...document.querySelectorAll("#failures tr")].map(r => r.cells[0].textContent + "=" + r.cells[1].textContent)`)
		if !strings.Contains(strings.Join(fails, ","), "A7=10001") {
			t.Errorf("failed items = %v, want A7=10001 among them", fails)
		}
		p.do(chromedp.KeyEvent(kb.Escape))
		p.waitFor("dialog closed by Esc", `!document.querySelector("#bill-dialog").open`)
	})

	t.Run("History", func(t *testing.T) {
		if taskOfA == "" {
			t.Fatal("no task of member A: KeyboardSubmitAndResult failed")
		}
		p := b.tab(t, base)
		p.open("?pollMs=200", "")
		p.signIn("member-a")
		p.do(chromedp.Click(chromedp.CSS(`#nav a[data-view="history"]`)))
		sel := fmt.Sprintf(`#history tr[data-task-id=%q]`, taskOfA)
		p.waitFor("history row", fmt.Sprintf(`document.querySelector(%q)`, sel))
		p.shot("05-history")
		p.do(chromedp.Click(chromedp.CSS(sel + " a")))
		p.waitFor("task opened", fmt.Sprintf(`document.querySelector("#task-id").textContent === %q && document.querySelector("#task-badge").textContent !== ""`, taskOfA))
	})

	t.Run("Docs", func(t *testing.T) {
		p := b.tab(t, base)
		p.do(chromedp.Navigate(base + "/docs"))
		p.waitFor("operations", `document.querySelectorAll(".op").length >= 6`)
		for _, want := range []string{"/v1/order-splits", "/v1/tasks/{taskId}", "v1Task", "items"} {
			if got := eval[string](p, `document.querySelector("main").innerText`); !strings.Contains(got, want) {
				t.Errorf("docs do not mention %q", want)
			}
		}
		p.screenshot("06-docs", chromedp.CaptureScreenshot()) // the viewport: the page is long
	})

	t.Run("PollingLimitAndCancel", func(t *testing.T) {
		st.Stop(stacktest.SplitWorker)
		defer st.Start(stacktest.SplitWorker)
		p := b.tab(t, base)
		p.open("?pollMs=100&pollTries=5", "")
		p.signIn("member-c")
		id := p.submitSample()
		p.waitFor("polling limit", `document.querySelector("#task-status").textContent.includes("Still processing")`)
		if got, want := p.text("#task-status"), "Still processing — check your task history later."; got != want {
			t.Errorf("status = %q, want %q", got, want)
		}
		p.shot("07-polling-limit")
		p.do(chromedp.Click(chromedp.CSS(`#nav a[data-view="history"]`)))
		row := fmt.Sprintf(`#history tr[data-task-id=%q]`, id)
		p.waitFor("history row", fmt.Sprintf(`document.querySelector(%q + " button.danger")`, row))
		p.do(chromedp.Click(chromedp.CSS(row + " button.danger")))
		p.waitFor("cancelled", fmt.Sprintf(`document.querySelector(%q)?.textContent.includes("Cancelled")`, row))
	})

	t.Run("ConnectionLost", func(t *testing.T) {
		p := b.tab(t, base)
		p.open("?pollMs=300", "")
		p.signIn("member-d")
		p.waitFor("split form", `document.querySelectorAll("#items tr").length === 6`)
		st.Kill(stacktest.Gateway)
		restarted := false
		defer func() {
			if !restarted {
				st.Start(stacktest.Gateway)
			}
		}()
		p.do(chromedp.Click(chromedp.CSS("#submit-split")))
		p.waitFor("lost connection message", `!document.querySelector("#split-error").hidden && !document.querySelector("#banner").hidden`)
		if got := p.text("#split-error"); !strings.Contains(got, "Lost connection") {
			t.Errorf("error = %q, want a lost-connection message", got)
		}
		p.shot("08-connection-lost")
		st.Start(stacktest.Gateway)
		restarted = true
		p.do(chromedp.Click(chromedp.CSS("#submit-split")))
		p.waitFor("task view after reconnect", `!document.querySelector("#view-task").hidden && document.querySelector("#banner").hidden`)
	})

	t.Run("Payments", func(t *testing.T) {
		p := b.tab(t, base)
		p.open("?payPollMs=300", "")
		p.signIn("member-a")
		p.do(chromedp.Click(chromedp.CSS(`#nav a[data-view="payments"]`)))
		p.waitFor("payments view", `!document.querySelector("#view-payments").hidden`)
		code := eval[string](p, `document.querySelector("#pay-order").value`)
		p.do(chromedp.Click(chromedp.CSS("#pay-submit")))
		p.waitFor("payment shown", `!document.querySelector("#payment").hidden && document.querySelector("#payment-code").textContent !== ""`)
		if got := p.text("#payment-badge"); got != "Unpaid" {
			t.Errorf("badge = %q, want Unpaid", got)
		}
		// The code_url is shown as a QR code image (not as text) that
		// decodes back to the payment's code_url.
		p.waitFor("QR code shown", `(() => { const i = document.querySelector("#payment-qr-img");
			return !document.querySelector("#payment-qr").hidden && i.complete && i.naturalWidth > 0; })()`)
		if strings.Contains(p.text("#payment"), "weixin://") {
			t.Error("the payment view shows the code_url as text")
		}
		src := eval[string](p, `document.querySelector("#payment-qr-img").src`)
		png, ok := strings.CutPrefix(src, "data:image/png;base64,")
		if !ok {
			t.Fatalf("QR image src = %.40q…, want a data:image/png URL", src)
		}
		data, err := base64.StdEncoding.DecodeString(png)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := qrtest.Decode(t, data), paymentCodeURL(t, st, eval[string](p, `sessionStorage.getItem("orderflow.token")`), code); got != want || !strings.HasPrefix(got, "weixin://") {
			t.Errorf("QR code decodes to %q, want the payment's code_url %q", got, want)
		}
		// The shopper pays; the callback is lost, so the reconciler's
		// query finds it.
		resp, err := http.Post(st.URL(stacktest.PaySim)+"/admin/orders/"+wechatpay.OutTradeNo("member-a", code)+"/pay?notify=false", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("pay %s: %s", code, resp.Status)
		}
		p.waitFor("paid", `document.querySelector("#payment-badge").textContent === "Paid"`)
		p.waitFor("QR code hidden once paid", `document.querySelector("#payment-qr").hidden`)
		if n := eval[int](p, `document.querySelectorAll("#attempts tr:not(:has(.empty))").length`); n < 1 {
			t.Errorf("attempts shown = %d, want at least 1", n)
		}
		p.shot("09-payments")
	})
	// Every call the page made is one the contract describes.
	checkCallsInContract(t, st, 8)
}

// paymentCodeURL reads a payment's code_url through the REST API.
func paymentCodeURL(t *testing.T, st *stacktest.Stack, token, code string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, st.URL(stacktest.Gateway)+"/v1/payments/"+code, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		CodeURL string `json:"codeUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET payment %s: %s, %v", code, resp.Status, err)
	}
	return got.CodeURL
}
