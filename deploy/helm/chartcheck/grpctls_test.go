package chartcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"

	"github.com/orderflow/orderflow/pkg/platform/grpctls"
	"github.com/orderflow/orderflow/pkg/testkit/testcerts"
)

var grpcTLSFiles = map[string]string{
	"ORDERFLOW_GRPC_TLS_CERT_FILE": "/etc/orderflow/grpc-tls/tls.crt",
	"ORDERFLOW_GRPC_TLS_KEY_FILE":  "/etc/orderflow/grpc-tls/tls.key",
	"ORDERFLOW_GRPC_TLS_CA_FILE":   "/etc/orderflow/grpc-tls/ca.crt",
}

// grpcTLSVolume returns the Secret a deployment mounts at
// /etc/orderflow/grpc-tls, "" for none.
func grpcTLSVolume(t *testing.T, m *Manifest, name string) string {
	t.Helper()
	for _, v := range deployment(t, m, name).Spec.Template.Spec.Volumes {
		if v.Name == "grpc-tls" && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// TestGRPCTLSIsOnByDefault: nothing travels in clear text between the
// services of a default install. The chart generates the certificates
// (one CA, a server certificate naming the reconciler's Service, a client
// certificate for the gateway), mounts each service's own, and sets
// ORDERFLOW_GRPC_TLS_*, and tells the reconciler the gateway's name
// (ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES). The rendered files are
// then served and dialled with the services' own TLS settings (package
// grpctls) on a real gRPC server: the gateway's certificate gets through;
// a plaintext caller, one with a certificate from another CA, one with a
// certificate from the same CA naming another service (the reconciler's
// own), or one expecting another server name does not. Both pods roll
// when the certificates change.
func TestGRPCTLSIsOnByDefault(t *testing.T) {
	m := render(t, nil, givenMerchantKey...)
	want := map[string]string{"of-orderflow-gateway": "of-orderflow-gateway-grpc-tls", "of-orderflow-reconciler": "of-orderflow-reconciler-grpc-tls"}
	dir := t.TempDir()
	files := map[string]grpctls.Config{}
	clientNames := map[string]string{}
	for name, secret := range want {
		vars := env(deployment(t, m, name).Spec.Template.Spec.Containers[0])
		for k, v := range grpcTLSFiles {
			if vars[k] != v {
				t.Errorf("%s %s = %q, want %q", name, k, vars[k], v)
			}
		}
		if got := grpcTLSVolume(t, m, name); got != secret {
			t.Fatalf("%s grpc-tls volume Secret = %q, want the generated %q", name, got, secret)
		}
		if _, ok := deployment(t, m, name).Spec.Template.Annotations["checksum/grpc-tls"]; !ok {
			t.Errorf("%s pod annotations lack checksum/grpc-tls (renewed certificates would not roll the pods)", name)
		}
		o, ok := m.Get("Secret", secret)
		if !ok {
			t.Fatalf("Secret %s not rendered", secret)
		}
		s := o.Value.(*corev1.Secret)
		if s.Type != corev1.SecretTypeTLS {
			t.Errorf("Secret %s type = %q, want %q", secret, s.Type, corev1.SecretTypeTLS)
		}
		c := grpctls.Config{ServerName: vars["ORDERFLOW_GRPC_TLS_SERVER_NAME"]}
		for key, field := range map[string]*string{"tls.crt": &c.CertFile, "tls.key": &c.KeyFile, "ca.crt": &c.CAFile} {
			*field = filepath.Join(dir, secret+"-"+key)
			if err := os.WriteFile(*field, s.Data[key], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		files[name] = c
		clientNames[name] = vars["ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES"]
	}
	if errs := m.Check(); len(errs) != 0 {
		t.Errorf("Check() = %v", errs)
	}
	gw, rec := files["of-orderflow-gateway"], files["of-orderflow-reconciler"]
	if gw.ServerName != "of-orderflow-reconciler" {
		t.Errorf("gateway ORDERFLOW_GRPC_TLS_SERVER_NAME = %q, want the reconciler's Service", gw.ServerName)
	}
	if got := clientNames["of-orderflow-reconciler"]; got != "of-orderflow-gateway" {
		t.Errorf("reconciler ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES = %q, want the gateway's certificate name %q", got, "of-orderflow-gateway")
	}
	if got := clientNames["of-orderflow-gateway"]; got != "" {
		t.Errorf("gateway ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES = %q, want unset (the reconciler's setting)", got)
	}

	opt, err := rec.ServerOption(strings.Split(clientNames["of-orderflow-reconciler"], ","))
	if err != nil || opt == nil {
		t.Fatalf("reconciler ServerOption() with the rendered files = %v, %v", opt, err)
	}
	check := testcerts.HealthServer(t, opt)
	gwDial, err := gw.DialOption()
	if err != nil {
		t.Fatal(err)
	}
	if err := check(gwDial); err != nil {
		t.Errorf("the gateway's rendered certificate, dialling 127.0.0.1 as %q: %v, want served", gw.ServerName, err)
	}
	stranger := testcerts.NewCA(t, "someone-elses-ca")
	strangerCert, strangerKey := stranger.Issue(t, dir, "of-orderflow-gateway")
	for name, dial := range map[string]grpc.DialOption{
		"plaintext":                               grpc.WithTransportCredentials(insecure.NewCredentials()),
		"the reconciler's CA only":                testcerts.DialOption(t, grpctls.Config{CertFile: strangerCert, KeyFile: strangerKey, CAFile: gw.CAFile, ServerName: gw.ServerName}),
		"the gateway naming another":              testcerts.DialOption(t, grpctls.Config{CertFile: gw.CertFile, KeyFile: gw.KeyFile, CAFile: gw.CAFile, ServerName: "of-orderflow-gateway"}),
		"the CA's certificate for the reconciler": testcerts.DialOption(t, grpctls.Config{CertFile: rec.CertFile, KeyFile: rec.KeyFile, CAFile: gw.CAFile, ServerName: gw.ServerName}),
	} {
		if err := check(dial); err == nil {
			t.Errorf("%s: served, want refused", name)
		}
	}

	// Each install generates its own CA.
	again := render(t, nil, givenMerchantKey...)
	o1, _ := m.Get("Secret", "of-orderflow-reconciler-grpc-tls")
	o2, _ := again.Get("Secret", "of-orderflow-reconciler-grpc-tls")
	if string(o1.Value.(*corev1.Secret).Data["ca.crt"]) == string(o2.Value.(*corev1.Secret).Data["ca.crt"]) {
		t.Error("two installs generated the same CA")
	}
}

// TestGRPCTLSValues: Secrets named in grpcTLS (cert-manager's, say) are
// mounted instead of generated ones; naming only one is refused (both
// must chain to one CA), and so is generating them for a reconciler
// outside the release; grpcTLS.clientNames replaces the gateway's name as
// the one the reconciler accepts; grpcTLS.enabled=false leaves the
// connection plaintext, for a mesh that encrypts it.
func TestGRPCTLSValues(t *testing.T) {
	m := render(t, nil, append([]string{"--set", "grpcTLS.gatewaySecret=gw-tls", "--set", "grpcTLS.reconcilerSecret=rec-tls"}, givenMerchantKey...)...)
	for name, secret := range map[string]string{"of-orderflow-gateway": "gw-tls", "of-orderflow-reconciler": "rec-tls"} {
		vars := env(deployment(t, m, name).Spec.Template.Spec.Containers[0])
		for k, want := range grpcTLSFiles {
			if vars[k] != want {
				t.Errorf("%s %s = %q, want %q", name, k, vars[k], want)
			}
		}
		if vars["ORDERFLOW_GRPC_TLS_SERVER_NAME"] != "" {
			t.Errorf("%s ORDERFLOW_GRPC_TLS_SERVER_NAME = %q with named Secrets, want unset (the host dialled)", name, vars["ORDERFLOW_GRPC_TLS_SERVER_NAME"])
		}
		if got := grpcTLSVolume(t, m, name); got != secret {
			t.Errorf("%s grpc-tls volume Secret = %q, want %q", name, got, secret)
		}
	}
	if _, ok := m.Get("Secret", "of-orderflow-gateway-grpc-tls"); ok {
		t.Error("a gRPC TLS Secret is generated although both are named")
	}
	const clientNamesVar = "ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES"
	if got := env(deployment(t, m, "of-orderflow-reconciler").Spec.Template.Spec.Containers[0])[clientNamesVar]; got != "of-orderflow-gateway" {
		t.Errorf("reconciler %s with named Secrets = %q, want the gateway's name %q", clientNamesVar, got, "of-orderflow-gateway")
	}
	named := render(t, nil, append([]string{"--set", "grpcTLS.gatewaySecret=gw-tls", "--set", "grpcTLS.reconcilerSecret=rec-tls",
		"--set", "grpcTLS.clientNames={gw.payments.example,edge-gateway}"}, givenMerchantKey...)...)
	if got := env(deployment(t, named, "of-orderflow-reconciler").Spec.Template.Spec.Containers[0])[clientNamesVar]; got != "gw.payments.example,edge-gateway" {
		t.Errorf("reconciler %s with grpcTLS.clientNames = %q, want %q", clientNamesVar, got, "gw.payments.example,edge-gateway")
	}
	if _, err := helm(t).Template(ctx(t), chartDir, nil, append([]string{"--set", "grpcTLS.gatewaySecret=gw-tls"}, givenMerchantKey...)...); err == nil || !strings.Contains(err.Error(), "grpcTLS.gatewaySecret and grpcTLS.reconcilerSecret go together") {
		t.Errorf("helm template naming only the gateway's Secret: error = %v, want one naming both values", err)
	}
	if _, err := helm(t).Template(ctx(t), chartDir, nil, append([]string{"--set", "reconciler.enabled=false"}, givenMerchantKey...)...); err == nil || !strings.Contains(err.Error(), "the reconciler is not part of this release") {
		t.Errorf("helm template of a gateway without its reconciler and no Secrets named: error = %v, want one saying so", err)
	}
	off := render(t, nil, append([]string{"--set", "grpcTLS.enabled=false"}, givenMerchantKey...)...)
	for _, name := range []string{"of-orderflow-gateway", "of-orderflow-reconciler"} {
		vars := env(deployment(t, off, name).Spec.Template.Spec.Containers[0])
		if v := vars["ORDERFLOW_GRPC_TLS_CERT_FILE"]; v != "" || vars[clientNamesVar] != "" || grpcTLSVolume(t, off, name) != "" {
			t.Errorf("%s with grpcTLS.enabled=false: ORDERFLOW_GRPC_TLS_CERT_FILE = %q, %s = %q, volume %q; want none", name, v, clientNamesVar, vars[clientNamesVar], grpcTLSVolume(t, off, name))
		}
	}
	if _, ok := off.Get("Secret", "of-orderflow-gateway-grpc-tls"); ok {
		t.Error("a gRPC TLS Secret is generated with grpcTLS.enabled=false")
	}
}
