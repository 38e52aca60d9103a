package probe_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/orderflow/orderflow/pkg/platform/probe"
)

func get(t *testing.T, srv *httptest.Server, path string) int {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestLivenessIgnoresDependenciesReadinessDoesNot(t *testing.T) {
	var redisDown atomic.Bool
	p := probe.New(map[string]probe.Check{
		"redis": func(context.Context) error {
			if redisDown.Load() {
				return errors.New("connection refused")
			}
			return nil
		},
	}, nil)
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		down                bool
		live, ready, health int
	}{
		{false, 200, 200, 200},
		{true, 200, 503, 503},
		{false, 200, 200, 200},
	} {
		redisDown.Store(tc.down)
		if got := get(t, srv, "/livez"); got != tc.live {
			t.Errorf("redis down=%v: GET /livez = %d, want %d", tc.down, got, tc.live)
		}
		if got := get(t, srv, "/readyz"); got != tc.ready {
			t.Errorf("redis down=%v: GET /readyz = %d, want %d", tc.down, got, tc.ready)
		}
		if got := get(t, srv, "/healthz"); got != tc.health {
			t.Errorf("redis down=%v: GET /healthz = %d, want %d", tc.down, got, tc.health)
		}
	}
}

func TestShutdownTurnsReadinessAndGRPCHealthOff(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("orderflow.test.v1.Service", healthpb.HealthCheckResponse_SERVING)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	status := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health check %q: %v", svc, err)
		}
		return resp.GetStatus()
	}

	p := probe.New(nil, hs)
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer p.DrainOnDone(ctx)()

	if got := status(""); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before shutdown = %v, want SERVING", got)
	}
	if got := get(t, srv, "/readyz"); got != 200 {
		t.Fatalf("GET /readyz before shutdown = %d, want 200", got)
	}
	cancel() // shutdown begins; Drain runs in its own goroutine
	for deadline := time.Now().Add(2 * time.Second); get(t, srv, "/readyz") != 503 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	for _, svc := range []string{"", "orderflow.test.v1.Service"} {
		if got := status(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q after shutdown began = %v, want NOT_SERVING", svc, got)
		}
	}
	if got := get(t, srv, "/readyz"); got != 503 {
		t.Errorf("GET /readyz after shutdown began = %d, want 503", got)
	}
	if got := get(t, srv, "/livez"); got != 200 {
		t.Errorf("GET /livez after shutdown began = %d, want 200", got)
	}
}
