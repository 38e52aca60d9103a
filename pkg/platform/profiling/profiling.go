// Package profiling serves the Go runtime's profiles (net/http/pprof) on a
// service's admin port, behind the admin credentials.
package profiling

import (
	"net/http"
	"net/http/pprof"
)

// Register adds /debug/pprof/ (the index and every named profile: heap,
// goroutine, block, mutex, allocs, threadcreate), /debug/pprof/cmdline,
// /debug/pprof/profile (CPU), /debug/pprof/symbol and /debug/pprof/trace
// to mux, each wrapped in guard (auth.AdminOnly on every service).
func Register(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	mux.Handle("GET /debug/pprof/", guard(http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/cmdline", guard(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("GET /debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("POST /debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("GET /debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace)))
}
