// Package apptest runs a service's app.Run in process for a test, the way
// its main does: it waits for the ready signal, and when the test ends it
// cancels the context and checks that Run returned nil within the
// shutdown deadline.
package apptest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/serve"
)

// Run is the shape of every service's app.Run.
type Run[C any] func(ctx context.Context, cfg C, log *slog.Logger, ready serve.Ready) error

// Defaults loads C from the environment as main does (config.Load, with
// validation) with ORDERFLOW_ENV=development: with no other variables set,
// the defaults a development deployment starts with (development secrets
// filled in).
func Defaults[C any](t testing.TB) C {
	t.Helper()
	cfg, err := config.LoadEnv[C](map[string]string{config.EnvVar: string(config.Development)})
	if err != nil {
		t.Fatalf("config.Load() = %v", err)
	}
	return cfg
}

// Start runs run with cfg and a discarding logger in the background until the test ends and returns the
// addresses it reported as ready. The test fails if run returns before it
// is ready, is not ready within 30 s, returns an error at shutdown, or
// does not stop within serve.ShutdownTimeout (plus a margin) after its
// context ends.
func Start[C any](t testing.TB, run Run[C], cfg C) serve.Addrs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan serve.Addrs, 1)
	errc := make(chan error, 1)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	go func() { errc <- run(ctx, cfg, log, func(a serve.Addrs) { addrc <- a }) }()
	stop := func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run() after shutdown = %v, want nil", err)
			}
		case <-time.After(serve.ShutdownTimeout + 5*time.Second):
			t.Errorf("Run() did not return within %s of its context ending", serve.ShutdownTimeout+5*time.Second)
		}
	}
	select {
	case a := <-addrc:
		t.Cleanup(stop)
		return a
	case err := <-errc:
		cancel()
		t.Fatalf("Run() = %v before it was ready", err)
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("Run() was not ready within 30s")
	}
	return serve.Addrs{}
}

// Healthy fails the test unless GET http://<addr>/healthz answers 200.
func Healthy(t testing.TB, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", resp.StatusCode)
	}
}

// Invalid is one configuration a service must refuse to start with.
type Invalid struct {
	// Env are the variables set on top of the development defaults.
	Env map[string]string
	// Names is what the error must name (usually the variable).
	Names string
}

// Refuses checks each case: config.Load of C with the development
// defaults plus tc.Env fails (Config.Validate refuses it) with an error
// naming tc.Names. It is the table test of a service's Config.Validate.
func Refuses[C any](t *testing.T, cases map[string]Invalid) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{config.EnvVar: string(config.Development)}
			for k, v := range tc.Env {
				env[k] = v
			}
			_, err := config.LoadEnv[C](env)
			if err == nil || !strings.Contains(err.Error(), tc.Names) {
				t.Errorf("config.Load(%v) = %v, want an error naming %s", tc.Env, err, tc.Names)
			}
		})
	}
}
