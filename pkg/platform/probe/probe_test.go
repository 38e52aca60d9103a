package probe_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// TestPrivateReadinessRevealsOnlyToTrustedCallers: a private probe answers
// the status alone unless the caller is trusted, and logs the failure
// once per change, not once per probe.
func TestPrivateReadinessRevealsOnlyToTrustedCallers(t *testing.T) {
	var down atomic.Bool
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), nil))
	p := probe.New(map[string]probe.Check{
		"redis": func(context.Context) error {
			if down.Load() {
				return errors.New("dial tcp 10.0.0.7:6379: connection refused")
			}
			return nil
		},
	}, nil).Private(func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer trusted" }, log)
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	body := func(token string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	down.Store(true)
	for i := 0; i < 3; i++ {
		if got := body(""); got != `{"status":"unavailable"}` {
			t.Errorf("untrusted GET /healthz = %s, want the status only", got)
		}
	}
	if got := body("trusted"); !strings.Contains(got, "10.0.0.7:6379") {
		t.Errorf("trusted GET /healthz = %s, want the failed check's error", got)
	}
	down.Store(false)
	if got := body(""); got != `{"status":"ok"}` {
		t.Errorf("GET /healthz after recovery = %s, want ok", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "10.0.0.7:6379"); n != 1 {
		t.Errorf("log has the failure %d times, want once for 4 failed probes:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "readiness restored") {
		t.Errorf("log does not record the recovery:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
