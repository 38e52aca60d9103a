package e2e

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestBareLatenciesAreReadThroughTheWorkersBuckets checks the pickup
// benchmark's like-for-like reading: the bare consumer's latencies,
// counted into the buckets of the split-worker's histogram (bucketed),
// give the very quantiles that histogram gives when it observed the same
// latencies and was scraped from a /metrics page, and not the exact
// quantile of the samples, which linear interpolation in a bucket misses.
func TestBareLatenciesAreReadThroughTheWorkersBuckets(t *testing.T) {
	bounds := []float64{.00025, .0005, .00075, .001, .0015, .002, .003, .004, .005, .0075, .01}
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pickup_seconds", Buckets: bounds})
	reg.MustRegister(h)
	// A tail that thins out inside its bucket (2-3 ms), as pickup
	// latencies do: 985 of 0.8 ms, 10 of 2.05, 3 of 2.1, one of 2.9 and
	// one of 3.6 ms; the exact p99 is 2.05 ms, the interpolated one 2.36.
	var lat []time.Duration
	for _, n := range []struct {
		count int
		us    time.Duration
	}{{985, 800}, {10, 2050}, {3, 2100}, {1, 2900}, {1, 3600}} {
		for range n.count {
			lat = append(lat, n.us*time.Microsecond)
		}
	}
	for _, l := range lat {
		h.Observe(l.Seconds())
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	scraped := scrape(t, func() (*http.Response, error) { return http.Get(srv.URL) }, "pickup_seconds")

	got := bucketed(lat, scraped.bounds)
	if got.count != scraped.count {
		t.Fatalf("bucketed count = %v, the scraped histogram's %v", got.count, scraped.count)
	}
	for _, q := range []float64{0.5, 0.99} {
		if g, w := got.quantile(q), scraped.quantile(q); g != w {
			t.Errorf("bucketed quantile(%v) = %v s, the scraped histogram's %v s", q, g, w)
		}
	}
	exact := lat[len(lat)*99/100].Seconds()
	if p99 := got.quantile(0.99); p99 <= exact {
		t.Errorf("bucketed p99 = %v s, want it above the exact %v s (interpolation in a thinning bucket)", p99, exact)
	}
}
