package httpapi

import (
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the REST API's spans.
const tracerName = "github.com/orderflow/orderflow/services/gateway/internal/httpapi"

// serverSpan gives every REST call a server span under the caller's
// traceparent when it sends one (the global propagator), else in a new
// trace: its trace id goes to the logs and the job's headers. The span
// is named "<method> /v1" until observe renames it after the matched
// route. A recording (sampled) span also gets the request's method, path,
// scheme, client address and user agent, the answer's status code, and an
// error status for answers of 500 and above.
//
// otelhttp's handler did this and also built the attribute set of its
// HTTP server metrics on every request (about 6 µs of a status read's
// CPU), for a meter provider the gateway never sets: its metrics are
// Prometheus's (observe).
func serverSpan(next http.Handler) http.Handler {
	tracer := otel.Tracer(tracerName)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method+" /v1", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		r = r.WithContext(ctx)
		if !span.IsRecording() {
			next.ServeHTTP(w, r)
			return
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path),
			semconv.URLScheme(scheme), semconv.ClientAddress(r.RemoteAddr), semconv.UserAgentOriginal(r.UserAgent()))
		ww := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(ww, r)
		span.SetAttributes(semconv.HTTPResponseStatusCode(ww.code))
		if ww.code >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(ww.code))
		}
	})
}
