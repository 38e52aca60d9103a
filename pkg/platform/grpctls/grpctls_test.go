package grpctls_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/orderflow/orderflow/pkg/platform/grpctls"
	"github.com/orderflow/orderflow/pkg/testkit/testcerts"
)

// TestMutualTLS runs a real gRPC server with the reconciler's settings
// and checks who gets through: only a client whose certificate the CA
// issued for an allowed name, that itself trusts the CA.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	good, other := testcerts.NewCA(t, "orderflow-ca"), testcerts.NewCA(t, "someone-elses-ca")
	caFile, otherCAFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other-ca.pem")
	testcerts.Write(t, caFile, good.PEM)
	testcerts.Write(t, otherCAFile, other.PEM)
	srvCert, srvKey := good.Issue(t, dir, "reconciler")
	gwCert, gwKey := good.Issue(t, dir, "gateway")
	strangerCert, strangerKey := other.Issue(t, dir, "stranger")
	workerCert, workerKey := good.Issue(t, dir, "splitworker")

	srv := grpctls.Config{CertFile: srvCert, KeyFile: srvKey, CAFile: caFile}
	opt, err := srv.ServerOption([]string{"gateway"})
	if err != nil || opt == nil {
		t.Fatalf("ServerOption() = %v, %v", opt, err)
	}
	check := testcerts.HealthServer(t, opt)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(good.PEM)

	if err := check(testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: caFile})); err != nil {
		t.Errorf("gateway with a certificate from the CA: %v, want served", err)
	}
	if err := check(testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: caFile, ServerName: "reconciler"})); err != nil {
		t.Errorf("gateway naming the reconciler: %v, want served", err)
	}
	for _, tc := range []struct {
		name string
		dial grpc.DialOption
	}{
		{"plaintext", grpc.WithTransportCredentials(insecure.NewCredentials())},
		{"TLS without a client certificate", grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))},
		{"client certificate from another CA", testcerts.DialOption(t, grpctls.Config{CertFile: strangerCert, KeyFile: strangerKey, CAFile: caFile})},
		{"client certificate from the CA naming another service", testcerts.DialOption(t, grpctls.Config{CertFile: workerCert, KeyFile: workerKey, CAFile: caFile})},
		{"client trusting another CA (server not verified)", testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: otherCAFile})},
		{"server name not in the certificate", testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: caFile, ServerName: "payments.example.com"})},
	} {
		if err := check(tc.dial); err == nil {
			t.Errorf("%s: served, want refused", tc.name)
		}
	}

	// Any of several names; none (or only empty ones) is refused.
	opt, err = srv.ServerOption([]string{"", "edge", "splitworker"})
	if err != nil {
		t.Fatal(err)
	}
	check = testcerts.HealthServer(t, opt)
	if err := check(testcerts.DialOption(t, grpctls.Config{CertFile: workerCert, KeyFile: workerKey, CAFile: caFile})); err != nil {
		t.Errorf("splitworker allowed by name: %v, want served", err)
	}
	if err := check(testcerts.DialOption(t, grpctls.Config{CertFile: gwCert, KeyFile: gwKey, CAFile: caFile})); err == nil {
		t.Error("gateway not among the allowed names: served, want refused")
	}
	for _, names := range [][]string{nil, {""}} {
		if o, err := srv.ServerOption(names); !errors.Is(err, grpctls.ErrNoClientNames) {
			t.Errorf("ServerOption(%q) = %v, %v; want %v", names, o, err, grpctls.ErrNoClientNames)
		}
	}

	// Off by default: plaintext both ways.
	if o, err := (grpctls.Config{}).ServerOption(nil); o != nil || err != nil {
		t.Errorf("ServerOption() without files = %v, %v; want none", o, err)
	}
}

// TestValidate: the three files go together and must load.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	c := testcerts.NewCA(t, "ca")
	caFile := filepath.Join(dir, "ca.pem")
	testcerts.Write(t, caFile, c.PEM)
	cert, key := c.Issue(t, dir, "svc")
	for _, tc := range []struct {
		name string
		cfg  grpctls.Config
		want string
	}{
		{"none", grpctls.Config{}, ""},
		{"all", grpctls.Config{CertFile: cert, KeyFile: key, CAFile: caFile}, ""},
		{"no CA", grpctls.Config{CertFile: cert, KeyFile: key}, "must be set together"},
		{"only CA", grpctls.Config{CAFile: caFile}, "must be set together"},
		{"missing key file", grpctls.Config{CertFile: cert, KeyFile: filepath.Join(dir, "nope"), CAFile: caFile}, "ORDERFLOW_GRPC_TLS_CERT_FILE"},
		{"CA not PEM", grpctls.Config{CertFile: cert, KeyFile: key, CAFile: key + ".x"}, "ORDERFLOW_GRPC_TLS_CA_FILE"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.want)
		}
	}
}
