package browser_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// TestOpsCharts drives the operations page's rates charts in headless
// Chromium while orders are submitted: the six charts (submitted,
// finished, failed, dead-lettered per minute, slot utilisation, check
// lateness) draw the last hour from GET /v1/ops/rates, uPlot served by
// the gateway, and the counts reach the orders submitted.
func TestOpsCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test; skipped with -short")
	}
	st := stacktest.Start(t, stacktest.Options{ServiceEnv: map[string]map[string]string{
		stacktest.Gateway: {"ORDERFLOW_OPS_SAMPLE_INTERVAL": "1s"},
	}})
	needs(t, st, stacktest.SplitWorker, stacktest.Fulfilment, stacktest.Reconciler)
	b := newBrowser(t)
	base := st.URL(stacktest.Gateway)
	member := st.DevToken(t, "member-charts")

	// Load: orders submitted over a few seconds, beside the page.
	const orders = 40
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range orders {
			body := fmt.Sprintf(`{"orderCode":"ORD-CH-%d","items":[{"itemCode":"A1","sku":"SKU-TEA-500G","quantity":%d}]}`, i, 1+i%3)
			req, _ := http.NewRequest("POST", base+"/v1/order-splits", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+member)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("POST /v1/order-splits = %d, want 200", resp.StatusCode)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	defer wg.Wait()

	p := b.tab(t, base)
	p.do(chromedp.Navigate(base + "/ops?refreshMs=1000"))
	p.waitFor("sign-in", `!document.querySelector("#view-login").hidden`)
	p.do(chromedp.Focus(chromedp.CSS("#operator-id")), chromedp.KeyEvent(kb.Enter))
	p.waitFor("charts drawn", `document.querySelectorAll("#charts figure.chart canvas").length === 6`)
	wg.Wait()
	total := func(series string) string {
		return fmt.Sprintf(`Number(document.querySelector('#charts figure[data-series=%q]').dataset.total || 0)`, series)
	}
	p.waitFor("every order counted", total("submitted")+` >= `+strconv.Itoa(orders)+` && `+total("finished")+` >= `+strconv.Itoa(orders))
	p.waitFor("gauges sampled", `["slotUtilisation", "checkLatenessSeconds"].every(s => Number(document.querySelector('#charts figure[data-series="' + s + '"]').dataset.points) > 0)`)

	charts := eval[[]map[string]any](p, `[...document.querySelectorAll("#charts figure.chart")].map(f => {
		const c = f.querySelector("canvas");
		return {series: f.dataset.series, total: f.dataset.total ?? "", points: Number(f.dataset.points), width: c.width, height: c.height,
			summary: f.querySelector(".chart-summary").textContent};
	})`)
	want := []string{"submitted", "finished", "failed", "deadLettered", "slotUtilisation", "checkLatenessSeconds"}
	if len(charts) != len(want) {
		t.Fatalf("charts = %v, want %d", charts, len(want))
	}
	for i, c := range charts {
		if c["series"] != want[i] || c["width"].(float64) < 200 || c["height"].(float64) < 100 || c["summary"] == "" {
			t.Errorf("chart %d = %v, want %s drawn at least 200×100 with its summary", i, c, want[i])
		}
	}
	for _, c := range charts[:4] {
		if c["points"].(float64) != 60 {
			t.Errorf("chart %s has %v points, want 60 (every minute of the hour)", c["series"], c["points"])
		}
	}
	if got := charts[0]["total"]; got != strconv.Itoa(orders) {
		t.Errorf("submitted in the hour = %v, want %d", got, orders)
	}
	if n := eval[int](p, `performance.getEntriesByType("resource").filter(e => !e.name.startsWith(location.origin)).length`); n != 0 {
		t.Errorf("the page loaded %d resources from another origin, want none", n)
	}
	p.do(chromedp.ScrollIntoView(chromedp.CSS("#charts")))
	p.screenshot("ops-07-charts", chromedp.Screenshot(chromedp.CSS("#charts")))
	p.shot("ops-08-page-with-charts")
}
