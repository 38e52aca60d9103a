package stacktest_test

import (
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Main(m)) }

func healthz(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStackLifecycle starts two gateway instances, then kills, restarts
// and stops the first, checking that it answers exactly while it runs.
func TestStackLifecycle(t *testing.T) {
	avail, err := stacktest.Available()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(avail, stacktest.Gateway) {
		t.Fatalf("Available() = %v, want it to contain %q", avail, stacktest.Gateway)
	}
	s := stacktest.Start(t, stacktest.Options{
		Services:   []string{stacktest.Gateway},
		Replicas:   map[string]int{stacktest.Gateway: 2},
		ServiceEnv: map[string]map[string]string{"gateway-2": {"ORDERFLOW_GATEWAY_MAX_ITEMS": "7"}},
	})
	if got, want := s.Names(), []string{"gateway", "gateway-2"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	if got := s.Env("gateway-2", "ORDERFLOW_GATEWAY_MAX_ITEMS"); got != "7" {
		t.Errorf("Env(gateway-2, ORDERFLOW_GATEWAY_MAX_ITEMS) = %q, want 7", got)
	}
	if got := s.Env(stacktest.Gateway, "ORDERFLOW_GATEWAY_MAX_ITEMS"); got != "" {
		t.Errorf("Env(gateway, ORDERFLOW_GATEWAY_MAX_ITEMS) = %q, want unset", got)
	}
	if got := healthz(t, s.URL("gateway-2")); got != http.StatusOK {
		t.Fatalf("GET gateway-2 /healthz = %d, want 200", got)
	}
	url := s.URL(stacktest.Gateway)
	if got := healthz(t, url); got != http.StatusOK {
		t.Fatalf("GET /healthz = %d, want 200", got)
	}
	if got := s.Env(stacktest.Gateway, "ORDERFLOW_REDIS_PREFIX"); got != s.Prefix() {
		t.Errorf("Env(ORDERFLOW_REDIS_PREFIX) = %q, want %q", got, s.Prefix())
	}
	if tok := s.DevToken(t, "member-1"); tok == "" {
		t.Error("DevToken() is empty")
	}
	// Each gateway instance has its own admin port with /metrics.
	if a, b := s.MetricsURL("gateway"), s.MetricsURL("gateway-2"); a == b {
		t.Errorf("MetricsURL is %s for both instances", a)
	}
	for _, n := range s.Names() {
		resp, err := s.GetMetrics(n)
		if err != nil {
			t.Fatalf("GET %s /metrics: %v", n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s %s = %d, want 200", n, s.MetricsURL(n), resp.StatusCode)
		}
	}
	s.Kill(stacktest.Gateway)
	if s.Running(stacktest.Gateway) {
		t.Fatal("Running() after Kill = true, want false")
	}
	if got := healthz(t, url); got != 0 {
		t.Fatalf("GET /healthz after Kill = %d, want no answer", got)
	}
	s.Start(stacktest.Gateway)
	if got := healthz(t, url); got != http.StatusOK {
		t.Fatalf("GET /healthz after Start = %d, want 200", got)
	}
	s.Stop(stacktest.Gateway)
	if s.Running(stacktest.Gateway) {
		t.Fatal("Running() after Stop = true, want false")
	}
}
