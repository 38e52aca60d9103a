package chartcheck

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	repoRoot = "../../.."
	chartDir = "../orderflow"
	allOn    = "../orderflow/ci/all-on-values.yaml"
)

// helm returns the pinned helm binary; the test fails (never skips) when it
// is missing, because `make test` installs it first.
func helm(t *testing.T) Helm {
	t.Helper()
	p, err := FindHelm(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return Helm{Path: p}
}

// ctx bounds one helm run against a hang, not for speed: a render that
// generates the RSA merchant key takes seconds of CPU and, on a busy
// 2-core machine, tens of seconds.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// givenMerchantKey sets the merchant key, so helm does not generate an RSA
// key (seconds of CPU per render) in tests about something else.
var givenMerchantKey = []string{"--set-file", "secrets.payMerchantKey=" + repoRoot + "/pkg/provider/wechatpay/testdata/dev_merchant_private_key.pem"}

func render(t *testing.T, values []string, extra ...string) *Manifest {
	t.Helper()
	out, err := helm(t).Template(ctx(t), chartDir, values, extra...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return NewManifest(objs)
}

func TestHelmIsPinned(t *testing.T) {
	v, err := helm(t).Version(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, HelmVersion) {
		t.Errorf("helm version = %q, want %s (rebuild bin/helm with `make tools`)", v, HelmVersion)
	}
}

// TestHelmRendersWithoutAKubeVersion: the pinned helm is built as helm's
// own release is, so it reports its version and `helm template` without a
// cluster or --kube-version renders the chart (a plain go install assumes
// Kubernetes 1.20, below the chart's kubeVersion).
func TestHelmRendersWithoutAKubeVersion(t *testing.T) {
	h := helm(t)
	out, err := h.Run(ctx(t), "version", "--short")
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(out)); !strings.HasPrefix(v, HelmVersion) {
		t.Errorf("helm version --short = %q, want %s (rm bin/helm; make tools)", v, HelmVersion)
	}
	args := append([]string{"template", "of", chartDir}, givenMerchantKey...)
	if _, err := h.Run(ctx(t), args...); err != nil {
		t.Errorf("helm template without --kube-version: %v (rm bin/helm; make tools)", err)
	}
}

// renderCases are the value sets the chart must lint and render cleanly.
var renderCases = []struct {
	name   string
	values []string
	set    []string
	// kinds counts the rendered objects by kind.
	kinds map[string]int
}{
	{
		name: "defaults",
		kinds: map[string]int{
			"ConfigMap": 1, "Secret": 3, "ServiceAccount": 1,
			"Deployment": 3, "Service": 3, "PodDisruptionBudget": 3, "NetworkPolicy": 3,
		},
	},
	{
		name:   "all optional parts on",
		values: []string{allOn},
		kinds: map[string]int{
			"ConfigMap": 2, "Secret": 3, "ServiceAccount": 1, "Ingress": 1,
			"Deployment": 5, "Service": 5, "PodDisruptionBudget": 3, "NetworkPolicy": 5,
			"HorizontalPodAutoscaler": 2, "ServiceMonitor": 3, "Pod": 1, "PrometheusRule": 1, "ScaledObject": 1,
		},
	},
	{
		name: "existing secret, no service account, no network policy",
		set: []string{
			"--set", "secrets.existingSecret=orderflow-credentials",
			"--set", "serviceAccount.create=false",
			"--set", "networkPolicy.enabled=false",
			"--set", "gateway.pdb.enabled=false",
		},
		kinds: map[string]int{
			"ConfigMap": 1, "Secret": 2, "Deployment": 3, "Service": 3, "PodDisruptionBudget": 2,
		},
	},
	{
		name: "gateway only",
		set: []string{
			"--set", "splitWorker.enabled=false", "--set", "reconciler.enabled=false",
			"--set", "config.reconcilerAddr=reconciler.payments:9091",
			"--set", "grpcTLS.gatewaySecret=gw-tls", "--set", "grpcTLS.reconcilerSecret=payments-tls",
		},
		kinds: map[string]int{
			"ConfigMap": 1, "Secret": 1, "ServiceAccount": 1,
			"Deployment": 1, "Service": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 1,
		},
	},
}

func TestLint(t *testing.T) {
	h := helm(t)
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.Lint(ctx(t), chartDir, tc.values, tc.set...); err != nil {
				t.Errorf("helm lint: %v", err)
			}
		})
	}
}

func TestRenderedObjectsAreValid(t *testing.T) {
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.values, tc.set...)
			for _, err := range m.Check() {
				t.Error(err)
			}
			got := map[string]int{}
			for _, o := range m.Objects {
				got[o.Kind]++
			}
			if diff := cmp.Diff(tc.kinds, got); diff != "" {
				t.Errorf("rendered kinds (-want +got):\n%s", diff)
			}
		})
	}
}

