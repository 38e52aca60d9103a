// Package logging builds the JSON slog logger every service uses and carries
// per-request attributes (task_id, trace_id, ...) in the context so that
// every log line on a task's path names the task.
package logging

import (
	"context"
	"io"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/trace"
)

// New returns a JSON logger that writes to w at the given level, tags every
// line with the service name and adds the attributes stored in the context
// by With.
func New(w io.Writer, level slog.Level, service string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(contextHandler{h}).With(slog.String("service", service))
}

type ctxKey struct{}

// With returns a context whose log lines carry attrs in addition to those
// already stored in ctx.
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	all := make([]slog.Attr, 0, len(prev)+len(attrs))
	all = append(all, prev...)
	all = append(all, attrs...)
	return context.WithValue(ctx, ctxKey{}, all)
}

// WithTask returns a context whose log lines carry task_id.
func WithTask(ctx context.Context, taskID string) context.Context {
	return With(ctx, slog.String("task_id", taskID))
}

// contextHandler adds the context's attributes and the OpenTelemetry trace
// id to each record.
type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs, ok := ctx.Value(ctxKey{}).([]slog.Attr); ok {
		r.AddAttrs(attrs...)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

// LevelEnv is the environment variable LevelFromEnv reads.
const LevelEnv = "ORDERFLOW_LOG_LEVEL"

// LevelFromEnv reads ORDERFLOW_LOG_LEVEL (debug, info, warn, error;
// default info).
func LevelFromEnv() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv(LevelEnv))); err != nil {
		return slog.LevelInfo
	}
	return l
}
