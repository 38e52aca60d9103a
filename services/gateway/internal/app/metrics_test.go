package app

import (
	"testing"

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
	fams := promcheck.Service(t, s.addrs.HTTP)
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
