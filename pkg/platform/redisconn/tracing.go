package redisconn

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the Redis client spans.
const tracerName = "github.com/orderflow/orderflow/pkg/platform/redisconn"

// traceCommands gives every command, pipeline and dial of c a client span
// under the caller's span: a command's is named after it ("evalsha"), a
// pipeline's "redis.pipeline" and the names of its commands ("redis.pipeline
// evalsha zadd"); a recording (sampled) span also gets the server's
// address and, for a pipeline, its number of commands. A command's error
// other than redis.Nil marks its span failed. On a Cluster every node's
// client gets the hook.
//
// redisotel did this and also wrote out every pipelined command with all
// its arguments on every pipeline, sampled or not, for the span's name
// (about 2 % of the split-worker's CPU per order).
func traceCommands(c redis.UniversalClient) {
	switch c := c.(type) {
	case *redis.Client:
		c.AddHook(newTracingHook(c.Options().Addr))
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(newTracingHook(n.Options().Addr)) })
	}
}

type tracingHook struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue
}

func newTracingHook(addr string) tracingHook {
	attrs := []attribute.KeyValue{semconv.DBSystemNameRedis}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		attrs = append(attrs, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	}
	return tracingHook{tracer: otel.Tracer(tracerName), attrs: attrs}
}

func (h tracingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, span := h.start(ctx, "redis.dial")
		defer span.End()
		conn, err := next(ctx, network, addr)
		failed(span, err)
		return conn, err
	}
}

func (h tracingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, span := h.start(ctx, cmd.FullName())
		defer span.End()
		err := next(ctx, cmd)
		failed(span, err)
		return err
	}
}

func (h tracingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, span := h.start(ctx, "redis.pipeline")
		defer span.End()
		if span.IsRecording() {
			span.SetName(pipelineName(cmds))
			span.SetAttributes(semconv.DBOperationBatchSize(len(cmds)))
		}
		err := next(ctx, cmds)
		failed(span, err)
		return err
	}
}

// start starts a client span named name, with the server's attributes
// when it records.
func (h tracingHook) start(ctx context.Context, name string) (context.Context, trace.Span) {
	ctx, span := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(h.attrs...)
	}
	return ctx, span
}

// pipelineName is "redis.pipeline" and the distinct names of cmds in
// their order (at most 10).
func pipelineName(cmds []redis.Cmder) string {
	const most = 10
	var b strings.Builder
	b.WriteString("redis.pipeline")
	seen := make([]string, 0, most)
	for _, c := range cmds {
		name := c.FullName()
		if len(seen) == most {
			break
		}
		dup := false
		for _, s := range seen {
			dup = dup || s == name
		}
		if !dup {
			seen = append(seen, name)
			b.WriteString(" ")
			b.WriteString(name)
		}
	}
	return b.String()
}

// failed marks span failed with err, unless err is nil or redis.Nil (a
// missing key is an answer).
func failed(span trace.Span, err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
