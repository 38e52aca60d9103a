package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/otlptest"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TestServerSpanContinuesTheCallersTrace: a REST call's server span
// continues the caller's traceparent (sampled: recorded with the
// request's attributes and the answer's code, an error status for a 500;
// not sampled: a trace id for the logs, nothing recorded) and starts a
// trace of its own without one.
func TestServerSpanContinuesTheCallersTrace(t *testing.T) {
	rec := otlptest.Record(t)

	var seen trace.SpanContext
	h := serverSpan(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = trace.SpanContextFromContext(r.Context())
		if r.URL.Path == "/v1/broken" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		path, traceparent string
		wantCode          int
		wantRecorded      bool
	}{
		{"/v1/tasks/t-1", "00-" + traceID + "-" + parentID + "-01", http.StatusOK, true},
		{"/v1/broken", "00-" + traceID + "-" + parentID + "-01", http.StatusInternalServerError, true},
		{"/v1/tasks/t-2", "00-" + traceID + "-" + parentID + "-00", http.StatusOK, false},
		{"/v1/tasks/t-3", "", http.StatusOK, false},
	} {
		rec.Reset()
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.traceparent != "" {
			req.Header.Set("traceparent", tc.traceparent)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.wantCode {
			t.Errorf("GET %s = %d, want %d", tc.path, w.Code, tc.wantCode)
		}
		if !seen.IsValid() {
			t.Errorf("GET %s: the handler saw no span context, want one (its trace id goes to the logs)", tc.path)
		}
		if continued := seen.TraceID().String() == traceID; continued != (tc.traceparent != "") {
			t.Errorf("GET %s (traceparent %q): trace id %s, want the caller's only when it sent one", tc.path, tc.traceparent, seen.TraceID())
		}
		ended := rec.Ended()
		if !tc.wantRecorded {
			if len(ended) != 0 {
				t.Errorf("GET %s (not sampled): %d spans recorded, want none", tc.path, len(ended))
			}
			continue
		}
		if len(ended) != 1 {
			t.Fatalf("GET %s: %d spans recorded, want 1", tc.path, len(ended))
		}
		s := ended[0]
		if s.Name() != "GET /v1" || s.SpanKind() != trace.SpanKindServer || s.Parent().SpanID().String() != parentID {
			t.Errorf("GET %s: span %q kind %v parent %s; want \"GET /v1\", server, %s", tc.path, s.Name(), s.SpanKind(), s.Parent().SpanID(), parentID)
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["http.request.method"] != "GET" || attrs["url.path"] != tc.path || attrs["http.response.status_code"] != strconv.Itoa(tc.wantCode) {
			t.Errorf("GET %s: span attributes %v, want its method, path and status code", tc.path, attrs)
		}
		if wantErr := tc.wantCode >= 500; (s.Status().Code == otelcodes.Error) != wantErr {
			t.Errorf("GET %s: span status %v, want error %v", tc.path, s.Status(), wantErr)
		}
	}
}
