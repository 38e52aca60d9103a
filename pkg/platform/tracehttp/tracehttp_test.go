package tracehttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/otlptest"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TestTransportTracesCalls: a call's client span is a child of the
// request's context, named by the caller, and its trace context reaches
// the server (sampled: recorded with method, URL, server and status code,
// an error status for a 500 or a failed call; not sampled: the trace
// context still sent, nothing recorded); the caller's request is left as
// it was.
func TestTransportTracesCalls(t *testing.T) {
	rec := otlptest.Record(t)

	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		if strings.HasPrefix(r.URL.Path, "/broken") {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: Transport(http.DefaultTransport, func(r *http.Request) string { return r.Method + " /things/{id}" })}

	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	parentID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, tc := range []struct {
		path       string
		sampled    bool
		wantStatus otelcodes.Code
	}{
		{"/things/1?x=1", true, otelcodes.Unset},
		{"/broken/2", true, otelcodes.Error},
		{"/things/3", false, otelcodes.Unset},
	} {
		rec.Reset()
		flags := trace.TraceFlags(0)
		if tc.sampled {
			flags = trace.FlagsSampled
		}
		ctx := trace.ContextWithRemoteSpanContext(context.Background(),
			trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: parentID, TraceFlags: flags, Remote: true}))
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(req.Header) != 0 {
			t.Errorf("GET %s: the caller's request got headers %v", tc.path, req.Header)
		}
		sent := <-got
		if !strings.HasPrefix(sent, "00-"+traceID.String()+"-") || strings.Contains(sent, parentID.String()) {
			t.Errorf("GET %s: traceparent %q, want the caller's trace with the client span's id", tc.path, sent)
		}
		ended := rec.Ended()
		if !tc.sampled {
			if len(ended) != 0 {
				t.Errorf("GET %s (not sampled): %d spans recorded, want none", tc.path, len(ended))
			}
			continue
		}
		if len(ended) != 1 {
			t.Fatalf("GET %s: %d spans recorded, want 1", tc.path, len(ended))
		}
		s := ended[0]
		if s.Name() != "GET /things/{id}" || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parentID {
			t.Errorf("GET %s: span %q kind %v parent %s; want \"GET /things/{id}\", client, %s", tc.path, s.Name(), s.SpanKind(), s.Parent().SpanID(), parentID)
		}
		if !strings.HasSuffix(sent, s.SpanContext().SpanID().String()+"-01") {
			t.Errorf("GET %s: traceparent %q does not carry the client span %s", tc.path, sent, s.SpanContext().SpanID())
		}
		if s.Status().Code != tc.wantStatus {
			t.Errorf("GET %s: span status %v, want %v", tc.path, s.Status(), tc.wantStatus)
		}
		attrs := otlptest.SpanAttrs(s)
		host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
		if attrs["http.request.method"] != "GET" || attrs["url.full"] != srv.URL+tc.path || attrs["server.address"] != host || attrs["server.port"] != port {
			t.Errorf("GET %s: span attributes %v, want method, url.full, server.address and server.port", tc.path, attrs)
		}
		if want := map[bool]string{true: "500", false: "200"}[tc.wantStatus == otelcodes.Error]; attrs["http.response.status_code"] != want {
			t.Errorf("GET %s: http.response.status_code %q, want %s", tc.path, attrs["http.response.status_code"], want)
		}
	}

	// A call that fails: recorded as an error.
	rec.Reset()
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: parentID, TraceFlags: trace.FlagsSampled, Remote: true}))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/things/4", nil)
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("GET on a closed port succeeded")
	}
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Status().Code != otelcodes.Error {
		t.Errorf("failed call: spans %v, want one with an error status", ended)
	}
}
