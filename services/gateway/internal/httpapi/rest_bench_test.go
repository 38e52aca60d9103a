package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkRESTGetTaskLayers measures what the REST layers (tracing
// middleware, grpc-gateway, observe, marshalling) cost a status read
// around a task server that answers at once, with tracing as a deployment
// has it by default (an SDK provider sampling no new trace).
func BenchmarkRESTGetTaskLayers(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	b.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	h, err := New(context.Background(), Options{MaxBodyBytes: 1 << 20, Tasks: fixedTasks{task: testTask()}})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/tasks/t-1", nil)
	req.Header.Set("Authorization", "Bearer x")
	req.Header.Set("User-Agent", "Go-http-client/1.1")
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET = %d %s", rec.Code, rec.Body)
		}
	}
}
