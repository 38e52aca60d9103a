// Package serve runs a service's listeners until its context ends and then
// shuts them down gracefully within a deadline.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// ShutdownTimeout bounds a graceful shutdown.
const ShutdownTimeout = 10 * time.Second

// HTTP serves srv on lis until ctx ends, then shuts it down gracefully.
func HTTP(ctx context.Context, srv *http.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown %s: %w", lis.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http serve %s: %w", lis.Addr(), err)
	}
	return nil
}

// GRPC serves srv on lis until ctx ends, then stops it gracefully (or
// forcibly once ShutdownTimeout has passed).
func GRPC(ctx context.Context, srv *grpc.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("grpc serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(ShutdownTimeout):
		srv.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpc serve %s: %w", lis.Addr(), err)
	}
	return nil
}

// Addrs are the addresses a service listens on once its listeners are
// open. A service without a gRPC server leaves GRPC empty; Admin is set
// only by a service whose HTTP port is public and whose /metrics and
// profiles are served on a separate admin listener (the gateway).
type Addrs struct {
	HTTP  string
	GRPC  string
	Admin string
}

// Ready is how every service's app.Run tells its caller that it is
// listening: it is called once, with the bound addresses (useful when the
// configured ones end in ":0"). A nil Ready is allowed.
type Ready func(Addrs)

// Listening logs a service's bound addresses and calls ready when it is
// not nil: the one "listening" line and ready signal of every service.
func Listening(log *slog.Logger, ready Ready, a Addrs) {
	attrs := []any{"http", a.HTTP}
	if a.GRPC != "" {
		attrs = append(attrs, "grpc", a.GRPC)
	}
	if a.Admin != "" {
		attrs = append(attrs, "admin", a.Admin)
	}
	log.Info("listening", attrs...)
	if ready != nil {
		ready(a)
	}
}

// ListenHTTP listens on addr, signals ready (see Listening) and serves h
// until ctx ends, with the header timeout every orderflow HTTP server uses.
// It is the whole listener of a service with only an HTTP server.
func ListenHTTP(ctx context.Context, log *slog.Logger, addr string, h http.Handler, ready Ready) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	Listening(log, ready, Addrs{HTTP: lis.Addr().String()})
	return HTTP(ctx, AdminServer(h), lis)
}

// AdminServer is the HTTP server of an admin port (probes, /metrics, the
// Go runtime's profiles, small admin calls): nothing on it streams, so
// both reads and writes are bounded.
func AdminServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h, ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout: BodyTimeout, WriteTimeout: time.Minute, IdleTimeout: IdleTimeout,
	}
}

// Timeouts every orderflow HTTP server uses: slow headers and slow bodies
// end the request instead of holding a connection and a goroutine.
const (
	ReadHeaderTimeout = 5 * time.Second
	BodyTimeout       = 15 * time.Second
	IdleTimeout       = 2 * time.Minute
)

// BodyDeadline bounds how long h's requests may take to send their body
// (d from the moment the handler starts); a slower body fails to read and
// the request ends. Only requests that carry a body get the deadline, so
// a long-lived streamed response to a GET (a task watch) is not cut off,
// which a server-wide ReadTimeout would do.
func BodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
}
