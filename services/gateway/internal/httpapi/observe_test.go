package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestObserveRecoversAPanic checks what REST calls get that the gRPC
// interceptors give gRPC calls: a panicking handler answers 500 with a
// google.rpc.Status, is counted in the RED metrics and logged (the panic
// and the access line), and the server goes on serving.
func TestObserveRecoversAPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := newRESTMetrics(reg)
	h := observe(m, log)(func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		if r.URL.Path == "/boom" {
			panic("boom")
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for _, tc := range []struct {
		path string
		want int
	}{{"/boom", http.StatusInternalServerError}, {"/ok", http.StatusNoContent}} {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, tc.path, nil), nil)
		if rec.Code != tc.want {
			t.Errorf("POST %s = %d, want %d", tc.path, rec.Code, tc.want)
		}
		if tc.want == http.StatusInternalServerError {
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Code != 13 || st.Message != "internal error" {
				t.Errorf("POST %s body = %s, want a google.rpc.Status INTERNAL without the panic's text", tc.path, rec.Body)
			}
		}
	}
	for _, code := range []string{"500", "204"} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("POST", "", code)); got != 1 {
			t.Errorf("orderflow_http_requests_total{code=%q} = %v, want 1", code, got)
		}
	}
	for _, want := range []string{`"msg":"panic in REST handler"`, `"panic":"boom"`, `"msg":"http request"`, `"code":500`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}
