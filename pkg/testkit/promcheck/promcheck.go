// Package promcheck scrapes a Prometheus endpoint in tests, fails the test
// on any problem the Prometheus linter (promlint) reports, and returns the
// parsed metric families for assertions.
package promcheck

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape GETs url (a /metrics endpoint) with token as its bearer token
// (none when empty), reports every lint problem as a test error and
// returns the metric families by name.
func Scrape(t testing.TB, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d, %v", url, resp.StatusCode, err)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("lint %s: %v", url, err)
	}
	for _, p := range problems {
		t.Errorf("%s: metric %s: %s", url, p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// Value returns the value of the counter, gauge or untyped sample of
// family name whose labels include want, and whether there is one.
func Value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// standardPrefixes are the metric families that keep their libraries'
// standard names: the Go runtime and process collectors and the gRPC
// server metrics of go-grpc-middleware.
var standardPrefixes = []string{"go_", "process_", "grpc_", "promhttp_"}

// Service scrapes an orderflow service's /metrics at httpAddr (host:port)
// with token, the scrape token (empty for the simulators, which serve
// their metrics openly), lints it, and checks that orderflow_build_info is there and that every
// other family is named orderflow_… or keeps a standard library name.
func Service(t testing.TB, httpAddr, token string) map[string]*dto.MetricFamily {
	t.Helper()
	fams := Scrape(t, "http://"+httpAddr+"/metrics", token)
	if v, ok := Value(fams, "orderflow_build_info", nil); !ok || v != 1 {
		t.Errorf("orderflow_build_info = %v (present %v), want 1", v, ok)
	}
next:
	for name := range fams {
		if strings.HasPrefix(name, "orderflow_") {
			continue
		}
		for _, p := range standardPrefixes {
			if strings.HasPrefix(name, p) {
				continue next
			}
		}
		t.Errorf("metric %s is not named orderflow_…", name)
	}
	return fams
}
