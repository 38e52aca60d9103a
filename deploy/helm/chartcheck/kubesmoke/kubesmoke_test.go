package kubesmoke

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orderflow/orderflow/deploy/helm/chartcheck"
)

const (
	repoRoot     = "../../../.."
	chartDir     = "../../orderflow"
	localProfile = "../../../local/kube-values.yaml"
)

func helm(t *testing.T) chartcheck.Helm {
	t.Helper()
	p, err := chartcheck.FindHelm(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return chartcheck.Helm{Path: p}
}

func render(t *testing.T, chart string, values []string, extra ...string) *chartcheck.Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := helm(t).Template(ctx, chart, values, extra...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chartcheck.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return chartcheck.NewManifest(objs)
}

// rendered caches renders of the chart: helm template is slow (the chart
// generates RSA keys), so tests share them and change copies in memory.
var rendered struct {
	mu sync.Mutex
	m  map[string][]byte
}

// renderCached renders the chart with args once per test binary and
// returns a fresh decoded copy.
func renderCached(t *testing.T, args ...string) *chartcheck.Manifest {
	t.Helper()
	key := strings.Join(args, " ")
	rendered.mu.Lock()
	defer rendered.mu.Unlock()
	out, ok := rendered.m[key]
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var err error
		if out, err = helm(t).Template(ctx, chartDir, nil, args...); err != nil {
			t.Fatal(err)
		}
		if rendered.m == nil {
			rendered.m = map[string][]byte{}
		}
		rendered.m[key] = out
	}
	objs, err := chartcheck.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return chartcheck.NewManifest(objs)
}

// binaries builds the five services once (the same `go build` as
// pkg/testkit/stacktest, so `make test` reuses its build cache) and
// returns an EnvNamesFunc that runs the binary an image names.
var binaries struct {
	once sync.Once
	dir  string
	err  error
}

