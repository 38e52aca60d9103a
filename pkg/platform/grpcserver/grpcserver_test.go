package grpcserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// start serves New(opts) on a loopback port and returns a client.
func start(t *testing.T, opts Options) *grpc.ClientConn {
	t.Helper()
	return startLogging(t, slog.New(slog.NewTextHandler(io.Discard, nil)), opts)
}

// startLogging is start with the server logging to log.
func startLogging(t *testing.T, log *slog.Logger, opts Options) *grpc.ClientConn {
	t.Helper()
	srv, hs := New(log, prometheus.NewRegistry(), opts)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// listServices asks the reflection service for the server's services.
func listServices(t *testing.T, cc *grpc.ClientConn) error {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		return err
	}
	// A server that ends the stream at once (UNIMPLEMENTED) may do so
	// before Send: Send then answers io.EOF and the status is Recv's.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = stream.Recv()
	return err
}

// TestReflectionOffByDefault: a reflection probe gets UNIMPLEMENTED unless
// the server was built with Reflection.
func TestReflectionOffByDefault(t *testing.T) {
	if err := listServices(t, start(t, Options{})); status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection probe on a default server = %v, want UNIMPLEMENTED", err)
	}
	if err := listServices(t, start(t, Options{Reflection: true})); err != nil {
		t.Errorf("reflection probe with Reflection = %v, want the service list", err)
	}
	for _, tc := range []struct {
		setting string
		dev     bool
		want    bool
	}{{"", false, false}, {"", true, true}, {"true", false, true}, {"false", true, false}} {
		if got := ReflectionFromEnv(tc.setting, tc.dev); got != tc.want {
			t.Errorf("ReflectionFromEnv(%q, development=%v) = %v, want %v", tc.setting, tc.dev, got, tc.want)
		}
	}
}

// TestOversizedMessageRefused: a message above MaxRecvMsgSize is refused
// with RESOURCE_EXHAUSTED before any handler runs.
func TestOversizedMessageRefused(t *testing.T) {
	cc := start(t, Options{})
	health := healthpb.NewHealthClient(cc)
	if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check = %v", err)
	}
	_, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: strings.Repeat("x", DefaultMaxRecvMsgSize+1)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Check with a %d-byte message = %v, want RESOURCE_EXHAUSTED", DefaultMaxRecvMsgSize+1, err)
	}
}
