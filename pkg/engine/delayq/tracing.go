package delayq

import (
	"bytes"
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the spans this package starts.
const tracerName = "github.com/orderflow/orderflow/pkg/engine/delayq"

// traceMark starts a stored payload that carries the W3C trace context of
// the Schedule call: "\x00tc1:" + traceparent + "\n" + payload. Payloads
// scheduled outside a sampled trace are stored as they are. A caller's own
// payload that began with this mark would be misread, hence the leading
// NUL byte, which no text payload starts with (the reconciler's are empty).
var traceMark = []byte("\x00tc1:")

var propagator = propagation.TraceContext{}

// wrapTrace prefixes payload with ctx's trace context when ctx's span is
// sampled (spans of an unsampled trace are never exported, and the record
// stays small).
func wrapTrace(ctx context.Context, payload []byte) []byte {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return payload
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	tp := carrier.Get("traceparent")
	if tp == "" {
		return payload
	}
	out := make([]byte, 0, len(traceMark)+len(tp)+1+len(payload))
	out = append(out, traceMark...)
	out = append(out, tp...)
	out = append(out, '\n')
	return append(out, payload...)
}

// unwrapTrace splits a stored payload into the caller's payload and the
// traceparent stored with it ("" when none).
func unwrapTrace(stored []byte) (payload []byte, traceparent string) {
	if !bytes.HasPrefix(stored, traceMark) {
		return stored, ""
	}
	rest := stored[len(traceMark):]
	tp, pl, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return stored, ""
	}
	return pl, string(tp)
}

// startFiring starts the span of one firing, a child of the span that
// scheduled the job when its context was stored, so every firing of a job
// scheduled inside a trace joins that trace.
func (q *shard) startFiring(ctx context.Context, j claimed) (context.Context, trace.Span) {
	if j.traceparent != "" {
		ctx = propagator.Extract(ctx, propagation.MapCarrier{"traceparent": j.traceparent})
	}
	return otel.Tracer(tracerName).Start(ctx, "fire "+q.name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("orderflow.delayq.queue", q.name),
			attribute.String("orderflow.delayq.job_id", j.ID),
			attribute.Int("orderflow.delayq.attempt", j.Attempt),
			attribute.Int64("orderflow.delayq.due_unix_ms", j.Due.UnixMilli()),
		))
}

// endFiring records err on the firing span and ends it.
func endFiring(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