func envNames(t *testing.T) EnvNamesFunc {
	t.Helper()
	binaries.once.Do(func() {
		binaries.dir, binaries.err = os.MkdirTemp("", "orderflow-kubesmoke-bin-")
		if binaries.err != nil {
			return
		}
		args := []string{"build", "-o", binaries.dir + string(os.PathSeparator)}
		for _, s := range []string{"gateway", "splitworker", "reconciler", "paysim", "fulfilmentsim"} {
			args = append(args, "./services/"+s+"/cmd/"+s)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			binaries.err = &buildError{err, string(out)}
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return func(ctx context.Context, image string) ([]string, error) {
		out, err := exec.CommandContext(ctx, filepath.Join(binaries.dir, Binary(image)), "--env-names").Output()
		if err != nil {
			return nil, err
		}
		return strings.Fields(string(out)), nil
	}
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// TestChartVariablesAreReadByTheBinaries is the fast half of the kube
// smoke's first check: every ORDERFLOW_* variable the chart gives a pod
// (default values with the simulators on, and the local profile) is read
// by that pod's binary.
func TestChartVariablesAreReadByTheBinaries(t *testing.T) {
	names := envNames(t)
	for name, args := range map[string][]string{
		"defaults":      {"--set", "paysim.enabled=true", "--set", "fulfilmentsim.enabled=true"},
		"local profile": {"--values", localProfile},
	} {
		t.Run(name, func(t *testing.T) {
			m := renderCached(t, args...)
			for _, err := range CheckEnv(context.Background(), m, names) {
				t.Error(err)
			}
		})
	}
}

// TestRenamedVariableFailsTheSmoke renames, in a copy of the chart, a
// variable to one no binary reads and expects the kube smoke's check to
// name it, the Deployment and the binary.
func TestRenamedVariableFailsTheSmoke(t *testing.T) {
	names := envNames(t)
	chart := copyChart(t)
	tmpl := filepath.Join(chart, "templates", "splitworker.yaml")
	data, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	const from, to = `"ORDERFLOW_SPLITWORKER_FULFILMENT_URL"`, `"ORDERFLOW_SPLITWORKER_FULFILMENT_ENDPOINT"`
	if !bytes.Contains(data, []byte(from)) {
		t.Fatalf("%s does not set %s: update the test", tmpl, from)
	}
	if err := os.WriteFile(tmpl, bytes.Replace(data, []byte(from), []byte(to), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	m := render(t, chart, []string{localProfile})
	var msgs []string
	for _, err := range CheckEnv(context.Background(), m, names) {
		msgs = append(msgs, err.Error())
	}
	got := strings.Join(msgs, "\n")
	for _, want := range []string{"orderflow-split-worker", "ORDERFLOW_SPLITWORKER_FULFILMENT_ENDPOINT", "splitworker does not read", "ORDERFLOW_SPLITWORKER_FULFILMENT_URL"} {
		if !strings.Contains(got, want) {
			t.Errorf("CheckEnv = %q, want it to mention %q", got, want)
		}
	}
}

// TestSharedSettingReadByNoBinary: a ConfigMap key none of the services
// loading it reads fails the check.
func TestSharedSettingReadByNoBinary(t *testing.T) {
	m := renderCached(t, "--values", localProfile)
	for _, o := range m.Objects {
		if cm, ok := o.Value.(*corev1.ConfigMap); ok {
			cm.Data["ORDERFLOW_REDIS_ADRESS"] = "x:1"
		}
	}
	var msgs []string
	for _, err := range CheckEnv(context.Background(), m, envNames(t)) {
		msgs = append(msgs, err.Error())
	}
	if got := strings.Join(msgs, "\n"); !strings.Contains(got, "sets ORDERFLOW_REDIS_ADRESS, which none of the binaries loading it") {
		t.Errorf("CheckEnv = %q, want the misspelt shared setting named", got)
	}
}

func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "orderflow")
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestLocalProfileLeavesNoServiceName: podman has no cluster DNS, so the
// local profile must set every address the chart derives from a Service.
func TestLocalProfileLeavesNoServiceName(t *testing.T) {
	m := renderCached(t, "--values", localProfile)
	for _, err := range CheckNoServiceNames(m) {
		t.Error(err)
	}
	for _, d := range m.Deployments() {
		for i, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "ORDERFLOW_SPLITWORKER_FULFILMENT_URL" {
				d.Spec.Template.Spec.Containers[0].Env[i].Value = "http://orderflow-fulfilmentsim:8082"
			}
		}
	}
	errs := CheckNoServiceNames(m)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "ORDERFLOW_SPLITWORKER_FULFILMENT_URL=http://orderflow-fulfilmentsim:8082") {
		t.Errorf("CheckNoServiceNames with the chart's default fulfilment URL = %v, want it named", errs)
	}
}

// TestProbeAnswers runs the probe runner against real servers: a ready
// one, one answering 503 (the reason must be in the error), and a closed
// port.
func TestProbeAnswers(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer ready.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "redis: connection refused", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()

	port := func(s *httptest.Server) int { return s.Listener.Addr().(*net.TCPAddr).Port }
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: int32(port(ready))}}}
	httpProbe := func(p intstr.IntOrString) *corev1.Probe {
		return &corev1.Probe{TimeoutSeconds: 2, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: p}}}
	}
	ctx := context.Background()
	if err := Probe(ctx, "127.0.0.1", c, httpProbe(intstr.FromString("admin"))); err != nil {
		t.Errorf("probe of a ready server by port name: %v", err)
	}
	if err := Probe(ctx, "127.0.0.1", c, httpProbe(intstr.FromInt32(int32(port(down))))); err == nil || !strings.Contains(err.Error(), "503 redis: connection refused") {
		t.Errorf("probe of a 503 server = %v, want the status and the reason", err)
	}
	if err := Probe(ctx, "127.0.0.1", c, httpProbe(intstr.FromInt32(int32(closedPort)))); err == nil {
		t.Error("probe of a closed port succeeded")
	}
	if err := Probe(ctx, "127.0.0.1", c, httpProbe(intstr.FromString("http"))); err == nil || !strings.Contains(err.Error(), `no port named "http"`) {
		t.Errorf("probe of an undeclared port name = %v", err)
	}
	grpcProbe := &corev1.Probe{TimeoutSeconds: 1, ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(closedPort)}}}
	if err := Probe(ctx, "127.0.0.1", c, grpcProbe); err == nil {
		t.Error("gRPC probe of a closed port succeeded")
	}
}

// TestWaitReadyNamesTheFailingPod: a pod whose readiness probe keeps
// failing ends the wait with the Deployment's name and the probe's answer.
func TestWaitReadyNamesTheFailingPod(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "amqp: not connected", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	port := down.Listener.Addr().(*net.TCPAddr).Port
	d := &appsv1.Deployment{}
	d.Name = "orderflow-split-worker"
	d.Spec.Template.Spec.HostNetwork = true
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "split-worker", ReadinessProbe: &corev1.Probe{
		TimeoutSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(port))}},
	}}}
	m := chartcheck.NewManifest([]chartcheck.Object{{Kind: "Deployment", Name: d.Name, Value: d}})
	// No podman here: the container listing fails and the report says so,
	// after the probe's answer.
	err := WaitReady(context.Background(), Podman{Path: "/nonexistent/podman"}, m, time.Second)
	if err == nil {
		t.Fatal("WaitReady succeeded on a pod answering 503")
	}
	for _, want := range []string{"Deployment orderflow-split-worker not ready after 1s", "503 amqp: not connected", "list containers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("WaitReady = %q, want it to contain %q", err, want)
		}
	}
}