// env returns a container's plain variables and, for the ones from a
// Secret, "secret:<name>/<key>".
func env(c corev1.Container) map[string]string {
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			vars[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return vars
}

func deployment(t *testing.T, m *Manifest, name string) *appsv1.Deployment {
	t.Helper()
	o, ok := m.Get("Deployment", name)
	if !ok {
		t.Fatalf("Deployment %s not rendered", name)
	}
	return o.Value.(*appsv1.Deployment)
}

func TestDefaultEnvironment(t *testing.T) {
	m := render(t, nil)
	want := map[string]map[string]string{
		"of-orderflow-gateway": {
			"ORDERFLOW_GATEWAY_HTTP_ADDR":            "0.0.0.0:8080",
			"ORDERFLOW_GATEWAY_GRPC_ADDR":            "0.0.0.0:9090",
			"ORDERFLOW_GATEWAY_ADMIN_ADDR":           "0.0.0.0:9094",
			"ORDERFLOW_GATEWAY_RECONCILER_ADDR":      "of-orderflow-reconciler:9091",
			"ORDERFLOW_PAY_BASE_URL":                 "http://of-orderflow-paysim:8081",
			"ORDERFLOW_PAY_MERCHANT_KEY_FILE":        "/etc/orderflow/secrets/pay-merchant-key",
			"ORDERFLOW_DEV_LOGIN":                    "false",
			"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": "4", // the configured pool, for "reset to configuration"
			"ORDERFLOW_JWT_SECRET":                   "secret:of-orderflow/jwt-secret",
			"ORDERFLOW_GATEWAY_RECONCILER_TOKEN":     "secret:of-orderflow/gateway-reconciler-token",
			"ORDERFLOW_METRICS_TOKEN":                "secret:of-orderflow/metrics-token",
			"ORDERFLOW_PAY_APIV3_KEY":                "secret:of-orderflow/pay-apiv3-key",
			"ORDERFLOW_GRPC_TLS_CERT_FILE":           "/etc/orderflow/grpc-tls/tls.crt",
			"ORDERFLOW_GRPC_TLS_KEY_FILE":            "/etc/orderflow/grpc-tls/tls.key",
			"ORDERFLOW_GRPC_TLS_CA_FILE":             "/etc/orderflow/grpc-tls/ca.crt",
			"ORDERFLOW_GRPC_TLS_SERVER_NAME":         "of-orderflow-reconciler",
			"ORDERFLOW_REDIS_PASSWORD":               "secret:of-orderflow/redis-password",
			"ORDERFLOW_AMQP_URL":                     "secret:of-orderflow/amqp-url",
		},
		"of-orderflow-split-worker": {
			"ORDERFLOW_SPLITWORKER_HTTP_ADDR":        "0.0.0.0:9092",
			"ORDERFLOW_SPLITWORKER_FULFILMENT_URL":   "http://of-orderflow-fulfilmentsim:8082",
			"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": "4",
			"ORDERFLOW_METRICS_TOKEN":                "secret:of-orderflow/metrics-token",
			"ORDERFLOW_REDIS_PASSWORD":               "secret:of-orderflow/redis-password",
			"ORDERFLOW_AMQP_URL":                     "secret:of-orderflow/amqp-url",
		},
		"of-orderflow-reconciler": {
			"ORDERFLOW_RECONCILER_GRPC_ADDR":             "0.0.0.0:9091",
			"ORDERFLOW_RECONCILER_HTTP_ADDR":             "0.0.0.0:9093",
			"ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES": "of-orderflow-gateway",
			"ORDERFLOW_PAY_BASE_URL":                     "http://of-orderflow-paysim:8081",
			"ORDERFLOW_PAY_NOTIFY_URL":                   "http://of-orderflow-gateway:8080/v1/payments/notify",
			"ORDERFLOW_RECONCILE_SCHEDULE":               "5s,30s,1m,3m,5m,10m,30m",
			"ORDERFLOW_PAY_MERCHANT_KEY_FILE":            "/etc/orderflow/secrets/pay-merchant-key",
			"ORDERFLOW_GATEWAY_RECONCILER_TOKEN":         "secret:of-orderflow/gateway-reconciler-token",
			"ORDERFLOW_GRPC_TLS_CERT_FILE":               "/etc/orderflow/grpc-tls/tls.crt",
			"ORDERFLOW_GRPC_TLS_KEY_FILE":                "/etc/orderflow/grpc-tls/tls.key",
			"ORDERFLOW_GRPC_TLS_CA_FILE":                 "/etc/orderflow/grpc-tls/ca.crt",
			"ORDERFLOW_GRPC_TLS_SERVER_NAME":             "of-orderflow-reconciler",
			"ORDERFLOW_METRICS_TOKEN":                    "secret:of-orderflow/metrics-token",
			"ORDERFLOW_PAY_APIV3_KEY":                    "secret:of-orderflow/pay-apiv3-key",
			"ORDERFLOW_REDIS_PASSWORD":                   "secret:of-orderflow/redis-password",
		},
	}
	for name, wantEnv := range want {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, m, name)
			c := d.Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(wantEnv, env(c)); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "of-orderflow" {
				t.Errorf("envFrom = %+v, want the ConfigMap of-orderflow", c.EnvFrom)
			}
			if got := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 30 {
				t.Errorf("terminationGracePeriodSeconds = %d, want 30", got)
			}
		})
	}
	cm := func() map[string]string {
		o, _ := m.Get("ConfigMap", "of-orderflow")
		return o.Value.(*corev1.ConfigMap).Data
	}()
	wantCM := map[string]string{
		"ORDERFLOW_ENV":           "production",
		"ORDERFLOW_LOG_LEVEL":     "info",
		"ORDERFLOW_REDIS_ADDR":    "redis:6379",
		"ORDERFLOW_REDIS_CLUSTER": "false",
		"ORDERFLOW_REDIS_PREFIX":  "orderflow",
		"ORDERFLOW_AMQP_PREFIX":   "orderflow",

		"ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS": "1",

		"ORDERFLOW_REDIS_MIN_REPLICA_ACKS":    "0",
		"ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT": "500ms",
	}
	if diff := cmp.Diff(wantCM, cm); diff != "" {
		t.Errorf("ConfigMap data (-want +got):\n%s", diff)
	}
}

// configMapHas checks entries of the shared ConfigMap.
func configMapHas(t *testing.T, m *Manifest, want map[string]string) {
	t.Helper()
	o, _ := m.Get("ConfigMap", "of-orderflow")
	cm := o.Value.(*corev1.ConfigMap).Data
	for k, v := range want {
		if got := cm[k]; got != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, got, v)
		}
	}
}

