package grpcserver

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/otlptest"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// syncBuffer is a log sink the server's goroutines write while the test
// reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCallsAreTracedAndLogged: every call's server span continues the
// caller's traceparent (sampled: recorded with the method and status
// code, an error status only for a server's fault; not sampled: the
// caller's trace id in the handler's context, nothing recorded), streams
// too; a failed call is logged at info level or above with its method
// and code, a successful one only at debug level.
func TestCallsAreTracedAndLogged(t *testing.T) {
	rec := otlptest.Record(t)

	logs := &syncBuffer{}
	var mu sync.Mutex
	var seen trace.SpanContext
	// The handler's stand-in: it records the context's span and fails
	// the call as the metadata asks.
	fail := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("fail"); len(v) > 0 {
			switch v[0] {
			case "internal":
				return nil, status.Error(codes.Internal, "store down")
			case "invalid":
				return nil, status.Error(codes.InvalidArgument, "bad order")
			}
		}
		return handler(ctx, req)
	}
	cc := startLogging(t, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Options{Unary: []grpc.UnaryServerInterceptor{fail}})
	client := healthpb.NewHealthClient(cc)

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	sampled, unsampled := "00-"+traceID+"-"+parentID+"-01", "00-"+traceID+"-"+parentID+"-00"
	for _, tc := range []struct {
		name, traceparent, fail string
		wantCode                codes.Code
		wantStatus              otelcodes.Code
		wantLog                 bool
	}{
		{"ok", sampled, "", codes.OK, otelcodes.Unset, false},
		{"caller's fault", sampled, "invalid", codes.InvalidArgument, otelcodes.Unset, true},
		{"server's fault", sampled, "internal", codes.Internal, otelcodes.Error, true},
		{"not sampled", unsampled, "internal", codes.Internal, 0, true},
	} {
		rec.Reset()
		before := strings.Count(logs.String(), "finished call")
		ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", tc.traceparent, "fail", tc.fail)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if status.Code(err) != tc.wantCode {
			t.Fatalf("%s: Check = %v, want %v", tc.name, err, tc.wantCode)
		}
		mu.Lock()
		got := seen
		mu.Unlock()
		if got.TraceID().String() != traceID {
			t.Errorf("%s: handler's trace id %s, want the caller's %s", tc.name, got.TraceID(), traceID)
		}
		logged := strings.Count(logs.String(), "finished call") - before
		if tc.wantLog != (logged == 1) {
			t.Errorf("%s: %d info lines for the call, want a line: %v\n%s", tc.name, logged, tc.wantLog, logs)
		}
		if tc.wantLog && !strings.Contains(logs.String(), `"grpc.code":"`+tc.wantCode.String()+`"`) {
			t.Errorf("%s: the log has no grpc.code %s:\n%s", tc.name, tc.wantCode, logs)
		}
		ended := rec.Ended()
		if tc.traceparent == unsampled {
			if len(ended) != 0 {
				t.Errorf("%s: %d spans recorded, want none", tc.name, len(ended))
			}
			continue
		}
		if len(ended) != 1 {
			t.Fatalf("%s: %d spans recorded, want 1", tc.name, len(ended))
		}
		s := ended[0]
		if s.Name() != "grpc.health.v1.Health/Check" || s.SpanKind() != trace.SpanKindServer || s.Parent().SpanID().String() != parentID {
			t.Errorf("%s: span %q kind %v parent %s; want grpc.health.v1.Health/Check, server, %s", tc.name, s.Name(), s.SpanKind(), s.Parent().SpanID(), parentID)
		}
		if s.Status().Code != tc.wantStatus {
			t.Errorf("%s: span status %v, want %v", tc.name, s.Status(), tc.wantStatus)
		}
		attrs := otlptest.SpanAttrs(s)
		wantCode := map[codes.Code]string{codes.OK: "OK", codes.InvalidArgument: "INVALID_ARGUMENT", codes.Internal: "INTERNAL"}[tc.wantCode]
		if attrs["rpc.response.status_code"] != wantCode || attrs["rpc.method"] != "grpc.health.v1.Health/Check" || attrs["rpc.system.name"] != "grpc" {
			t.Errorf("%s: span attributes %v, want rpc.response.status_code %s, rpc.method and rpc.system.name", tc.name, attrs, wantCode)
		}
	}

	// A stream: its span ends with the stream.
	rec.Reset()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "traceparent", sampled))
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.Ended()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != "grpc.health.v1.Health/Watch" || ended[0].Parent().TraceID().String() != traceID {
		t.Errorf("Watch: spans %v, want one grpc.health.v1.Health/Watch span in the caller's trace", ended)
	}
}
