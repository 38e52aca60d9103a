package amqpbus

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the spans this package starts.
const tracerName = "github.com/orderflow/orderflow/pkg/engine/amqpbus"

// HeaderCarrier adapts AMQP message headers to an OpenTelemetry text map
// propagator, so W3C trace context travels with each message.
type HeaderCarrier amqp.Table

// Get returns the header key when it is a string.
func (c HeaderCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

// Set sets the header key.
func (c HeaderCarrier) Set(key, value string) { c[key] = value }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// startPublish starts the producer span of one publish (messaging semantic
// conventions) and returns msg with headers carrying that span's context.
// The span's parent is ctx's span, or else the context already in the
// message's headers (a message published again from an outbox stays in
// the trace of the request that wrote it).
func startPublish(ctx context.Context, exchange, key string, msg amqp.Publishing) (context.Context, trace.Span, amqp.Publishing) {
	prop := otel.GetTextMapPropagator()
	headers := make(amqp.Table, len(msg.Headers)+2)
	for k, v := range msg.Headers {
		headers[k] = v
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = prop.Extract(ctx, HeaderCarrier(headers))
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, "publish "+exchange,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(messaging(semconv.MessagingOperationTypeSend, "publish", exchange, key, msg.MessageId, len(msg.Body))...))
	prop.Inject(ctx, HeaderCarrier(headers))
	msg.Headers = headers
	return ctx, span, msg
}

// messaging returns the messaging semantic-convention attributes of a span.
func messaging(opType attribute.KeyValue, op, destination, routingKey, messageID string, size int) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemRabbitMQ,
		opType,
		semconv.MessagingOperationName(op),
		semconv.MessagingDestinationName(destination),
		semconv.MessagingRabbitMQDestinationRoutingKey(routingKey),
		semconv.MessagingMessageID(messageID),
		semconv.MessagingMessageBodySize(size),
	}
}

// endPublish records err on the producer span and ends it.
func endPublish(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// outcomeNames label a consumer span with what the handler decided.
var outcomeNames = map[Outcome]string{Ack: "ack", Requeue: "requeue", Reject: "reject"}

// traced runs h for d inside a consumer span that continues the trace in
// the message's headers.
func traced(ctx context.Context, queue string, d amqp.Delivery, h Handler) Outcome {
	ctx = otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier(d.Headers))
	ctx, span := otel.Tracer(tracerName).Start(ctx, "process "+queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(messaging(semconv.MessagingOperationTypeProcess, "process", queue, d.RoutingKey, d.MessageId, len(d.Body))...))
	defer span.End()
	o := h(ctx, d)
	span.SetAttributes(attribute.String("orderflow.amqp.outcome", outcomeNames[o]))
	if o == Reject {
		span.SetStatus(codes.Error, "rejected (dead-lettered)")
	}
	return o
}
