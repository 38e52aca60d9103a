package httpapi

import (
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/orderflow/orderflow/pkg/platform/metrics"
)

// restMetrics are the REST API's RED metrics, by route template.
type restMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRESTMetrics(reg prometheus.Registerer) *restMetrics {
	m := &restMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "http", Name: "requests_total",
			Help: "REST requests answered, by method, route template and HTTP status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer a REST request, by method and route template (streams: until the stream ends).",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

// capture turns grpc-gateway's "{name=*}" captures into "{name}".
var capture = regexp.MustCompile(`\{([^}=]+)=[^}]*\}`)

// routeOnce is the route template of one registered grpc-gateway handler:
// grpc-gateway applies a middleware to each route's handler when the route
// is registered, and every request that handler serves matched the same
// pattern, so the template is worked out on its first request only (before,
// each request rendered its pattern to look the template up).
type routeOnce struct{ route atomic.Pointer[string] }

// of is the route template grpc-gateway matched, e.g.
// "/v1/tasks/{task_id}", or "" outside a matched route.
func (o *routeOnce) of(r *http.Request) string {
	if route := o.route.Load(); route != nil {
		return *route
	}
	p, ok := runtime.HTTPPattern(r.Context())
	if !ok {
		return ""
	}
	route := capture.ReplaceAllString(p.String(), "{$1}")
	o.route.Store(&route)
	return route
}

// statusWriter remembers the status code a handler answers with. Flushes
// and http.ResponseController calls reach the writer it wraps.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush flushes the wrapped writer (a server stream's messages).
func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError flushes the wrapped writer, as http.ResponseController does.
func (w *statusWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe is the REST API's counterpart of the gRPC server's interceptors,
// which in-process REST calls do not pass through: it names the request's
// span by its route, recovers a panic into a 500, records the RED metrics
// and writes an access log line (debug level for answers below 500).
func observe(m *restMetrics, log *slog.Logger) runtime.Middleware {
	return func(next runtime.HandlerFunc) runtime.HandlerFunc {
		routes := &routeOnce{}
		return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
			route := routes.of(r)
			// An unsampled span records nothing: skip building its name
			// and attribute.
			if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
				span.SetName(r.Method + " " + route)
				span.SetAttributes(semconv.HTTPRoute(route))
			}
			start := time.Now()
			ww := &statusWriter{ResponseWriter: w, code: http.StatusOK}
			defer func() {
				code := ww.code
				if p := recover(); p != nil {
					log.ErrorContext(r.Context(), "panic in REST handler", "route", route, "panic", p, "stack", string(debug.Stack()))
					if !ww.wrote {
						writeStatus(ww, http.StatusInternalServerError, status.Error(codes.Internal, "internal error"))
					}
					code = http.StatusInternalServerError
				}
				elapsed := time.Since(start)
				m.requests.WithLabelValues(r.Method, route, codeText(code)).Inc()
				m.duration.WithLabelValues(r.Method, route).Observe(elapsed.Seconds())
				level := slog.LevelDebug
				if code >= 500 {
					level = slog.LevelWarn
				}
				// The line's attributes are built only when it is written.
				if log.Enabled(r.Context(), level) {
					log.Log(r.Context(), level, "http request", "method", r.Method, "route", route,
						"code", code, "duration_ms", float64(elapsed.Microseconds())/1000)
				}
			}()
			next(ww, r, params)
		}
	}
}

// codeTexts are the status codes 0–599 as decimal text.
var codeTexts = func() (t [600]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

// codeText is code in decimal, the metrics' label value, without an
// allocation for the codes HTTP uses.
func codeText(code int) string {
	if code >= 0 && code < len(codeTexts) {
		return codeTexts[code]
	}
	return strconv.Itoa(code)
}