// TestTLSValues checks that TLS to Redis and RabbitMQ reaches the services
// through the ConfigMap and that the Secret with the files is mounted where
// the variables point, in the services that connect to them only.
func TestTLSValues(t *testing.T) {
	m := render(t, nil, "--set", "config.redis.tls.enabled=true", "--set", "config.redis.tls.serverName=redis.internal",
		"--set", "config.tls.secretName=orderflow-tls", "--set", "config.tls.clientCert=true")
	configMapHas(t, m, map[string]string{
		"ORDERFLOW_REDIS_TLS":             "true",
		"ORDERFLOW_REDIS_TLS_SERVER_NAME": "redis.internal",
		"ORDERFLOW_REDIS_TLS_CA_FILE":     "/etc/orderflow/tls/ca.crt",
		"ORDERFLOW_REDIS_TLS_CERT_FILE":   "/etc/orderflow/tls/tls.crt",
		"ORDERFLOW_REDIS_TLS_KEY_FILE":    "/etc/orderflow/tls/tls.key",
		"ORDERFLOW_AMQP_TLS_CA_FILE":      "/etc/orderflow/tls/ca.crt",
		"ORDERFLOW_AMQP_TLS_CERT_FILE":    "/etc/orderflow/tls/tls.crt",
		"ORDERFLOW_AMQP_TLS_KEY_FILE":     "/etc/orderflow/tls/tls.key",
	})
	for name, want := range map[string]bool{"of-orderflow-gateway": true, "of-orderflow-split-worker": true,
		"of-orderflow-reconciler": true, "of-orderflow-paysim": false} {
		d, ok := m.Get("Deployment", name)
		if !ok {
			if want {
				t.Errorf("Deployment %s not rendered", name)
			}
			continue
		}
		spec := d.Value.(*appsv1.Deployment).Spec.Template.Spec
		mounted := false
		for _, vm := range spec.Containers[0].VolumeMounts {
			if vm.Name == "tls" && vm.MountPath == "/etc/orderflow/tls" && vm.ReadOnly {
				mounted = true
			}
		}
		secret := false
		for _, v := range spec.Volumes {
			if v.Name == "tls" && v.Secret != nil && v.Secret.SecretName == "orderflow-tls" {
				secret = true
			}
		}
		if mounted != want || secret != want {
			t.Errorf("%s: TLS Secret mounted = %v (volume %v), want %v", name, mounted, secret, want)
		}
	}
	d := render(t, nil)
	o, _ := d.Get("ConfigMap", "of-orderflow")
	for k := range o.Value.(*corev1.ConfigMap).Data {
		if strings.Contains(k, "_TLS") {
			t.Errorf("default values set %s; TLS is off by default", k)
		}
	}
}

// TestSentinelValues checks that the Sentinel values reach every service
// through the ConfigMap, and that addresses without a master name are
// refused at render time.
func TestSentinelValues(t *testing.T) {
	m := render(t, nil, "--set-string", `config.redis.sentinel.addrs=s1:26379\,s2:26379`,
		"--set", "config.redis.sentinel.master=orderflow", "--set", "config.redis.username=app")
	configMapHas(t, m, map[string]string{
		"ORDERFLOW_REDIS_SENTINEL_ADDRS":  "s1:26379,s2:26379",
		"ORDERFLOW_REDIS_SENTINEL_MASTER": "orderflow",
		"ORDERFLOW_REDIS_USERNAME":        "app",
	})
	_, err := helm(t).Template(ctx(t), chartDir, nil, "--set", "config.redis.sentinel.addrs=s1:26379")
	if err == nil || !strings.Contains(err.Error(), "ORDERFLOW_REDIS_SENTINEL_MASTER") {
		t.Errorf("helm template with sentinel addrs and no master: error = %v, want one naming ORDERFLOW_REDIS_SENTINEL_MASTER", err)
	}
}

// TestFulfilmentShardsValues checks that the running pool's shard count
// reaches the gateway and the split-workers through the ConfigMap they
// load, and that more shards than slots are refused at render time.
func TestFulfilmentShardsValues(t *testing.T) {
	m := render(t, nil, "--set", "config.fulfilmentSlots=12", "--set", "config.fulfilmentShards=3")
	configMapHas(t, m, map[string]string{"ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS": "3"})
	_, err := helm(t).Template(ctx(t), chartDir, nil, "--set", "config.fulfilmentSlots=2", "--set", "config.fulfilmentShards=3")
	if err == nil || !strings.Contains(err.Error(), "ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS") {
		t.Errorf("helm template with 3 shards of 2 slots: error = %v, want one naming ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS", err)
	}
}

// TestReplicaAckValues checks that the replica-acknowledgement values
// reach every service that writes to Redis (gateway, split-worker,
// reconciler) through the ConfigMap they load, with a Redis Cluster too
// (each master waits for its own replicas).
func TestReplicaAckValues(t *testing.T) {
	m := render(t, nil, "--set", "config.redis.minReplicaAcks=2", "--set", "config.redis.replicaAckTimeout=750ms")
	o, _ := m.Get("ConfigMap", "of-orderflow")
	cm := o.Value.(*corev1.ConfigMap).Data
	for k, want := range map[string]string{
		"ORDERFLOW_REDIS_MIN_REPLICA_ACKS":    "2",
		"ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT": "750ms",
	} {
		if got := cm[k]; got != want {
			t.Errorf("ConfigMap %s = %q, want %q", k, got, want)
		}
	}
	for _, name := range []string{"of-orderflow-gateway", "of-orderflow-split-worker", "of-orderflow-reconciler"} {
		c := deployment(t, m, name).Spec.Template.Spec.Containers[0]
		loads := false
		for _, f := range c.EnvFrom {
			loads = loads || (f.ConfigMapRef != nil && f.ConfigMapRef.Name == "of-orderflow")
		}
		if !loads {
			t.Errorf("%s: envFrom = %+v, want the ConfigMap of-orderflow (the Redis settings)", name, c.EnvFrom)
		}
		for _, k := range []string{"ORDERFLOW_REDIS_MIN_REPLICA_ACKS", "ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT"} {
			if v, set := env(c)[k]; set {
				t.Errorf("%s: env %s = %q overrides the ConfigMap's", name, k, v)
			}
		}
	}
	m = render(t, nil, "--set", "config.redis.cluster=true", "--set", "config.redis.minReplicaAcks=1")
	o, _ = m.Get("ConfigMap", "of-orderflow")
	if got := o.Value.(*corev1.ConfigMap).Data["ORDERFLOW_REDIS_MIN_REPLICA_ACKS"]; got != "1" {
		t.Errorf("with config.redis.cluster: ConfigMap ORDERFLOW_REDIS_MIN_REPLICA_ACKS = %q, want 1", got)
	}
}

