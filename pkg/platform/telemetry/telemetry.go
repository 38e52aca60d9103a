// Package telemetry installs OpenTelemetry tracing for a service: W3C trace
// context propagation (HTTP, gRPC and AMQP headers) and a tracer provider
// that gives every request a trace id, so log lines from submission to the
// worker's result share one trace_id. Spans are sampled at
// OTEL_TRACES_SAMPLER_ARG (default 0: ids only, nothing recorded); no
// exporter is wired, so sampled spans stay in the process.
package telemetry

import (
	"context"
	"os"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Setup installs the global propagator and tracer provider for service and
// returns a function that shuts the provider down.
func Setup(service string) func(context.Context) error {
	ratio := 0.0
	if v, err := strconv.ParseFloat(os.Getenv("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil && v >= 0 && v <= 1 {
		ratio = v
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown
}
