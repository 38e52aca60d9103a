package redisconn_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestTLS starts a redis-server that speaks only TLS and requires a
// client certificate (certificates made by the test) and connects through
// the ORDERFLOW_REDIS_TLS_* configuration; a client without the CA, without
// a client certificate, or without TLS must not get through.
func TestTLS(t *testing.T) {
	certs := testenv.NewCerts(t)
	port := testenv.FreePort(t)
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
		"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	good := map[string]string{
		"ORDERFLOW_REDIS_ADDR":          addr,
		"ORDERFLOW_REDIS_TLS_CA_FILE":   certs.CA,
		"ORDERFLOW_REDIS_TLS_CERT_FILE": certs.ClientCert,
		"ORDERFLOW_REDIS_TLS_KEY_FILE":  certs.ClientKey,
		"ORDERFLOW_REDIS_DIAL_TIMEOUT":  "1s",
		"ORDERFLOW_REDIS_READ_TIMEOUT":  "1s",
		"ORDERFLOW_REDIS_WRITE_TIMEOUT": "1s",
		"ORDERFLOW_REDIS_POOL_SIZE":     "2",
	}
	ping := func(env map[string]string) error {
		cfg, err := config.LoadEnv[redisconn.Config](env)
		if err != nil {
			t.Fatal(err)
		}
		c := redisconn.New(cfg)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return redisconn.Ping(ctx, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for err := ping(good); err != nil; err = ping(good) {
		if time.Now().After(deadline) {
			t.Fatalf("Ping over TLS with CA and client certificate = %v, want PONG", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	without := func(keys ...string) map[string]string {
		env := map[string]string{}
		for k, v := range good {
			env[k] = v
		}
		for _, k := range keys {
			delete(env, k)
		}
		return env
	}
	noCA := without("ORDERFLOW_REDIS_TLS_CA_FILE")
	noTLS := without("ORDERFLOW_REDIS_TLS_CA_FILE", "ORDERFLOW_REDIS_TLS_CERT_FILE", "ORDERFLOW_REDIS_TLS_KEY_FILE")
	for name, env := range map[string]map[string]string{
		"no client certificate": without("ORDERFLOW_REDIS_TLS_CERT_FILE", "ORDERFLOW_REDIS_TLS_KEY_FILE"),
		"server's CA unknown":   noCA,
		"plain text":            noTLS,
	} {
		if err := ping(env); err == nil {
			t.Errorf("Ping with %s = nil, want refused", name)
		}
	}
	noTLS["ORDERFLOW_REDIS_TLS"] = "true"
	if err := ping(noTLS); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Ping with TLS and the system's roots = %v, want a certificate error", err)
	}
}

func TestConfigTLSFilesChecked(t *testing.T) {
	for name, tc := range map[string]struct {
		env   map[string]string
		names []string
	}{
		"CA file missing":     {map[string]string{"ORDERFLOW_REDIS_TLS_CA_FILE": "/nonexistent/ca.pem"}, []string{"ORDERFLOW_REDIS_TLS_CA_FILE"}},
		"certificate, no key": {map[string]string{"ORDERFLOW_REDIS_TLS_CERT_FILE": "/nonexistent/c.pem"}, []string{"ORDERFLOW_REDIS_TLS_CERT_FILE", "ORDERFLOW_REDIS_TLS_KEY_FILE"}},
		"key pair unreadable": {map[string]string{"ORDERFLOW_REDIS_TLS_CERT_FILE": "/nonexistent/c.pem", "ORDERFLOW_REDIS_TLS_KEY_FILE": "/nonexistent/k.pem"}, []string{"ORDERFLOW_REDIS_TLS_CERT_FILE"}},
	} {
		_, err := config.LoadEnv[redisconn.Config](tc.env) // LoadEnv validates
		for _, n := range tc.names {
			if err == nil || !strings.Contains(err.Error(), n) {
				t.Errorf("%s: Validate() = %v, want an error naming %s", name, err, n)
			}
		}
	}
}
