package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/reconciler/internal/app"
)

// TestGRPCServesOnlyTheGateway: the reconciler's gRPC is an internal
// listener whose one caller is the gateway. It serves the gateway's token
// and refuses, UNAUTHENTICATED, every other credential of the deployment:
// a member's JWT, an admin's JWT (admin is for people, on the admin
// port), the scrape token, and near misses of the gateway's token.
func TestGRPCServesOnlyTheGateway(t *testing.T) {
	const gateway, scrape = "gateway-reconciler-token-for-this-test-01", "scrape-token-for-this-test-0123456789"
	_, prefix := testenv.Redis(t)
	cfg, err := config.LoadEnv[app.Config](map[string]string{
		config.EnvVar: string(config.Development), "ORDERFLOW_GATEWAY_RECONCILER_TOKEN": gateway, "ORDERFLOW_METRICS_TOKEN": scrape,
		"ORDERFLOW_RECONCILER_GRPC_ADDR": "127.0.0.1:0", "ORDERFLOW_RECONCILER_HTTP_ADDR": "127.0.0.1:0",
		"ORDERFLOW_REDIS_ADDR": testenv.RedisAddr(), "ORDERFLOW_REDIS_PREFIX": prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	addrs, client := startPlaintext(t, cfg)
	get := func(tok string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if tok != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		}
		_, err := client.GetPayment(ctx, &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "NONE-1"})
		return err
	}
	if err := get(gateway); status.Code(err) != codes.NotFound {
		t.Errorf("GetPayment with the gateway's token = %v, want NotFound (served)", err)
	}
	admin, member := apptest.DevTokens(t)
	for name, tok := range map[string]string{
		"no credential":                   "",
		"a member's JWT":                  member,
		"an admin's JWT":                  admin,
		"the scrape token":                scrape,
		"the gateway's token cut short":   gateway[:len(gateway)-1],
		"the gateway's token and a byte":  gateway + "x",
		"the development gateway's token": "dev-gateway-reconciler-token",
	} {
		if err := get(tok); status.Code(err) != codes.Unauthenticated {
			t.Errorf("GetPayment with %s = %v, want Unauthenticated", name, err)
		}
	}
	// The admin JWT the gRPC port refuses is what the admin port needs.
	if code, _ := apptest.Get(t, "http://"+addrs.HTTP+"/debug/pprof/", admin); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ on the admin port as an admin = %d, want 200", code)
	}
	if code, _ := apptest.Get(t, "http://"+addrs.HTTP+"/debug/pprof/", gateway); code != http.StatusUnauthorized {
		t.Errorf("GET /debug/pprof/ on the admin port with the gateway's token = %d, want 401", code)
	}
}

// startPlaintext runs the reconciler with cfg until the test ends and
// returns its addresses and a plaintext client of its gRPC.
func startPlaintext(t *testing.T, cfg app.Config) (serve.Addrs, reconcilerv1.ReconcilerServiceClient) {
	t.Helper()
	addrs := apptest.Start(t, app.Run, cfg)
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return addrs, reconcilerv1.NewReconcilerServiceClient(conn)
}
