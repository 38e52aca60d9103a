// Package probe answers the orchestrator's health probes so that a
// dependency outage takes replicas out of rotation without restarting
// them: liveness (/livez) says only that the process serves requests and
// never looks at Redis or RabbitMQ; readiness (/readyz, and /healthz as
// its alias) runs the dependency checks and fails once shutdown has begun,
// when the gRPC health service also turns NOT_SERVING. On a public port
// (see Private) readiness answers its status only: which dependency failed
// and why goes to the log and to the callers the service trusts.
package probe

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
)

// Check reports whether one dependency answers.
type Check func(ctx context.Context) error

// checkTimeout bounds one readiness probe's checks.
const checkTimeout = 2 * time.Second

// Probes holds a service's readiness checks and shutdown state.
type Probes struct {
	checks   map[string]Check
	health   *health.Server
	draining atomic.Bool

	// reveal, when set, decides which callers see the failed checks.
	reveal func(*http.Request) bool
	log    *slog.Logger
	mu     sync.Mutex
	logged string // the failures last logged
}

// Private makes readiness answer only its status ("ok", "unavailable" or
// "shutting down") unless reveal accepts the request (an operator's or a
// service's credentials): for a port the public reaches. The failed
// dependencies and their errors are logged (once per change) instead.
// It returns p.
func (p *Probes) Private(reveal func(*http.Request) bool, log *slog.Logger) *Probes {
	p.reveal, p.log = reveal, log
	return p
}

// New returns probes that run checks (by dependency name) for readiness.
// hs, when not nil, is the service's gRPC health server, turned
// NOT_SERVING by Drain.
func New(checks map[string]Check, hs *health.Server) *Probes {
	return &Probes{checks: checks, health: hs}
}

// Drain marks the service as shutting down: readiness fails from now on and
// every gRPC health status becomes NOT_SERVING.
func (p *Probes) Drain() {
	p.draining.Store(true)
	if p.health != nil {
		p.health.Shutdown()
	}
}

// DrainOnDone calls Drain as soon as ctx ends (the start of shutdown). The
// returned function cancels that.
func (p *Probes) DrainOnDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, p.Drain)
}

// Register adds GET /livez, /readyz and /healthz (the same as /readyz) to mux.
func (p *Probes) Register(mux *http.ServeMux) {
	mux.Handle("GET /livez", p.Live())
	mux.Handle("GET /readyz", p.Ready())
	mux.Handle("GET /healthz", p.Ready())
}

// Live answers 200 while the process serves HTTP; it checks no dependency.
func (p *Probes) Live() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
}

// Ready answers 200 when every check passes, and 503 naming the failed
// dependencies, or "shutting down" once Drain has been called.
func (p *Probes) Ready() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.draining.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "shutting down"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		failed := map[string]string{}
		for name, check := range p.checks {
			if err := check(ctx); err != nil {
				failed[name] = err.Error()
			}
		}
		p.logChange(failed)
		if len(failed) > 0 {
			body := map[string]any{"status": "unavailable"}
			if p.reveal == nil || p.reveal(r) {
				body["failed"] = failed
			}
			writeJSON(w, http.StatusServiceUnavailable, body)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
}

// logChange logs the failed checks of a private probe when they differ
// from the last ones logged (a probe polled every few seconds during an
// outage logs once, and once more when it is over).
func (p *Probes) logChange(failed map[string]string) {
	if p.log == nil {
		return
	}
	names := make([]string, 0, len(failed))
	for name, err := range failed {
		names = append(names, name+": "+err)
	}
	sort.Strings(names)
	now := strings.Join(names, "; ")
	p.mu.Lock()
	changed := now != p.logged
	p.logged = now
	p.mu.Unlock()
	switch {
	case !changed:
	case now == "":
		p.log.Info("readiness restored")
	default:
		p.log.Warn("not ready: dependency check failed", "failed", now)
	}
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
