package stacktest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// runRefused runs a service binary with only env set (no ORDERFLOW_*
// variable inherited) and returns its output; it fails the test unless
// the process exits non-zero on its own.
func runRefused(t *testing.T, name string, env ...string) string {
	t.Helper()
	bin := stacktest.Binary(t, name) // built once, before the clock starts
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("%s with %v: err %v, want a non-zero exit at start; output:\n%s", name, env, err, out.String())
	}
	return out.String()
}

// TestProductionRefusesDevSecrets starts the real binaries in production
// (ORDERFLOW_ENV unset or production) without their secrets, with the
// published development values, with short ones, with one value for two
// credentials and with the dev login: each exits non-zero with one line
// naming each variable.
func TestProductionRefusesDevSecrets(t *testing.T) {
	strong := "s3cret-" + strings.Repeat("x", 40)
	tests := []struct {
		name    string
		service string
		env     []string
		want    []string
		notWant string
	}{
		{"gateway without secrets", stacktest.Gateway, nil,
			[]string{"ORDERFLOW_JWT_SECRET is not set", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN is not set", "ORDERFLOW_METRICS_TOKEN is not set", "ORDERFLOW_PAY_APIV3_KEY is not set", "ORDERFLOW_PAY_MERCHANT_KEY_FILE is not set"}, ""},
		{"gateway explicit production with dev values", stacktest.Gateway,
			[]string{"ORDERFLOW_ENV=production", "ORDERFLOW_JWT_SECRET=orderflow-dev-secret-change-me", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN=dev-gateway-reconciler-token", "ORDERFLOW_METRICS_TOKEN=dev-metrics-token", "ORDERFLOW_PAY_APIV3_KEY=orderflow-dev-apiv3-key-32-bytes", "ORDERFLOW_PAY_MERCHANT_KEY_FILE=../../provider/wechatpay/testdata/dev_merchant_private_key.pem"},
			[]string{"ORDERFLOW_JWT_SECRET is a published development value", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN is a published development value", "ORDERFLOW_METRICS_TOKEN is a published development value", "ORDERFLOW_PAY_APIV3_KEY is a published development value", "ORDERFLOW_PAY_MERCHANT_KEY_FILE is the published development key"}, ""},
		{"gateway short secret and dev login", stacktest.Gateway,
			[]string{"ORDERFLOW_JWT_SECRET=short-secret-0123456789", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN=" + strong, "ORDERFLOW_DEV_LOGIN=true"},
			[]string{"ORDERFLOW_JWT_SECRET must be at least 32 bytes", "ORDERFLOW_DEV_LOGIN=true is refused"}, ""},
		{"gateway with an identity provider needs no JWT secret", stacktest.Gateway,
			[]string{"ORDERFLOW_JWT_JWKS_URL=http://127.0.0.1:1/jwks.json"},
			[]string{"ORDERFLOW_GATEWAY_RECONCILER_TOKEN is not set"}, "ORDERFLOW_JWT_SECRET"},
		{"reconciler without secrets", stacktest.Reconciler, nil,
			[]string{"ORDERFLOW_GATEWAY_RECONCILER_TOKEN is not set", "ORDERFLOW_METRICS_TOKEN is not set", "ORDERFLOW_PAY_APIV3_KEY is not set"}, ""},
		{"split-worker without secrets", stacktest.SplitWorker, nil,
			[]string{"ORDERFLOW_METRICS_TOKEN is not set"}, "ORDERFLOW_GATEWAY_RECONCILER_TOKEN"},
		{"gateway with one value for two credentials", stacktest.Gateway,
			[]string{"ORDERFLOW_GATEWAY_RECONCILER_TOKEN=" + strong, "ORDERFLOW_METRICS_TOKEN=" + strong, "ORDERFLOW_JWT_SECRET=" + strong},
			[]string{"ORDERFLOW_GATEWAY_RECONCILER_TOKEN and ORDERFLOW_METRICS_TOKEN hold the same value", "ORDERFLOW_GATEWAY_RECONCILER_TOKEN and ORDERFLOW_JWT_SECRET hold the same value", "ORDERFLOW_METRICS_TOKEN and ORDERFLOW_JWT_SECRET hold the same value"}, ""},
		{"reconciler with one value for two credentials", stacktest.Reconciler,
			[]string{"ORDERFLOW_GATEWAY_RECONCILER_TOKEN=" + strong, "ORDERFLOW_METRICS_TOKEN=" + strong},
			[]string{"ORDERFLOW_GATEWAY_RECONCILER_TOKEN and ORDERFLOW_METRICS_TOKEN hold the same value"}, ""},
		{"unknown environment", stacktest.Gateway, []string{"ORDERFLOW_ENV=staging"},
			[]string{"ORDERFLOW_ENV must be production or development"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := runRefused(t, tt.service, tt.env...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			for _, w := range tt.want {
				if !strings.Contains(last, w) {
					t.Errorf("last output line %q does not name %q", last, w)
				}
			}
			if tt.notWant != "" && strings.Contains(last, tt.notWant) {
				t.Errorf("last output line %q names %q", last, tt.notWant)
			}
			if strings.Contains(out, strong) {
				t.Errorf("output reveals a secret: %s", out)
			}
		})
	}
}