// TestGeneratedSecretsAreProductionGrade checks that the Secret the chart
// generates holds nothing a service refuses in production: long random
// tokens, a 32-byte APIv3 key and a fresh RSA merchant key that is not the
// repository's development key.
func TestGeneratedSecretsAreProductionGrade(t *testing.T) {
	m := render(t, nil)
	o, ok := m.Get("Secret", "of-orderflow")
	if !ok {
		t.Fatal("Secret of-orderflow not rendered")
	}
	data := o.Value.(*corev1.Secret).Data
	for key, minLen := range map[string]int{"jwt-secret": 32, "gateway-reconciler-token": 32, "metrics-token": 32, "pay-apiv3-key": 32} {
		v := string(data[key])
		if len(v) < minLen || strings.Contains(v, "dev") {
			t.Errorf("%s = %d bytes (%q…), want a generated secret of at least %d", key, len(v), v[:min(4, len(v))], minLen)
		}
	}
	if n := len(data["pay-apiv3-key"]); n != 32 {
		t.Errorf("pay-apiv3-key is %d bytes, want 32", n)
	}
	block, _ := pem.Decode(data["pay-merchant-key"])
	if block == nil {
		t.Fatal("pay-merchant-key is not PEM")
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf("pay-merchant-key: %v", err)
	}
	if key.N.BitLen() < 2048 {
		t.Errorf("merchant key has %d bits, want at least 2048", key.N.BitLen())
	}
	devPEM, err := os.ReadFile(repoRoot + "/pkg/provider/wechatpay/testdata/dev_merchant_private_key.pem")
	if err != nil {
		t.Fatal(err)
	}
	if devBlock, _ := pem.Decode(devPEM); devBlock != nil && bytes.Contains(devBlock.Bytes, key.N.Bytes()) {
		t.Error("the chart generated the repository's development merchant key")
	}
	gw := deployment(t, m, "of-orderflow-gateway").Spec.Template.Spec
	var mounted bool
	for _, v := range gw.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "of-orderflow" && len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "pay-merchant-key" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("gateway volumes %+v do not mount pay-merchant-key", gw.Volumes)
	}
}

// TestProbes pins each service's probes to its real health endpoints:
// liveness (and startup) on /livez, which never depends on Redis or
// RabbitMQ, so an outage of either takes pods out of rotation through
// readiness (/readyz) without restarting them.
func TestProbes(t *testing.T) {
	m := render(t, []string{allOn})
	describe := func(p *corev1.Probe) string {
		switch {
		case p == nil:
			return "none"
		case p.GRPC != nil:
			return "grpc:" + strconv.Itoa(int(p.GRPC.Port))
		case p.HTTPGet != nil:
			return "http:" + p.HTTPGet.Port.String() + p.HTTPGet.Path
		}
		return "other"
	}
	tests := []struct {
		deployment, readiness, liveness string
	}{
		{"of-orderflow-gateway", "http:http/readyz", "http:http/livez"},
		{"of-orderflow-split-worker", "http:admin/readyz", "http:admin/livez"},
		{"of-orderflow-reconciler", "http:admin/readyz", "http:admin/livez"},
		{"of-orderflow-paysim", "http:http/readyz", "http:http/livez"},
		{"of-orderflow-fulfilmentsim", "http:http/readyz", "http:http/livez"},
	}
	for _, tc := range tests {
		c := deployment(t, m, tc.deployment).Spec.Template.Spec.Containers[0]
		if got := describe(c.ReadinessProbe); got != tc.readiness {
			t.Errorf("%s readiness = %s, want %s", tc.deployment, got, tc.readiness)
		}
		if got := describe(c.LivenessProbe); got != tc.liveness {
			t.Errorf("%s liveness = %s, want %s", tc.deployment, got, tc.liveness)
		}
		if got := describe(c.StartupProbe); got != tc.liveness {
			t.Errorf("%s startup = %s, want %s", tc.deployment, got, tc.liveness)
		}
	}
}

// TestServiceMonitorsPresentTheScrapeToken: the services' /metrics answers
// 401 without the scrape token, so every ServiceMonitor presents it as a
// bearer token from the Secret the services read it from (the chart's,
// or secrets.existingSecret), and the chart's Secret holds it.
func TestServiceMonitorsPresentTheScrapeToken(t *testing.T) {
	for secret, set := range map[string][]string{
		"of-orderflow": nil,
		"creds":        {"--set", "secrets.existingSecret=creds"},
	} {
		m := render(t, []string{allOn}, set...)
		for _, name := range []string{"of-orderflow-gateway", "of-orderflow-split-worker", "of-orderflow-reconciler"} {
			o, ok := m.Get("ServiceMonitor", name)
			if !ok {
				t.Fatalf("ServiceMonitor %s not rendered", name)
			}
			for _, e := range o.Value.(*ServiceMonitor).Spec.Endpoints {
				a := e.Authorization
				if a == nil || a.Credentials == nil || (a.Type != "" && a.Type != "Bearer") ||
					a.Credentials.Name != secret || a.Credentials.Key != "metrics-token" {
					t.Errorf("ServiceMonitor %s endpoint %s authorization = %+v, want Bearer from secret %s key metrics-token", name, e.Port, a, secret)
				}
			}
			c := deployment(t, m, name).Spec.Template.Spec.Containers[0]
			if got, want := env(c)["ORDERFLOW_METRICS_TOKEN"], "secret:"+secret+"/metrics-token"; got != want {
				t.Errorf("%s ORDERFLOW_METRICS_TOKEN = %q, want %q", name, got, want)
			}
		}
		if o, ok := m.Get("Secret", secret); ok && len(o.Value.(*corev1.Secret).Data["metrics-token"]) < 32 {
			t.Errorf("Secret %s metrics-token = %d bytes, want a generated token of at least 32", secret, len(o.Value.(*corev1.Secret).Data["metrics-token"]))
		}
	}
}

// TestGatewayMetricsOnAdminPort: the gateway's /metrics is scraped on its
// admin port (9094), not on the public HTTP port browsers reach; that
// port is a container and Service port, and the NetworkPolicy admits
// networkPolicy.metricsFrom to it and not to the public ports.
func TestGatewayMetricsOnAdminPort(t *testing.T) {
	m := render(t, []string{allOn})
	const name = "of-orderflow-gateway"
	o, ok := m.Get("ServiceMonitor", name)
	if !ok {
		t.Fatalf("ServiceMonitor %s not rendered", name)
	}
	sm := o.Value.(*ServiceMonitor)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints = %+v, want one: port admin, path /metrics", sm.Spec.Endpoints)
	}
	c := deployment(t, m, name).Spec.Template.Spec.Containers[0]
	if got := env(c)["ORDERFLOW_GATEWAY_ADMIN_ADDR"]; got != "0.0.0.0:9094" {
		t.Errorf("ORDERFLOW_GATEWAY_ADMIN_ADDR = %q, want 0.0.0.0:9094", got)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "admin" && p.ContainerPort == 9094 }) {
		t.Errorf("container ports %+v lack admin 9094", c.Ports)
	}
	so, _ := m.Get("Service", name)
	if !slices.ContainsFunc(so.Value.(*corev1.Service).Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Name == "admin" && p.Port == 9094 && p.TargetPort.String() == "admin"
	}) {
		t.Errorf("Service ports %+v lack admin 9094", so.Value.(*corev1.Service).Spec.Ports)
	}
	np, _ := m.Get("NetworkPolicy", name)
	var values struct {
		NetworkPolicy struct {
			MetricsFrom []networkingv1.NetworkPolicyPeer `json:"metricsFrom"`
		} `json:"networkPolicy"`
	}
	b, err := os.ReadFile(allOn)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	admin := false
	for _, r := range np.Value.(*networkingv1.NetworkPolicy).Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port.String() != "admin" {
				continue
			}
			admin = true
			if len(r.Ports) != 1 || !cmp.Equal(r.From, values.NetworkPolicy.MetricsFrom) {
				t.Errorf("NetworkPolicy rule for the admin port = %+v, want admin only, from metricsFrom %+v", r, values.NetworkPolicy.MetricsFrom)
			}
		}
	}
	if !admin {
		t.Error("the gateway's NetworkPolicy does not admit the admin port")
	}
}

