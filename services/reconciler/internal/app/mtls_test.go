package app_test

import (
	"context"
	"path/filepath"
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
// ORDERFLOW_GRPC_TLS_* set: a caller with a certificate from the CA (the
// gateway's settings) is served; a plaintext caller, or one with a
// certificate from another CA, is refused even with the service token.
func TestGRPCRequiresMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, stranger := testcerts.NewCA(t, "orderflow-ca"), testcerts.NewCA(t, "other-ca")
	caFile := filepath.Join(dir, "ca.pem")
	testcerts.Write(t, caFile, ca.PEM)
	srvCert, srvKey := ca.Issue(t, dir, "reconciler")
	gwCert, gwKey := ca.Issue(t, dir, "gateway")
	badCert, badKey := stranger.Issue(t, dir, "stranger")

	c := newCluster(t)
	env := c.env()
	env["ORDERFLOW_GRPC_TLS_CERT_FILE"], env["ORDERFLOW_GRPC_TLS_KEY_FILE"], env["ORDERFLOW_GRPC_TLS_CA_FILE"] = srvCert, srvKey, caFile
	cfg, err := config.LoadEnv[app.Config](env)
	if err != nil {
		t.Fatal(err)
	}
	addrs := apptest.Start(t, app.Run, cfg)

	call := func(dial grpc.DialOption) error {
		t.Helper()
		conn, err := grpc.NewClient(addrs.GRPC, dial)
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
	if err := call(testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: caFile})); status.Code(err) != codes.NotFound {
		t.Errorf("GetPayment with the gateway's certificate = %v, want NotFound (served)", err)
	}
	for name, dial := range map[string]grpc.DialOption{
		"plaintext":                 grpc.WithTransportCredentials(insecure.NewCredentials()),
		"certificate of another CA": testcerts.DialOption(t, grpctls.Config{CertFile: badCert, KeyFile: badKey, CAFile: caFile}),
	} {
		if err := call(dial); status.Code(err) != codes.Unavailable {
			t.Errorf("GetPayment %s = %v, want Unavailable (handshake refused)", name, err)
		}
	}
	// The three files go together: a partial setting refuses the start.
	delete(env, "ORDERFLOW_GRPC_TLS_CA_FILE")
	if _, err := config.LoadEnv[app.Config](env); err == nil {
		t.Error("LoadEnv with a certificate and no CA = nil, want an error naming the variables")
	}
}
