package grpcserver

import (
	"context"
	"log/slog"
	"strings"
	"time"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.opentelemetry.io/otel"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// tracerName is the instrumentation scope of the gRPC servers' spans.
const tracerName = "github.com/orderflow/orderflow/pkg/platform/grpcserver"

// observer is the first interceptor of every call. It starts the call's
// server span under the caller's traceparent (the global propagator over
// the incoming metadata), else in a new trace, named after the method
// ("orderflow.gateway.v1.GatewayService/GetTask"); a recording (sampled)
// span also gets the RPC system, method and status code, and an error
// status for the codes a server is to blame for. When the call has ended
// it logs "finished call": at debug level for OK, at the level
// logging.DefaultServerCodeToLevel gives other codes.
//
// otelgrpc's stats handler and go-grpc-middleware's logging interceptor
// did the same, and also built their fields on every call: a metric
// attribute set for a meter provider the services never set (their
// metrics are Prometheus's) and the log line's fields for a line the
// logger then dropped (about a third of a health check's server CPU).
type observer struct {
	tracer trace.Tracer
	log    *slog.Logger
}

func newObserver(log *slog.Logger) observer {
	return observer{tracer: otel.Tracer(tracerName), log: log}
}

func (o observer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, span, start := o.begin(ctx, info.FullMethod)
	resp, err := handler(ctx, req)
	o.finish(ctx, span, info.FullMethod, start, err)
	return resp, err
}

func (o observer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, span, start := o.begin(ss.Context(), info.FullMethod)
	wrapped := middleware.WrapServerStream(ss)
	wrapped.WrappedContext = ctx
	err := handler(srv, wrapped)
	o.finish(ctx, span, info.FullMethod, start, err)
	return err
}

func (o observer) begin(ctx context.Context, fullMethod string) (context.Context, trace.Span, time.Time) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = otel.GetTextMapPropagator().Extract(ctx, metadataCarrier(md))
	}
	ctx, span := o.tracer.Start(ctx, strings.TrimPrefix(fullMethod, "/"), trace.WithSpanKind(trace.SpanKindServer))
	return ctx, span, time.Now()
}

func (o observer) finish(ctx context.Context, span trace.Span, fullMethod string, start time.Time, err error) {
	code := status.Code(err)
	if span.IsRecording() {
		span.SetAttributes(semconv.RPCSystemNameGRPC, semconv.RPCMethod(strings.TrimPrefix(fullMethod, "/")),
			semconv.RPCResponseStatusCode(rpccode.Code(code).String()))
		if serverFault(code) {
			span.SetStatus(otelcodes.Error, status.Convert(err).Message())
		}
	}
	span.End()

	level := slog.LevelDebug
	if code != codes.OK {
		level = slog.Level(logging.DefaultServerCodeToLevel(code))
	}
	if !o.log.Enabled(ctx, level) {
		return
	}
	service, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	attrs := []slog.Attr{
		slog.String("grpc.service", service), slog.String("grpc.method", method),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", err.Error()))
	}
	o.log.LogAttrs(ctx, level, "finished call", attrs...)
}

// serverFault reports the codes that mark a call failed on the server's
// side (OpenTelemetry's RPC conventions); the others are the caller's.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// metadataCarrier reads a trace context from incoming gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