func TestAllOnValues(t *testing.T) {
	m := render(t, []string{allOn})
	gw := deployment(t, m, "of-orderflow-gateway")
	if gw.Spec.Replicas != nil {
		t.Errorf("gateway replicas = %d, want unset (owned by the HPA)", *gw.Spec.Replicas)
	}
	c := gw.Spec.Template.Spec.Containers[0]
	if want := "registry.example.com/orderflow/gateway@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"; c.Image != want {
		t.Errorf("gateway image = %q, want %q", c.Image, want)
	}
	e := env(c)
	if e["ORDERFLOW_LOG_LEVEL"] != "warn" {
		t.Errorf("gateway ORDERFLOW_LOG_LEVEL = %q, want the env override warn", e["ORDERFLOW_LOG_LEVEL"])
	}
	if got := deployment(t, m, "of-orderflow-split-worker").Spec.Template.Spec.Containers[0].Image; got != "orderflow/splitworker:1.2.3" {
		t.Errorf("split-worker image = %q, want orderflow/splitworker:1.2.3", got)
	}
	sw := env(deployment(t, m, "of-orderflow-split-worker").Spec.Template.Spec.Containers[0])
	if sw["ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS"] != "8" {
		t.Errorf("split-worker slots = %q, want 8", sw["ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS"])
	}
	// The shards are in the ConfigMap every service loads: the gateway's
	// operations API must see the pool the split-workers use.
	if o, ok := m.Get("ConfigMap", "of-orderflow"); !ok || o.Value.(*corev1.ConfigMap).Data["ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS"] != "4" {
		t.Errorf("ConfigMap ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS = %v, want 4", o)
	}
	wms := env(deployment(t, m, "of-orderflow-fulfilmentsim").Spec.Template.Spec.Containers[0])
	if wms["ORDERFLOW_FULFILMENT_CAPACITY"] != "8" || wms["ORDERFLOW_FULFILMENT_ADDR"] != "0.0.0.0:8082" {
		t.Errorf("fulfilment env = %v, want capacity 8 on 0.0.0.0:8082", wms)
	}
	pay := env(deployment(t, m, "of-orderflow-paysim").Spec.Template.Spec.Containers[0])
	if pay["ORDERFLOW_PAYSIM_NOTIFY_URL"] != "http://of-orderflow-gateway:8080/v1/payments/notify" || pay["ORDERFLOW_PAYSIM_ADDR"] != "0.0.0.0:8081" {
		t.Errorf("paysim env = %v", pay)
	}
	o, _ := m.Get("ConfigMap", "of-orderflow")
	cm := o.Value.(*corev1.ConfigMap).Data
	if cm["ORDERFLOW_REDIS_CLUSTER"] != "true" || cm["ORDERFLOW_EXTRA_SETTING"] != "on" || cm["ORDERFLOW_JWT_ISSUER"] != "https://id.example.com" {
		t.Errorf("ConfigMap = %v, want cluster on, the extra setting and the issuer", cm)
	}
	o, _ = m.Get("Secret", "of-orderflow")
	sec := o.Value.(*corev1.Secret).Data
	if string(sec["amqp-url"]) != "amqps://orderflow:secret@rabbitmq:5671/" || string(sec["jwt-secret"]) != "test-jwt-secret" {
		t.Errorf("Secret data = %q", sec)
	}
	if gw.Spec.Template.Spec.ServiceAccountName != "orderflow-runner" {
		t.Errorf("serviceAccountName = %q, want orderflow-runner", gw.Spec.Template.Spec.ServiceAccountName)
	}
}

func TestExistingSecretIsReferenced(t *testing.T) {
	m := render(t, nil, "--set", "secrets.existingSecret=orderflow-credentials")
	if _, ok := m.Get("Secret", "of-orderflow"); ok {
		t.Error("a Secret is rendered although existingSecret is set")
	}
	for _, d := range m.Deployments() {
		for name, v := range env(d.Spec.Template.Spec.Containers[0]) {
			if strings.HasPrefix(v, "secret:") && !strings.HasPrefix(v, "secret:orderflow-credentials/") {
				t.Errorf("%s %s = %s, want a key of orderflow-credentials", d.Name, name, v)
			}
		}
	}
}

