// Package tracehttp traces the calls an HTTP client sends: a client span
// per call, its trace context in the request's headers.
package tracehttp

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the HTTP client spans.
const tracerName = "github.com/orderflow/orderflow/pkg/platform/tracehttp"

// Transport gives every request sent through next a client span named
// name(request) (e.g. "GET /shipments/{jobId}") under the request's
// context, and sends its trace context along in the headers (the global
// propagator), so the called system can continue the trace. A recording
// (sampled) span also gets the method, URL (credentials redacted), server
// address and port, the answer's status code, and an error status for a
// failed call or an answer of 400 and above. The span ends when the
// answer's headers have arrived.
//
// otelhttp's transport did this and also built the attribute set of its
// HTTP client metrics on every call, for a meter provider the services
// never set (their metrics are Prometheus's): about a tenth of the
// split-worker's CPU per order.
func Transport(next http.RoundTripper, name func(*http.Request) string) http.RoundTripper {
	return &transport{next: next, name: name, tracer: otel.Tracer(tracerName)}
}

// defaultPorts are the ports of URLs that name none.
var defaultPorts = map[string]int{"http": 80, "https": 443}

type transport struct {
	next   http.RoundTripper
	name   func(*http.Request) string
	tracer trace.Tracer
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, span := t.tracer.Start(r.Context(), t.name(r), trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	r = r.Clone(ctx) // a RoundTripper must not change its caller's request
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(r.Header))
	if !span.IsRecording() {
		return t.next.RoundTrip(r)
	}
	span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLFull(r.URL.Redacted()), semconv.ServerAddress(r.URL.Hostname()))
	if port, err := strconv.Atoi(r.URL.Port()); err == nil {
		span.SetAttributes(semconv.ServerPort(port))
	} else if port, ok := defaultPorts[r.URL.Scheme]; ok {
		span.SetAttributes(semconv.ServerPort(port))
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= http.StatusBadRequest {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	return resp, nil
}
