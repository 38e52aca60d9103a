// Package grpcserver builds the gRPC server every service runs: panic
// recovery, request logging and Prometheus metrics interceptors, the
// standard health service, a bounded message size and, when asked for,
// server reflection.
package grpcserver

import (
	"context"
	"log/slog"
	"runtime/debug"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Options tune New.
type Options struct {
	// Unary and Stream interceptors run after recovery, metrics and logging
	// (authentication, for instance).
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Reflection registers gRPC server reflection (service discovery for
	// grpcurl and the like). Off unless asked for: production servers do
	// not describe themselves to probes.
	Reflection bool
	// MaxRecvMsgSize bounds one received message (DefaultMaxRecvMsgSize
	// when 0).
	MaxRecvMsgSize int
	// ServerOptions are added to the server's (transport credentials, for
	// instance).
	ServerOptions []grpc.ServerOption
}

// DefaultMaxRecvMsgSize is the largest message a server accepts unless
// Options say otherwise: far above any orderflow request, far below
// grpc-go's 4 MiB default.
const DefaultMaxRecvMsgSize = 256 << 10

// ReflectionFromEnv decides reflection from ORDERFLOW_GRPC_REFLECTION
// ("true" or "false"); when it is empty, reflection is on in development
// only.
func ReflectionFromEnv(setting string, development bool) bool {
	switch setting {
	case "true":
		return true
	case "false":
		return false
	}
	return development
}

// streamWorkers is how many goroutines serve calls; calls beyond them get
// a goroutine each.
const streamWorkers = 64

// New returns a server with recovery, logging, metrics (registered in reg),
// OpenTelemetry tracing, health, a bounded message size and (when asked
// for) reflection. The caller registers its
// services, then marks them serving on the returned health server.
func New(log *slog.Logger, reg prometheus.Registerer, opts Options) (*grpc.Server, *health.Server) {
	srvMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(srvMetrics)

	recoverFn := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in grpc handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	obs := newObserver(log)
	unary := append([]grpc.UnaryServerInterceptor{
		obs.unary,
		recovery.UnaryServerInterceptor(recoverFn),
		srvMetrics.UnaryServerInterceptor(),
	}, opts.Unary...)
	stream := append([]grpc.StreamServerInterceptor{
		obs.stream,
		recovery.StreamServerInterceptor(recoverFn),
		srvMetrics.StreamServerInterceptor(),
	}, opts.Stream...)

	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
		// Calls run on long-lived workers whose stacks have already grown
		// through the interceptors, instead of a new goroutine per call
		// growing its stack again (5 % of a status read's CPU); when every
		// worker is busy a call gets a goroutine of its own as before.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}, opts.ServerOptions...)...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	if opts.Reflection {
		reflection.Register(srv)
	}
	return srv, hs
}