// TestPayKeyModes checks that the provider key files a merchant is given
// reach the gateway and the reconciler: in public-key mode the WeChat Pay
// public key is a Secret key mounted at ORDERFLOW_PAY_PUBLIC_KEY_FILE with
// its id; in platform-certificate mode the certificate is mounted at
// ORDERFLOW_PAY_PLATFORM_KEY_FILE; without the key itself the chart
// refuses to render.
func TestPayKeyModes(t *testing.T) {
	const pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode, secretValue, secretKey string
		wantEnv                      map[string]string
	}{
		{"publicKey", "secrets.payPublicKey", "pay-public-key", map[string]string{
			"ORDERFLOW_PAY_PUBLIC_KEY_FILE": "/etc/orderflow/secrets/pay-public-key",
			"ORDERFLOW_PAY_PUBLIC_KEY_ID":   "PUB_KEY_ID_0114232134912410000000000000",
		}},
		{"platformCertificate", "secrets.payPlatformCertificate", "pay-platform-certificate", map[string]string{
			"ORDERFLOW_PAY_PLATFORM_KEY_FILE": "/etc/orderflow/secrets/pay-platform-certificate",
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			args := []string{"--set", "config.pay.keyMode=" + tc.mode, givenMerchantKey[0], givenMerchantKey[1],
				"--set", "config.pay.publicKeyID=PUB_KEY_ID_0114232134912410000000000000",
				"--set-string", "config.pay.mchID=1230000109", "--set", "config.pay.appID=wxd678efh567hg6787"}
			if _, err := helm(t).Template(ctx(t), chartDir, nil, args...); err == nil || !strings.Contains(err.Error(), tc.secretValue) {
				t.Errorf("helm template in %s mode without %s: error = %v, want one naming it", tc.mode, tc.secretValue, err)
			}
			m := render(t, nil, append(args, "--set-file", tc.secretValue+"="+keyFile)...)
			o, _ := m.Get("Secret", "of-orderflow")
			if got := string(o.Value.(*corev1.Secret).Data[tc.secretKey]); got != pem {
				t.Errorf("Secret key %s = %q, want the PEM given", tc.secretKey, got)
			}
			for _, name := range []string{"of-orderflow-gateway", "of-orderflow-reconciler"} {
				pod := deployment(t, m, name).Spec.Template.Spec
				vars := env(pod.Containers[0])
				for k, want := range tc.wantEnv {
					if vars[k] != want {
						t.Errorf("%s %s = %q, want %q", name, k, vars[k], want)
					}
				}
				if vars["ORDERFLOW_PAY_MCHID"] != "1230000109" || vars["ORDERFLOW_PAY_APPID"] != "wxd678efh567hg6787" {
					t.Errorf("%s merchant ids = %q, %q; want the values given", name, vars["ORDERFLOW_PAY_MCHID"], vars["ORDERFLOW_PAY_APPID"])
				}
				var mounted []string
				for _, v := range pod.Volumes {
					if v.Name == "secret-files" {
						for _, it := range v.Secret.Items {
							mounted = append(mounted, it.Key)
						}
					}
				}
				if want := []string{"pay-merchant-key", tc.secretKey}; !slices.Equal(mounted, want) {
					t.Errorf("%s secret files = %v, want %v", name, mounted, want)
				}
			}
		})
	}
}

// TestKEDAScaledObjects checks the opt-in KEDA scaling: none by default;
// when on, the split-worker scales on its RabbitMQ queue's depth with the
// connection URL from the release's Secret, the reconciler on the delay
// queue's pending checks in Prometheus, neither Deployment keeps a replica
// count of its own, and an HPA on the same service is refused.
func TestKEDAScaledObjects(t *testing.T) {
	if m := render(t, nil, givenMerchantKey...); len(m.byKind["ScaledObject"]) != 0 {
		t.Errorf("ScaledObjects rendered by default: %v", m.byKind["ScaledObject"])
	}
	on := []string{"--set", "keda.splitWorker.enabled=true", "--set", "keda.reconciler.enabled=true",
		"--set", "keda.reconciler.prometheusURL=http://prometheus-operated.monitoring:9090",
		"--set", "config.amqp.prefix=shop", "--set", "config.redis.prefix=shop", givenMerchantKey[0], givenMerchantKey[1]}
	m := render(t, nil, on...)
	if errs := m.Check(); len(errs) != 0 {
		t.Errorf("Check() = %v", errs)
	}
	so := func(name string) ScaledObjectSpec {
		t.Helper()
		o, ok := m.Get("ScaledObject", name)
		if !ok {
			t.Fatalf("ScaledObject %s not rendered", name)
		}
		return o.Value.(*ScaledObject).Spec
	}
	split := so("of-orderflow-split-worker")
	if len(split.Triggers) != 1 {
		t.Fatalf("split-worker triggers = %+v, want one", split.Triggers)
	}
	tr := split.Triggers[0]
	wantMeta := map[string]string{"protocol": "amqp", "queueName": "shop.split", "mode": "QueueLength", "value": "20"}
	if diff := cmp.Diff(wantMeta, tr.Metadata); tr.Type != "rabbitmq" || diff != "" {
		t.Errorf("split-worker trigger %s (-want +got metadata):\n%s", tr.Type, diff)
	}
	if tr.AuthenticationRef == nil {
		t.Fatal("split-worker trigger has no authenticationRef")
	}
	a, _ := m.Get("TriggerAuthentication", tr.AuthenticationRef.Name)
	refs := a.Value.(*TriggerAuthentication).Spec.SecretTargetRef
	if len(refs) != 1 || refs[0].Parameter != "host" || refs[0].Name != "of-orderflow" || refs[0].Key != "amqp-url" {
		t.Errorf("TriggerAuthentication refs = %+v, want host from of-orderflow/amqp-url", refs)
	}
	rec := so("of-orderflow-reconciler")
	if len(rec.Triggers) != 1 || rec.Triggers[0].Type != "prometheus" {
		t.Fatalf("reconciler triggers = %+v, want one prometheus trigger", rec.Triggers)
	}
	wantMeta = map[string]string{
		"serverAddress": "http://prometheus-operated.monitoring:9090",
		"query":         `max(orderflow_delayq_pending_jobs{queue="shop:reconcile"})`,
		"threshold":     "5000",
	}
	if diff := cmp.Diff(wantMeta, rec.Triggers[0].Metadata); diff != "" {
		t.Errorf("reconciler trigger metadata (-want +got):\n%s", diff)
	}
	for _, name := range []string{"of-orderflow-split-worker", "of-orderflow-reconciler"} {
		if r := deployment(t, m, name).Spec.Replicas; r != nil {
			t.Errorf("Deployment %s replicas = %d with KEDA on, want unset", name, *r)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "keda.splitWorker.enabled=true", "--set", "splitWorker.autoscaling.enabled=true"}, "keda.splitWorker.enabled and splitWorker.autoscaling.enabled"},
		{[]string{"--set", "keda.reconciler.enabled=true"}, "keda.reconciler.prometheusURL"},
	} {
		if _, err := helm(t).Template(ctx(t), chartDir, nil, append(tc.args, givenMerchantKey...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: error = %v, want one naming %q", tc.args, err, tc.want)
		}
	}
}

// TestGeneratedSecretsAreRandom checks that an empty jwtSecret,
// gatewayReconcilerToken or metricsToken is generated, not left empty or fixed.
func TestGeneratedSecretsAreRandom(t *testing.T) {
	a, b := render(t, nil), render(t, nil)
	get := func(m *Manifest, key string) string {
		o, _ := m.Get("Secret", "of-orderflow")
		return string(o.Value.(*corev1.Secret).Data[key])
	}
	for _, key := range []string{"jwt-secret", "gateway-reconciler-token", "metrics-token"} {
		x, y := get(a, key), get(b, key)
		if len(x) < 32 || x == y {
			t.Errorf("generated %s = %q then %q, want 32+ random characters", key, x, y)
		}
	}
}

