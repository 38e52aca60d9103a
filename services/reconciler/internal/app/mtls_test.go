package app_test

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/grpctls"
	"github.com/orderflow/orderflow/pkg/testkit/apptest"
	"github.com/orderflow/orderflow/pkg/testkit/testcerts"
	"github.com/orderflow/orderflow/services/reconciler/internal/app"
)

// TestGRPCRequiresMutualTLS starts the reconciler with
// ORDERFLOW_GRPC_TLS_* set: a caller with a certificate from the CA that
// names the gateway (orderflow-gateway, the default of
// ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES) is served; a plaintext
// caller, one with a certificate from another CA, or one with a
// certificate from the same CA naming another service is refused even
// with the service token. With the setting naming that other service
// instead, it is served and the gateway refused; naming no one refuses
// the start.
func TestGRPCRequiresMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, stranger := testcerts.NewCA(t, "orderflow-ca"), testcerts.NewCA(t, "other-ca")
	caFile := filepath.Join(dir, "ca.pem")
	testcerts.Write(t, caFile, ca.PEM)
	srvCert, srvKey := ca.Issue(t, dir, "reconciler")
	gwCert, gwKey := ca.Issue(t, dir, "orderflow-gateway")
	badCert, badKey := stranger.Issue(t, dir, "stranger")
	otherCert, otherKey := ca.Issue(t, dir, "orderflow-splitworker")

	c := newCluster(t)
	env := c.env()
	env["ORDERFLOW_GRPC_TLS_CERT_FILE"], env["ORDERFLOW_GRPC_TLS_KEY_FILE"], env["ORDERFLOW_GRPC_TLS_CA_FILE"] = srvCert, srvKey, caFile
	start := func(env map[string]string) string {
		t.Helper()
		cfg, err := config.LoadEnv[app.Config](env)
		if err != nil {
			t.Fatal(err)
		}
		return apptest.Start(t, app.Run, cfg).GRPC
	}
	call := func(addr string, dial grpc.DialOption) error {
		t.Helper()
		conn, err := grpc.NewClient(addr, dial)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+auth.DevGatewayReconcilerToken)
		_, err = reconcilerv1.NewReconcilerServiceClient(conn).GetPayment(ctx, &reconcilerv1.GetPaymentRequest{MemberId: "m1", OrderCode: "NONE-1"})
		return err
	}
	gateway := testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: caFile})
	other := testcerts.DialOption(t, grpctls.Config{CertFile: otherCert, KeyFile: otherKey, CAFile: caFile})
	addr := start(env)
	if err := call(addr, gateway); status.Code(err) != codes.NotFound {
		t.Errorf("GetPayment with the gateway's certificate = %v, want NotFound (served)", err)
	}
	for name, dial := range map[string]grpc.DialOption{
		"plaintext":                 grpc.WithTransportCredentials(insecure.NewCredentials()),
		"certificate of another CA": testcerts.DialOption(t, grpctls.Config{CertFile: badCert, KeyFile: badKey, CAFile: caFile}),
		"certificate of the CA naming another service": other,
	} {
		if err := call(addr, dial); status.Code(err) != codes.Unavailable {
			t.Errorf("GetPayment %s = %v, want Unavailable (handshake refused)", name, err)
		}
	}

	// The allowed names are configured: naming the other service serves it
	// and refuses the gateway's certificate.
	named := maps.Clone(env)
	named["ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES"] = "orderflow-splitworker"
	addr = start(named)
	if err := call(addr, other); status.Code(err) != codes.NotFound {
		t.Errorf("GetPayment with the named service's certificate = %v, want NotFound (served)", err)
	}
	if err := call(addr, gateway); status.Code(err) != codes.Unavailable {
		t.Errorf("GetPayment with the gateway's certificate, not named = %v, want Unavailable (handshake refused)", err)
	}
	// Mutual TLS with no caller named refuses the start.
	named["ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES"] = " , "
	if _, err := config.LoadEnv[app.Config](named); err == nil || !strings.Contains(err.Error(), "ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES") {
		t.Errorf("LoadEnv with mutual TLS and no client name = %v, want an error naming ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES", err)
	}
	// The three files go together: a partial setting refuses the start.
	delete(env, "ORDERFLOW_GRPC_TLS_CA_FILE")
	if _, err := config.LoadEnv[app.Config](env); err == nil {
		t.Error("LoadEnv with a certificate and no CA = nil, want an error naming the variables")
	}
}
