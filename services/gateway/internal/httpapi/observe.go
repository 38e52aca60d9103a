package httpapi

import (
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
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

// routeCache remembers routeOf's templates by grpc-gateway pattern, so the
// regular expression runs once per route, not once per request.
type routeCache struct{ m sync.Map } // pattern string → template

// routeOf is the route template grpc-gateway matched, e.g.
// "/v1/tasks/{task_id}", or "" outside a matched route.
func (c *routeCache) routeOf(r *http.Request) string {
	p, ok := runtime.HTTPPattern(r.Context())
	if !ok {
		return ""
	}
	key := p.String()
	if route, ok := c.m.Load(key); ok {
		return route.(string)
	}
	route := capture.ReplaceAllString(key, "{$1}")
	c.m.Store(key, route)
	return route
}

// observe is the REST API's counterpart of the gRPC server's interceptors,
// which in-process REST calls do not pass through: it names the request's
// span by its route, recovers a panic into a 500, records the RED metrics
// and writes an access log line (debug level for answers below 500).
func observe(m *restMetrics, log *slog.Logger) runtime.Middleware {
	routes := &routeCache{}
	return func(next runtime.HandlerFunc) runtime.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
			route := routes.routeOf(r)
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + route)
			span.SetAttributes(semconv.HTTPRoute(route))
			start := time.Now()
			code, wrote := http.StatusOK, false
			ww := httpsnoop.Wrap(w, httpsnoop.Hooks{
				WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
					return func(c int) {
						if !wrote {
							code, wrote = c, true
						}
						next(c)
					}
				},
				Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
					return func(b []byte) (int, error) {
						wrote = true
						return next(b)
					}
				},
			})
			defer func() {
				if p := recover(); p != nil {
					log.ErrorContext(r.Context(), "panic in REST handler", "route", route, "panic", p, "stack", string(debug.Stack()))
					if !wrote {
						writeStatus(ww, http.StatusInternalServerError, status.Error(codes.Internal, "internal error"))
					}
					code = http.StatusInternalServerError
				}
				elapsed := time.Since(start)
				m.requests.WithLabelValues(r.Method, route, strconv.Itoa(code)).Inc()
				m.duration.WithLabelValues(r.Method, route).Observe(elapsed.Seconds())
				level := slog.LevelDebug
				if code >= 500 {
					level = slog.LevelWarn
				}
				log.Log(r.Context(), level, "http request", "method", r.Method, "route", route,
					"code", code, "duration_ms", float64(elapsed.Microseconds())/1000)
			}()
			next(ww, r, params)
		}
	}
}