func TestSchemaRejectsBadValues(t *testing.T) {
	tests := []struct {
		name, values string
	}{
		{"replicas not an integer", "gateway:\n  replicas: two\n"},
		{"negative replicas", "reconciler:\n  replicas: -1\n"},
		{"unknown top-level key", "gatway:\n  replicas: 2\n"},
		{"unknown service key", "splitWorker:\n  replica: 2\n"},
		{"latest tag", "gateway:\n  image:\n    tag: latest\n"},
		{"bad pull policy", "gateway:\n  image:\n    pullPolicy: Sometimes\n"},
		{"env value not a string", "gateway:\n  env:\n    ORDERFLOW_X: 3\n"},
		{"enabled not a boolean", "fulfilmentsim:\n  enabled: \"yes\"\n"},
		{"zero fulfilment slots", "config:\n  fulfilmentSlots: 0\n"},
		{"zero fulfilment shards", "config:\n  fulfilmentShards: 0\n"},
		{"bad redis address", "config:\n  redis:\n    addr: redis\n"},
		{"negative replica acks", "config:\n  redis:\n    minReplicaAcks: -1\n"},
		{"replica ack timeout not a duration", "config:\n  redis:\n    replicaAckTimeout: half a second\n"},
		{"bad sentinel address", "config:\n  redis:\n    sentinel:\n      addrs: sentinel\n      master: orderflow\n"},
		{"bad schedule", "config:\n  reconcileSchedule: soon\n"},
		{"grace period below the shutdown budget", "gateway:\n  terminationGracePeriodSeconds: 5\n"},
		{"amqp url not amqp", "secrets:\n  amqpURL: http://rabbitmq\n"},
		{"empty amqp url without existing secret", "secrets:\n  amqpURL: \"\"\n"},
		{"unknown provider key mode", "config:\n  pay:\n    keyMode: pinned\n"},
		{"public-key mode without its id", "config:\n  pay:\n    keyMode: publicKey\n"},
		{"public key id not PUB_KEY_ID_", "config:\n  pay:\n    keyMode: publicKey\n    publicKeyID: \"4F2A\"\n"},
	}
	h := helm(t)
	dir := t.TempDir()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, fmt.Sprintf("values-%d.yaml", i))
			if err := os.WriteFile(f, []byte(tc.values), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := h.Template(ctx(t), chartDir, []string{f})
			if err == nil || !strings.Contains(err.Error(), "schema") {
				t.Errorf("helm template with %q: error = %v, want a schema error", tc.values, err)
			}
			err = h.Lint(ctx(t), chartDir, []string{f})
			if err == nil || !strings.Contains(err.Error(), "schema") {
				t.Errorf("helm lint with %q: error = %v, want a schema error", tc.values, err)
			}
		})
	}
}

// TestDecodeIsStrict checks that the decoder refuses what the API server
// would refuse or silently drop.
func TestDecodeIsStrict(t *testing.T) {
	tests := []struct {
		name, doc string
		want      error
	}{
		{"unknown field", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata: {}\nspec: {}\n", nil},
		{"misspelt container field", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          imagePullPolice: Always\n", nil},
		{"wrong type", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  ports:\n    - port: http\n", nil},
		{"unknown kind", "apiVersion: v1\nkind: Endpoints\nmetadata:\n  name: a\n", ErrUnknownKind},
		{"unknown ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: a\nspec:\n  selector: {}\n  endpoints:\n    - port: http\n      pathh: /metrics\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte("---\n# Source: test.yaml\n" + tc.doc))
			if err == nil {
				t.Fatalf("Decode(%q) = nil error, want one", tc.doc)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Decode(%q) = %v, want %v", tc.doc, err, tc.want)
			}
		})
	}
}

// TestChecksCatchMistakes breaks a rendered release in the ways the checks
// exist for and expects each to be reported.
func TestChecksCatchMistakes(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d *appsv1.Deployment)
		want   string
	}{
		{"latest tag", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "orderflow/gateway:latest" }, "tag must be pinned"},
		{"no tag", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "orderflow/gateway" }, "has no tag"},
		{"root", func(d *appsv1.Deployment) { *d.Spec.Template.Spec.SecurityContext.RunAsNonRoot = false }, "runAsNonRoot"},
		{"no readiness probe", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].ReadinessProbe = nil }, "no readiness probe"},
		{"probe on a missing port", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Port = intstr.FromString("nope")
		}, "not a container port"},
		{"liveness on the dependency checks", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Path = "/healthz"
		}, `liveness probe path "/healthz", want /livez`},
		{"readiness without the dependency checks", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/livez"
		}, `readiness probe path "/livez", want /readyz`},
		{"no resources", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		}, "no cpu request"},
		{"writable root", func(d *appsv1.Deployment) {
			*d.Spec.Template.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = false
		}, "writable"},
		{"short grace period", func(d *appsv1.Deployment) { *d.Spec.Template.Spec.TerminationGracePeriodSeconds = 5 }, "terminationGracePeriodSeconds"},
		{"missing secret key", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Env[len(d.Spec.Template.Spec.Containers[0].Env)-1].ValueFrom.SecretKeyRef.Key = "nope"
		}, "has no key nope"},
		{"service selects nothing", func(d *appsv1.Deployment) {
			d.Spec.Template.Labels["app.kubernetes.io/component"] = "gw"
			d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] = "gw"
		}, "selects 0 Deployments"},
	}
	out, err := helm(t).Template(ctx(t), chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode(out) // fresh objects for each case
			if err != nil {
				t.Fatal(err)
			}
			m := NewManifest(objs)
			tc.mutate(deployment(t, m, "of-orderflow-gateway"))
			var msgs []string
			for _, err := range m.Check() {
				msgs = append(msgs, err.Error())
			}
			sort.Strings(msgs)
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("Check() = %q, want an error containing %q", msgs, tc.want)
			}
		})
	}
}

// notes renders NOTES.txt, which helm template leaves out: a copy of the
// chart serves it through a template of its own.
func notes(t *testing.T, values []string, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "orderflow")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "templates", "NOTES.txt"), filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	tmpl := `notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-check.yaml"), []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--show-only", "templates/notes-check.yaml"}, extra...)
	out, err := helm(t).Template(ctx(t), dir, values, args...)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Notes string `json:"notes"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Notes
}

