// Package telemetry installs OpenTelemetry tracing for a service: W3C trace
// context propagation (HTTP, gRPC and AMQP headers) and a tracer provider
// whose spans leave the process through the exporter the standard OTEL_*
// variables choose (OTEL_TRACES_EXPORTER=otlp with
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_PROTOCOL; none when
// unset). The resource carries service.name (OTEL_SERVICE_NAME overrides
// the service's own name), service.version and OTEL_RESOURCE_ATTRIBUTES.
//
// Sampling: with OTEL_TRACES_SAMPLER unset, spans follow the caller's
// sampled flag and new traces are sampled at OTEL_TRACES_SAMPLER_ARG
// (default 0: trace ids for the logs, nothing recorded unless the caller
// asked); OTEL_TRACES_SAMPLER selects any standard sampler instead.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/orderflow/orderflow/pkg/platform/buildinfo"
)

// Setup installs the global propagator and tracer provider for service and
// returns a function that flushes and shuts the provider down (within 5 s). It fails on
// an OTEL_* value it cannot honour (an unknown exporter, for instance).
func Setup(ctx context.Context, service string) (func(context.Context) error, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(buildinfo.Read().Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append(opts, sdktrace.WithSampler(DefaultSampler()))
	}
	exp, err := autoexport.NewSpanExporter(ctx, autoexport.WithFallbackSpanExporter(
		func(context.Context) (sdktrace.SpanExporter, error) { return nil, nil }))
	if err != nil {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %w", err)
	}
	if exp != nil && !autoexport.IsNoneSpanExporter(exp) {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		return tp.Shutdown(ctx)
	}, nil
}

// flushTimeout bounds the final export at shutdown, so an unreachable
// collector cannot hold a stopping process.
const flushTimeout = 5 * time.Second

// DefaultSampler is the sampler used when OTEL_TRACES_SAMPLER is unset:
// the caller's decision when there is one, else OTEL_TRACES_SAMPLER_ARG
// (a ratio, default 0).
func DefaultSampler() sdktrace.Sampler {
	ratio := 0.0
	if v, err := strconv.ParseFloat(os.Getenv("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil && v >= 0 && v <= 1 {
		ratio = v
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
}
