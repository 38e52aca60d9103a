package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
)

// internalWords are what an answer on the public edge must not name: that
// a credential was recognised as a service's, or which.
var internalWords = []string{"service", "internal", "reconciler", "scrape", "metrics", "caller"}

// TestServiceCredentialsAreRefusedOnThePublicEdge: service identities are
// for the internal listeners only. Every service credential a deployment
// holds (the gateway's token for the reconciler, the scrape token) is
// refused on the gateway's public REST and gRPC and on the operations API
// with the answer a garbage token gets: 401 / UNAUTHENTICATED naming
// nothing internal. An admin person's JWT still runs operations.
func TestServiceCredentialsAreRefusedOnThePublicEdge(t *testing.T) {
	s := startGateway(t, func(c *Config) {
		c.ReconcilerToken = config.Secret("gateway-reconciler-token-0123456789")
		c.Metrics.Token = config.Secret("scrape-token-for-this-test-0123456789")
	})
	creds := map[string]string{
		"the gateway's token for the reconciler": s.cfg.ReconcilerToken.Reveal(),
		"the scrape token":                       s.cfg.Metrics.Token.Reveal(),
		"the development service token":          auth.DevGatewayReconcilerToken,
	}
	routes := append([]struct{ method, path, body string }{
		{"POST", "/v1/order-splits", goodOrder},
		{"GET", "/v1/tasks/AAAAAAAAAAAAAAAAAAAAAA", ""},
		{"GET", "/v1/tasks", ""},
		{"POST", "/v1/tasks/AAAAAAAAAAAAAAAAAAAAAA:cancel", "{}"},
		{"POST", "/v1/payments", `{"orderCode":"PAY-1","amountFen":100}`},
		{"GET", "/v1/payments/PAY-1", ""},
	}, opsRoutes...)
	refusedLikeGarbage := func(t *testing.T, what string, code int, body map[string]any) {
		t.Helper()
		msg := strings.ToLower(fmt.Sprint(body["message"]))
		if code != http.StatusUnauthorized || reason(body) != "UNAUTHENTICATED" {
			t.Errorf("%s = %d %v, want 401 UNAUTHENTICATED", what, code, body)
		}
		for _, w := range internalWords {
			if strings.Contains(msg, w) {
				t.Errorf("%s: message %q names %q", what, msg, w)
			}
		}
	}
	for _, r := range routes {
		_, garbage := s.do(t, r.method, r.path, "abc.def.ghi", r.body)
		for name, tok := range creds {
			code, body := s.do(t, r.method, r.path, tok, r.body)
			refusedLikeGarbage(t, r.method+" "+r.path+" with "+name, code, body)
			if body["message"] != garbage["message"] {
				t.Errorf("%s %s with %s: message %q, want a garbage token's %q", r.method, r.path, name, body["message"], garbage["message"])
			}
		}
	}

	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	calls := map[string]func(context.Context) error{
		"CreateOrderSplit": func(ctx context.Context) error {
			_, err := gatewayv1.NewOrderSplitServiceClient(conn).CreateOrderSplit(ctx, &gatewayv1.CreateOrderSplitRequest{OrderCode: "A"})
			return err
		},
		"ListTasks": func(ctx context.Context) error {
			_, err := gatewayv1.NewTaskServiceClient(conn).ListTasks(ctx, &gatewayv1.ListTasksRequest{})
			return err
		},
		"GetPayment": func(ctx context.Context) error {
			_, err := gatewayv1.NewPaymentServiceClient(conn).GetPayment(ctx, &gatewayv1.GetPaymentRequest{OrderCode: "A"})
			return err
		},
		"GetOverview": func(ctx context.Context) error {
			_, err := opsv1.NewOpsServiceClient(conn).GetOverview(ctx, &opsv1.GetOverviewRequest{})
			return err
		},
	}
	for method, call := range calls {
		for name, tok := range creds {
			err := call(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok))
			msg := strings.ToLower(status.Convert(err).Message())
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("gRPC %s with %s = %v, want Unauthenticated", method, name, err)
			}
			for _, w := range internalWords {
				if strings.Contains(msg, w) {
					t.Errorf("gRPC %s with %s: message %q names %q", method, name, msg, w)
				}
			}
		}
	}

	// Admin is for people: an admin's JWT runs operations, over REST and gRPC.
	admin := s.adminToken(t, "root")
	if code, body := s.do(t, "GET", "/v1/ops/overview", admin, ""); code != http.StatusOK {
		t.Errorf("GET /v1/ops/overview as an admin = %d %v, want 200", code, body)
	}
	if err := calls["GetOverview"](metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+admin)); err != nil {
		t.Errorf("gRPC GetOverview as an admin = %v, want served", err)
	}
}