func TestNotes(t *testing.T) {
	tests := []struct {
		name          string
		values        []string
		set           []string
		want, notWant []string
	}{
		{
			name: "defaults",
			want: []string{
				"port-forward svc/of-orderflow-gateway 8080:8080",
				"secrets.jwtSecret is empty", "placeholder password",
				"config.fulfilmentURL is empty", "config.paymentURL is empty",
			},
			notWant: []string{"SIMULATOR", "Redis Cluster"},
		},
		{
			name:    "all optional parts on",
			values:  []string{allOn},
			want:    []string{"https://shop.example.com/", "payment provider SIMULATOR", "fulfilment SIMULATOR", "(Redis Cluster)", "N=8"},
			notWant: []string{"WARNING"},
		},
		{
			name:    "existing secret and real endpoints",
			set:     []string{"--set", "secrets.existingSecret=creds", "--set", "config.fulfilmentURL=http://wms:8082", "--set", "config.paymentURL=https://pay.example.com"},
			notWant: []string{"WARNING"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := notes(t, tc.values, tc.set...)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("NOTES lack %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("NOTES contain %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestSpreadAndAntiAffinityDefaults: by default every service's pods are
// spread over nodes and zones and prefer nodes without a pod of the same
// service (all soft); a service's own affinity replaces the default.
func TestSpreadAndAntiAffinityDefaults(t *testing.T) {
	m := render(t, nil, "--set", "reconciler.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"--set", "reconciler.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists")
	for _, d := range m.Deployments() {
		spec := d.Spec.Template.Spec
		var keys []string
		for _, c := range spec.TopologySpreadConstraints {
			keys = append(keys, c.TopologyKey+"/"+string(c.WhenUnsatisfiable))
		}
		if got, want := strings.Join(keys, " "), "kubernetes.io/hostname/ScheduleAnyway topology.kubernetes.io/zone/ScheduleAnyway"; got != want {
			t.Errorf("%s: topology spread %q, want %q", d.Name, got, want)
		}
		if strings.HasSuffix(d.Name, "-reconciler") {
			if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.PodAntiAffinity != nil {
				t.Errorf("%s: affinity %+v, want the service's node affinity only", d.Name, spec.Affinity)
			}
			continue
		}
		if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || len(spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("%s: affinity %+v, want one preferred pod anti-affinity term", d.Name, spec.Affinity)
			continue
		}
		term := spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
		if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil ||
			!cmp.Equal(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
			t.Errorf("%s: anti-affinity term %+v, want the Deployment's own selector per node", d.Name, term)
		}
	}
}

// TestHelmTestHook: `helm test` runs the smoke image against the gateway
// Service with the release's JWT secret, hardened like the services, and
// the gateway's NetworkPolicy admits it when gatewayFrom is restricted;
// without the fulfilment simulator (the sample order's catalogue) there
// is no hook.
func TestHelmTestHook(t *testing.T) {
	m := render(t, []string{allOn})
	o, ok := m.Get("Pod", "of-orderflow-smoke")
	if !ok {
		t.Fatal("Pod of-orderflow-smoke not rendered with the fulfilment simulator on")
	}
	pod := o.Value.(*corev1.Pod)
	if pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("smoke pod annotations %v, restartPolicy %s; want a helm test hook that runs once", pod.Annotations, pod.Spec.RestartPolicy)
	}
	c := pod.Spec.Containers[0]
	if !strings.Contains(c.Image, "orderflow/smoke:") || !slices.Contains(c.Args, "-gateway=http://of-orderflow-gateway:8080") {
		t.Errorf("smoke container image %s args %v, want the smoke image against the gateway Service", c.Image, c.Args)
	}
	if ref := c.Env[0].ValueFrom.SecretKeyRef; c.Env[0].Name != "ORDERFLOW_JWT_SECRET" || ref == nil || ref.Key != "jwt-secret" {
		t.Errorf("smoke env %+v, want ORDERFLOW_JWT_SECRET from the release's jwt-secret", c.Env[0])
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || pod.Spec.SecurityContext.RunAsUser == nil || *pod.Spec.SecurityContext.RunAsUser != 65532 {
		t.Errorf("smoke pod not hardened: %+v %+v", pod.Spec.SecurityContext, sc)
	}
	np, ok := m.Get("NetworkPolicy", "of-orderflow-gateway")
	if !ok {
		t.Fatal("gateway NetworkPolicy not rendered")
	}
	admitted := false
	for _, peer := range np.Value.(*networkingv1.NetworkPolicy).Spec.Ingress[0].From {
		if peer.PodSelector != nil && peer.PodSelector.MatchLabels["app.kubernetes.io/component"] == "smoke" {
			admitted = true
		}
	}
	if !admitted {
		t.Error("the gateway's NetworkPolicy does not admit the smoke pod while gatewayFrom is restricted")
	}
	if _, ok := render(t, nil).Get("Pod", "of-orderflow-smoke"); ok {
		t.Error("smoke pod rendered without the fulfilment simulator")
	}
}

// TestChartREADMEDocumentsEveryValue fails when a value in values.yaml has
// no description, or when the chart README's value tables differ from
// what values.yaml says (a value added, removed, renamed, re-described or
// given another default without `make chart-readme`).
func TestChartREADMEDocumentsEveryValue(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	table, err := ValuesDoc(values)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := SpliceValuesDoc(readme, table)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(readme)); diff != "" {
		t.Errorf("deploy/helm/orderflow/README.md disagrees with values.yaml; run make chart-readme (-want +got):\n%s", diff)
	}
	// A value that is added without a comment is refused.
	if _, err := ValuesDoc(append(values, []byte("\nundocumented: 1\n")...)); err == nil || !strings.Contains(err.Error(), "undocumented") {
		t.Errorf("ValuesDoc with an undocumented value: error = %v, want one naming it", err)
	}
	// A changed default shows up as a difference.
	changed := bytes.Replace(values, []byte("fulfilmentSlots: 4"), []byte("fulfilmentSlots: 5"), 1)
	other, err := ValuesDoc(changed)
	if err != nil || bytes.Equal(other, table) {
		t.Errorf("ValuesDoc with another default = same table (%v), want a difference", err)
	}
}
