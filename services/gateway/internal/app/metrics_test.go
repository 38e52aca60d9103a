package app

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/promcheck"
)

// TestRESTHasREDMetricsByRoute checks that REST calls, which run in process
// without the gRPC interceptors, are counted and timed by route template
// and status code, and that the exposition passes the Prometheus linter.
func TestRESTHasREDMetricsByRoute(t *testing.T) {
	s := startGateway(t, nil)
	tok := s.token(t, "alice")
	if code, body := s.do(t, "POST", "/v1/order-splits", tok, goodOrder); code != 200 {
		t.Fatalf("submit = %d %v", code, body)
	}
	for range 2 {
		if code, _ := s.do(t, "GET", "/v1/tasks/no-such-task", tok, ""); code != 404 {
			t.Fatalf("GET unknown task = %d, want 404", code)
		}
	}
	fams := promcheck.Service(t, s.addrs.Admin, s.cfg.Metrics.Token.Reveal())
	for _, tc := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"method": "POST", "route": "/v1/order-splits", "code": "200"}, 1},
		{map[string]string{"method": "GET", "route": "/v1/tasks/{task_id}", "code": "404"}, 2},
	} {
		if got, _ := promcheck.Value(fams, "orderflow_http_requests_total", tc.labels); got != tc.want {
			t.Errorf("orderflow_http_requests_total%v = %v, want %v", tc.labels, got, tc.want)
		}
		delete(tc.labels, "code")
		if got, _ := promcheck.Value(fams, "orderflow_http_request_duration_seconds", tc.labels); got != tc.want {
			t.Errorf("orderflow_http_request_duration_seconds%v count = %v, want %v", tc.labels, got, tc.want)
		}
	}
}

// TestMetricsOnlyOnAdminPort: the public HTTP port (the one browsers reach)
// answers 404 for /metrics and the Go runtime's profiles, even to the
// gateway's service token; the admin port serves the orderflow_ metrics to the
// scrape token.
func TestMetricsOnlyOnAdminPort(t *testing.T) {
	s := startGateway(t, nil)
	get := func(url string) (int, string) {
		t.Helper()
		return apptest.Get(t, url, s.cfg.ReconcilerToken.Reveal())
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap?debug=1"} {
		if code, _ := get("http://" + s.addrs.HTTP + path); code != http.StatusNotFound {
			t.Errorf("public GET %s = %d, want 404", path, code)
		}
	}
	code, body := apptest.Get(t, "http://"+s.addrs.Admin+"/metrics", s.cfg.Metrics.Token.Reveal())
	if code != http.StatusOK || !strings.Contains(body, "orderflow_build_info") {
		t.Errorf("admin GET /metrics = %d, body %.200q; want 200 with orderflow_build_info", code, body)
	}
}

// TestMetricsNeedCredentials: the admin port serves /metrics to the
// scrape token or an admin token only.
func TestMetricsNeedCredentials(t *testing.T) {
	const scrape = "scrape-token-for-this-test-0123456789"
	s := startGateway(t, func(c *Config) { c.Metrics.Token = scrape })
	admin, err := auth.Issue(auth.Config{Secret: []byte(s.cfg.JWT.Secret.Reveal())}, "ops", time.Now(), time.Hour, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	apptest.MetricsNeedCredentials(t, "http://"+s.addrs.Admin+"/metrics", scrape, s.cfg.ReconcilerToken.Reveal(), admin, s.token(t, "alice"))
}
