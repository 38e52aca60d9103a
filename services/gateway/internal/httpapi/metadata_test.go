package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
)

// mdTasks records the incoming metadata each in-process call sees.
type mdTasks struct {
	gatewayv1.UnimplementedOrderSplitServiceServer
	gatewayv1.UnimplementedTaskServiceServer
	seen map[string]metadata.MD
}

func (m mdTasks) GetTask(ctx context.Context, _ *gatewayv1.GetTaskRequest) (*gatewayv1.GetTaskResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	m.seen["GetTask"] = md
	return &gatewayv1.GetTaskResponse{Task: testTask()}, nil
}

func (m mdTasks) CreateOrderSplit(ctx context.Context, _ *gatewayv1.CreateOrderSplitRequest) (*gatewayv1.CreateOrderSplitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	m.seen["CreateOrderSplit"] = md
	return &gatewayv1.CreateOrderSplitResponse{Task: testTask()}, nil
}

// TestInProcessServersSeeOnlyTheMetadataTheyRead: a REST call reaches the
// in-process servers with the caller's Authorization (the only metadata
// they read) and the forwarding addresses grpc-gateway always sets; the
// rest of the request's headers (cookies, the user agent, Grpc-Metadata-*
// headers) are not turned into metadata, and the route still answers.
func TestInProcessServersSeeOnlyTheMetadataTheyRead(t *testing.T) {
	srv := mdTasks{seen: map[string]metadata.MD{}}
	h, err := New(context.Background(), Options{MaxBodyBytes: 1 << 20, Tasks: srv})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, rpc, path, body string
	}{
		{http.MethodGet, "GetTask", "/v1/tasks/t-1", ""},
		{http.MethodPost, "CreateOrderSplit", "/v1/order-splits", `{"orderCode":"ORD-1"}`},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		req.RemoteAddr = "192.0.2.7:4711"
		req.Host = "shop.example"
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("User-Agent", "test-agent/1")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Cookie", "session=secret")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Grpc-Metadata-Authorization", "Bearer other")
		req.Header.Set("Grpc-Metadata-Member", "someone-else")
		req.Header.Set("X-Request-Id", "r-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s = %d %s, want 200", tc.method, tc.path, rec.Code, rec.Body)
		}
		want := metadata.MD{
			"authorization":    {"Bearer tok"},
			"x-forwarded-host": {"shop.example"},
			"x-forwarded-for":  {"192.0.2.7"},
		}
		if diff := cmp.Diff(want, srv.seen[tc.rpc]); diff != "" {
			t.Errorf("%s: incoming metadata (-want +got):\n%s", tc.rpc, diff)
		}
	}
}
