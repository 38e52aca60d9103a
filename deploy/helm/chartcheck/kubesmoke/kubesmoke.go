// Package kubesmoke runs the orderflow chart on one host: it renders the
// chart with the local profile (deploy/local/kube-values.yaml: local
// images, host network, the host's Redis and RabbitMQ), checks that every
// variable the manifests set is read by the image's binary, starts the
// manifests with `podman kube play`, waits until every pod passes its own
// readiness probe, runs the smoke (pkg/testkit/smoke) through the gateway
// pod, kills the split-worker container in the middle of an order, and
// tears everything down (`podman kube down`) whatever happened.
//
// Where podman 4.3 lacks a Kubernetes feature the run bridges it:
//   - Services and cluster DNS: the pods share the host's network and the
//     local profile points every address the chart would derive from a
//     Service name at the loopback port (config.fulfilmentURL, ...; podman
//     4.3 ignores hostAliases on the host network); the smoke checks that
//     no Service name is left and reaches the pods the same way.
//   - Probes: podman turns probes into healthchecks that need curl in the
//     image and systemd timers on the host; the smoke runs the manifests'
//     probes itself (httpGet, grpc, tcpSocket) against the pods.
//   - Container ports: podman refuses port mappings on the host network;
//     the played Deployments leave out their containers' ports (on the
//     host network they would be the node's ports anyway).
//   - Secret volumes: podman 4.3's kube play crashes on them; each becomes
//     a hostPath directory holding the Secret's items, readable by the
//     pod's user only.
//   - Secrets: podman 4.3 stores a Secret document as YAML but reads
//     secretKeyRef values as JSON; the smoke creates each rendered Secret as
//     a podman secret of the same name (its data as JSON) and plays the
//     other documents unchanged.
package kubesmoke

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/orderflow/orderflow/deploy/helm/chartcheck"
	"github.com/orderflow/orderflow/pkg/testkit/smoke"
)

// ImageKeys are the chart's values keys of the images the smoke sets the
// tag of.
var ImageKeys = []string{"gateway", "splitWorker", "reconciler", "paysim", "fulfilmentsim"}

// Config configures a run.
type Config struct {
	// Helm renders the chart.
	Helm chartcheck.Helm
	// Podman runs the pods.
	Podman Podman
	// Chart is the chart directory; Values the local profile's values
	// files; Set more --set arguments.
	Chart  string
	Values []string
	Set    []string
	// Tag is the image tag `make images` built.
	Tag string
	// RedisAddr and AMQPURL are the servers the pods use (for cleaning
	// up the run's keys and queues afterwards).
	RedisAddr, AMQPURL string
	// ReadyTimeout bounds the wait for every pod to be ready (default 90s).
	ReadyTimeout time.Duration
	// Out receives the steps.
	Out io.Writer
}

// Run is one smoke run; it always tears down what it started.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	steps := &smoke.Steps{Out: cfg.Out}
	runID := randomID()
	prefix := "kubesmoke-" + runID
	m, rendered, err := renderChecked(ctx, steps, cfg, prefix)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "orderflow-kubesmoke-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	play := filepath.Join(dir, "play.yaml")
	defer func() {
		// Tear down with a fresh context: the run's may be cancelled.
		down, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err != nil {
			dumpLogs(down, cfg.Podman, m, cfg.Out)
		}
		err = errors.Join(err, steps.Run("tear down (podman kube down, secrets, Redis keys and queues)", func() error {
			return teardown(down, cfg, m, play, prefix)
		}))
	}()
	if err := start(ctx, steps, cfg, m, rendered, play, dir); err != nil {
		return err
	}
	return exercise(ctx, steps, m, runID, cfg.Podman, cfg.Out)
}

// renderChecked renders the chart with the run's prefix and image tag and checks
// the manifests: the chart's rules, the environment each binary reads,
// addresses and ports.
func renderChecked(ctx context.Context, steps *smoke.Steps, cfg Config, prefix string) (m *chartcheck.Manifest, rendered []byte, err error) {
	if err := steps.Run("render the chart (local profile, prefix "+prefix+")", func() error {
		// The helm test hook's pod is left out: podman would start it with
		// the release.
		args := []string{"--skip-tests", "--set", "config.redis.prefix=" + prefix, "--set", "config.amqp.prefix=" + prefix}
		for _, k := range ImageKeys {
			args = append(args, "--set-string", k+".image.tag="+cfg.Tag)
		}
		for _, s := range cfg.Set {
			args = append(args, "--set", s)
		}
		var err error
		if rendered, err = cfg.Helm.Template(ctx, cfg.Chart, cfg.Values, args...); err != nil {
			return err
		}
		objs, err := chartcheck.Decode(rendered)
		if err != nil {
			return err
		}
		m = chartcheck.NewManifest(objs)
		return errors.Join(m.Check()...)
	}); err != nil {
		return nil, nil, err
	}
	if err := steps.Run("every ORDERFLOW_* variable of the manifests is read by its image's binary", func() error {
		return errors.Join(CheckEnv(ctx, m, cfg.Podman.EnvNames)...)
	}); err != nil {
		return nil, nil, err
	}
	if err := steps.Run("no Service name left in the pods' addresses; their ports are free", func() error {
		return errors.Join(append(CheckNoServiceNames(m), portsFree(m)...)...)
	}); err != nil {
		return nil, nil, err
	}
	return m, rendered, nil
}

// start plays the manifests with podman and waits until every pod is
// ready and live.
func start(ctx context.Context, steps *smoke.Steps, cfg Config, m *chartcheck.Manifest, rendered []byte, play, dir string) error {
	if err := steps.Run("podman kube play", func() error {
		return playManifests(ctx, cfg.Podman, m, rendered, play, dir)
	}); err != nil {
		return err
	}
	if err := steps.Run("every pod ready (its readiness probe)", func() error {
		return WaitReady(ctx, cfg.Podman, m, cfg.ReadyTimeout)
	}); err != nil {
		return err
	}
	if err := steps.Run("every pod live (its liveness probe)", func() error {
		return probeAll(ctx, m, func(c *corev1.Container) *corev1.Probe { return c.LivenessProbe })
	}); err != nil {
		return err
	}

	return nil
}

// exercise runs the smoke steps against the started pods, checks the
// admin ports' metrics and kills a split-worker mid-order.
func exercise(ctx context.Context, steps *smoke.Steps, m *chartcheck.Manifest, runID string, podman Podman, out io.Writer) error {
	gateway, err := serviceURL(m, "gateway", "http")
	if err != nil {
		return err
	}
	secret, issuer, audience, err := jwtSettings(m)
	if err != nil {
		return err
	}
	if err := smoke.Run(ctx, steps, smoke.Options{
		Gateway: gateway, JWTSecret: secret, Issuer: issuer, Audience: audience, RunID: runID,
		OrderTimeout: time.Minute, PaymentTimeout: time.Minute,
	}); err != nil {
		return err
	}
	if err := steps.Run("/metrics: 404 on the gateway's public port; on the admin ports 401 without the scrape token, orderflow_ metrics with it", func() error {
		return checkMetrics(ctx, m, gateway)
	}); err != nil {
		return err
	}
	fulfilment, err := serviceURL(m, "fulfilmentsim", "http")
	if err != nil {
		return err
	}
	tok, err := smoke.Token(secret, issuer, audience, time.Now())
	if err != nil {
		return err
	}
	c := &smoke.Client{Gateway: gateway, Token: tok}
	if err := steps.Run("split-worker killed mid-order; the order still SUCCEEDED, each shipment created once", func() error {
		return killMidOrder(ctx, podman, m, c, fulfilment, "SMOKE-"+runID+"-KILL", out)
	}); err != nil {
		return err
	}
	return nil
}

// checkMetrics wants /metrics refused on the gateway's public port and
// served on every admin port with the scrape token only.
func checkMetrics(ctx context.Context, m *chartcheck.Manifest, gateway string) error {
	scrape, err := scrapeToken(m)
	if err != nil {
		return err
	}
	admin, err := serviceURL(m, "gateway", "admin")
	if err != nil {
		return err
	}
	if err := metricsOnAdminPort(ctx, gateway, admin, scrape); err != nil {
		return err
	}
	for _, c := range []string{"split-worker", "reconciler"} {
		admin, err := serviceURL(m, c, "admin")
		if err != nil {
			return err
		}
		if err := metricsNeedScrapeToken(ctx, admin, scrape); err != nil {
			return err
		}
	}
	return nil
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CheckNoServiceNames wants no Service name in any address the pods are
// given: podman has neither Services nor cluster DNS, so the local profile
// must point every address at the pods' loopback ports.
func CheckNoServiceNames(m *chartcheck.Manifest) []error {
	var services []string
	for _, o := range m.Objects {
		if o.Kind == "Service" {
			services = append(services, o.Name)
		}
	}
	var errs []error
	check := func(where, name, value string) {
		for _, s := range services {
			if strings.Contains(value, "//"+s+":") || strings.HasPrefix(value, s+":") || strings.Contains(value, "//"+s+"/") {
				errs = append(errs, fmt.Errorf("%s sets %s=%s: the Service name %s does not resolve under podman; set the address in the local profile", where, name, value, s))
			}
		}
	}
	for _, o := range m.Objects {
		switch v := o.Value.(type) {
		case *corev1.ConfigMap:
			for k, val := range v.Data {
				check("ConfigMap "+v.Name, k, val)
			}
		case *appsv1.Deployment:
			for _, c := range v.Spec.Template.Spec.Containers {
				for _, e := range c.Env {
					check("Deployment "+v.Name, e.Name, e.Value)
				}
			}
		}
	}
	return errs
}

// listenPort matches the port of a listen address variable's value.
var listenPort = regexp.MustCompile(`^(?:0\.0\.0\.0|\[::\]|)?:(\d+)$`)

// portsFree checks, before anything starts, that the ports the pods will
// listen on (host network) are free, naming the variable of each.
func portsFree(m *chartcheck.Manifest) []error {
	var errs []error
	for _, d := range m.Deployments() {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				mm := listenPort.FindStringSubmatch(e.Value)
				if !strings.HasSuffix(e.Name, "_ADDR") || mm == nil {
					continue
				}
				l, err := net.Listen("tcp", ":"+mm[1])
				if err != nil {
					errs = append(errs, fmt.Errorf("port %s (%s of %s) is taken on this host: stop what listens there (make run?)", mm[1], e.Name, d.Name))
					continue
				}
				_ = l.Close()
			}
		}
	}
	return errs
}

// playManifests creates the Secrets as podman secrets and plays every
// other rendered document as helm wrote it.
func playManifests(ctx context.Context, p Podman, m *chartcheck.Manifest, rendered []byte, play, dir string) error {
	for _, o := range m.Objects {
		s, ok := o.Value.(*corev1.Secret)
		if !ok {
			continue
		}
		data, err := json.Marshal(s.Data)
		if err != nil {
			return err
		}
		f := filepath.Join(dir, "secret-"+s.Name+".json")
		if err := os.WriteFile(f, data, 0o600); err != nil {
			return err
		}
		_, _ = p.Run(ctx, "secret", "rm", s.Name) // a leftover of an interrupted run
		if _, err := p.Run(ctx, "secret", "create", s.Name, f); err != nil {
			return err
		}
	}
	var docs []string
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(rendered), -1) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("read rendered document: %w", err)
		}
		switch meta.Kind {
		case "", "Secret":
		case "Deployment":
			d, err := bridgeDeployment([]byte(doc), m, dir)
			if err != nil {
				return err
			}
			docs = append(docs, string(d))
		default:
			docs = append(docs, doc)
		}
	}
	if err := os.WriteFile(play, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		return err
	}
	_, err := p.Run(ctx, "kube", "play", play)
	return err
}

// dumpLogs prints the last log lines of every container of the release,
// so a failed run shows what the services said.
func dumpLogs(ctx context.Context, p Podman, m *chartcheck.Manifest, out io.Writer) {
	for _, d := range m.Deployments() {
		cs, err := p.Containers(ctx, d.Name+"-pod")
		if err != nil {
			fmt.Fprintf(out, "(list containers of %s: %v)\n", d.Name, err)
			continue
		}
		for _, c := range cs {
			fmt.Fprintf(out, "--- last log lines of %s (%s, exit code %d):\n%s\n", c.Name(), c.State, c.ExitCode, strings.TrimRight(p.Logs(ctx, c.ID, 15), "\n"))
		}
	}
}

// bridgeDeployment changes a Deployment document where podman 4.3 cannot
// run it as Kubernetes would, and leaves everything else as rendered:
//   - the containers' ports are left out: podman refuses port mappings on
//     the host network (where Kubernetes treats them as the node's ports);
//   - a secret volume becomes a hostPath directory holding the Secret's
//     items as files (podman 4.3's kube play crashes on secret volumes),
//     readable by the pod's user only.
func bridgeDeployment(doc []byte, m *chartcheck.Manifest, dir string) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	var typed appsv1.Deployment
	if err := yaml.Unmarshal(doc, &typed); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	containers, _ := pod["containers"].([]any)
	for _, c := range containers {
		if c, ok := c.(map[string]any); ok {
			delete(c, "ports")
		}
	}
	volumes, _ := pod["volumes"].([]any)
	for i, v := range volumes {
		vol, _ := v.(map[string]any)
		if _, ok := vol["secret"]; !ok {
			continue
		}
		src := typed.Spec.Template.Spec.Volumes[i]
		path, err := secretDir(m, typed.Name, src, typed.Spec.Template.Spec.SecurityContext, dir)
		if err != nil {
			return nil, err
		}
		delete(vol, "secret")
		vol["hostPath"] = map[string]any{"path": path, "type": "Directory"}
	}
	return yaml.Marshal(obj)
}

// secretDir writes the items of a secret volume into a new directory and
// returns it.
func secretDir(m *chartcheck.Manifest, deployment string, vol corev1.Volume, sc *corev1.PodSecurityContext, dir string) (string, error) {
	o, ok := m.Get("Secret", vol.Secret.SecretName)
	if !ok {
		return "", fmt.Errorf("deployment %s mounts Secret %s, which is not rendered (existingSecret is not supported by the smoke)", deployment, vol.Secret.SecretName)
	}
	secret := o.Value.(*corev1.Secret)
	path := filepath.Join(dir, "volumes", deployment, vol.Name)
	if err := os.MkdirAll(path, 0o755); err != nil {
		return "", err
	}
	items := vol.Secret.Items
	if len(items) == 0 {
		for k := range secret.Data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	uid, gid := -1, -1
	if sc != nil && sc.RunAsUser != nil && os.Getuid() == 0 {
		uid, gid = int(*sc.RunAsUser), int(*sc.RunAsUser)
		if sc.RunAsGroup != nil {
			gid = int(*sc.RunAsGroup)
		}
	}
	for _, it := range items {
		data, ok := secret.Data[it.Key]
		if !ok {
			return "", fmt.Errorf("deployment %s mounts key %s of Secret %s, which has no such key", deployment, it.Key, secret.Name)
		}
		f := filepath.Join(path, it.Path)
		mode := os.FileMode(0o400)
		if uid < 0 {
			mode = 0o444 // not root: the pod's user must still read it
		}
		if err := os.WriteFile(f, data, mode); err != nil {
			return "", err
		}
		if uid >= 0 {
			if err := os.Chown(f, uid, gid); err != nil {
				return "", err
			}
		}
	}
	// The run's directory is private (0700); the pod's user must reach
	// the files through it.
	for p := path; p != dir; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			return "", err
		}
	}
	return path, os.Chmod(dir, 0o711)
}

func teardown(ctx context.Context, cfg Config, m *chartcheck.Manifest, play, prefix string) error {
	var errs []error
	if _, err := os.Stat(play); err == nil {
		// kube down stops at the first pod it cannot find (a play that
		// failed half-way); what it leaves is removed pod by pod below.
		_, _ = cfg.Podman.Run(ctx, "kube", "down", play)
	}
	for _, d := range m.Deployments() {
		left, err := cfg.Podman.Containers(ctx, d.Name+"-pod")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, pod := range podNames(left) {
			if _, err := cfg.Podman.Run(ctx, "pod", "rm", "-f", pod); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, o := range m.Objects {
		if o.Kind == "Secret" {
			_, _ = cfg.Podman.Run(ctx, "secret", "rm", o.Name)
		}
	}
	for _, d := range m.Deployments() {
		left, err := cfg.Podman.Containers(ctx, d.Name+"-pod")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, c := range left {
			errs = append(errs, fmt.Errorf("container %s of %s is still there after kube down (%s)", c.Name(), d.Name, c.State))
		}
	}
	if err := smoke.Cleanup(ctx, cfg.RedisAddr, cfg.AMQPURL, prefix); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func podNames(cs []Container) []string {
	var names []string
	for _, c := range cs {
		if !slices.Contains(names, c.PodName) {
			names = append(names, c.PodName)
		}
	}
	return names
}

// WaitReady waits until every Deployment's container passes its readiness
// probe. On timeout it says, per pod that is not ready, what the probe
// answered, the container's state and its last log lines.
func WaitReady(ctx context.Context, p Podman, m *chartcheck.Manifest, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pending := map[string]error{}
	for _, d := range m.Deployments() {
		pending[d.Name] = errors.New("not probed yet")
	}
	for {
		for _, d := range m.Deployments() {
			if _, ok := pending[d.Name]; !ok {
				continue
			}
			if err := probeDeployment(ctx, d, func(c *corev1.Container) *corev1.Probe { return c.ReadinessProbe }); err != nil {
				pending[d.Name] = err
			} else {
				delete(pending, d.Name)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return notReady(p, m, pending, timeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func notReady(p Podman, m *chartcheck.Manifest, pending map[string]error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, d := range m.Deployments() {
		probeErr, ok := pending[d.Name]
		if !ok {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Deployment %s not ready after %s: %v", d.Name, timeout, probeErr)
		cs, err := p.Containers(ctx, d.Name+"-pod")
		if err != nil {
			fmt.Fprintf(&b, "\n  (list containers: %v)", err)
		}
		for _, c := range cs {
			restarts, _ := p.RestartCount(ctx, c.ID)
			fmt.Fprintf(&b, "\n  container %s: %s, exit code %d, restarted %d times; last log lines:", c.Name(), c.State, c.ExitCode, restarts)
			for _, l := range strings.Split(strings.TrimSpace(p.Logs(ctx, c.ID, 8)), "\n") {
				fmt.Fprintf(&b, "\n    %s", l)
			}
		}
		errs = append(errs, errors.New(b.String()))
	}
	return errors.Join(errs...)
}

func probeDeployment(ctx context.Context, d *appsv1.Deployment, which func(*corev1.Container) *corev1.Probe) error {
	host := podHost(d)
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		pr := which(c)
		if pr == nil {
			continue
		}
		if err := Probe(ctx, host, c, pr); err != nil {
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
	}
	return nil
}

func probeAll(ctx context.Context, m *chartcheck.Manifest, which func(*corev1.Container) *corev1.Probe) error {
	var errs []error
	for _, d := range m.Deployments() {
		if err := probeDeployment(ctx, d, which); err != nil {
			errs = append(errs, fmt.Errorf("deployment %s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}

// podHost is the address a pod is probed at: the host's loopback for pods
// on the host network (the only kind this run starts).
func podHost(d *appsv1.Deployment) string {
	if d.Spec.Template.Spec.HostNetwork {
		return "127.0.0.1"
	}
	return d.Name // not reachable without a pod network; the local profile uses hostNetwork
}

// serviceURL is http://127.0.0.1:<port> of the Service of component with
// the port named port: the pods run on the host network.
func serviceURL(m *chartcheck.Manifest, component, port string) (string, error) {
	for _, o := range m.Objects {
		s, ok := o.Value.(*corev1.Service)
		if !ok || s.Labels["app.kubernetes.io/component"] != component {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Name == port {
				return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p.Port))), nil
			}
		}
	}
	return "", fmt.Errorf("no Service of component %s with a port %s", component, port)
}

// metricsOnAdminPort checks that the gateway's public base URL answers 404
// for /metrics and its admin base URL serves the orderflow_ metrics to
// the scrape token only.
func metricsOnAdminPort(ctx context.Context, public, admin, scrape string) error {
	code, _, err := get(ctx, public+"/metrics", scrape)
	if err != nil {
		return err
	}
	if code != http.StatusNotFound {
		return fmt.Errorf("public GET %s/metrics = %d, want 404", public, code)
	}
	return metricsNeedScrapeToken(ctx, admin, scrape)
}

// metricsNeedScrapeToken checks that an admin base URL answers 401 for
// /metrics without credentials and serves the orderflow_ metrics to the
// scrape token.
func metricsNeedScrapeToken(ctx context.Context, admin, scrape string) error {
	code, _, err := get(ctx, admin+"/metrics", "")
	if err != nil {
		return err
	}
	if code != http.StatusUnauthorized {
		return fmt.Errorf("admin GET %s/metrics without credentials = %d, want 401", admin, code)
	}
	code, body, err := get(ctx, admin+"/metrics", scrape)
	if err != nil {
		return err
	}
	if code != http.StatusOK || !strings.Contains(body, "orderflow_build_info") {
		return fmt.Errorf("admin GET %s/metrics with the scrape token = %d, want 200 with orderflow_build_info", admin, code)
	}
	return nil
}

// get GETs url with bearer as its bearer token (none when empty) and
// returns the status code and the body.
func get(ctx context.Context, url, bearer string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrapeToken reads the scrape token the services run with: the
// generated Secret's metrics-token.
func scrapeToken(m *chartcheck.Manifest) (string, error) {
	for _, o := range m.Objects {
		if v, ok := o.Value.(*corev1.Secret); ok && len(v.Data["metrics-token"]) > 0 {
			return string(v.Data["metrics-token"]), nil
		}
	}
	return "", errors.New("no rendered Secret with a metrics-token (secrets.existingSecret is not supported by the smoke)")
}

// jwtSettings reads the member-token settings the gateway runs with: the
// generated Secret's jwt-secret and the ConfigMap's issuer and audience.
func jwtSettings(m *chartcheck.Manifest) (secret []byte, issuer, audience string, err error) {
	for _, o := range m.Objects {
		switch v := o.Value.(type) {
		case *corev1.Secret:
			secret = v.Data["jwt-secret"]
		case *corev1.ConfigMap:
			issuer, audience = v.Data["ORDERFLOW_JWT_ISSUER"], v.Data["ORDERFLOW_JWT_AUDIENCE"]
		}
	}
	if len(secret) == 0 {
		return nil, "", "", errors.New("no rendered Secret with a jwt-secret (secrets.existingSecret is not supported by the smoke)")
	}
	return secret, issuer, audience, nil
}

// fulfilmentStats is the part of the fulfilment simulator's /stats the
// kill step reads.
type fulfilmentStats struct {
	Created    int `json:"created"`
	Duplicates int `json:"duplicates"`
}

func readStats(ctx context.Context, base string) (fulfilmentStats, error) {
	var st fulfilmentStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s/stats: %s", base, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// splitWorkerContainer returns the container of the split-worker's pod.
func splitWorkerContainer(ctx context.Context, p Podman, m *chartcheck.Manifest) (Container, error) {
	var worker *appsv1.Deployment
	for _, d := range m.Deployments() {
		if d.Labels["app.kubernetes.io/component"] == "split-worker" {
			worker = d
		}
	}
	if worker == nil {
		return Container{}, errors.New("no split-worker Deployment rendered")
	}
	cs, err := p.Containers(ctx, worker.Name+"-pod")
	if err != nil {
		return Container{}, err
	}
	if len(cs) != 1 {
		return Container{}, fmt.Errorf("want one split-worker container, podman lists %d", len(cs))
	}
	return cs[0], nil
}

// killMidOrder submits the sample order, kills the split-worker container
// (SIGKILL) as soon as the first shipment job exists at the fulfilment
// system, waits for podman to restart it (the pod's restartPolicy), and checks
// that the order still succeeds with each shipment created exactly once.
func killMidOrder(ctx context.Context, p Podman, m *chartcheck.Manifest, c *smoke.Client, fulfilment, orderCode string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ctr, err := splitWorkerContainer(ctx, p, m)
	if err != nil {
		return err
	}
	before, err := readStats(ctx, fulfilment)
	if err != nil {
		return err
	}
	restarts0, err := p.RestartCount(ctx, ctr.ID)
	if err != nil {
		return err
	}
	task, err := c.SubmitOrder(ctx, smoke.SampleOrder(orderCode))
	if err != nil {
		return err
	}
	for {
		st, err := readStats(ctx, fulfilment)
		if err == nil && st.Created > before.Created {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no shipment job was created for %s: %w", orderCode, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if t, err := c.Task(ctx, task.GetTaskId()); err == nil && t.GetStatus().String() != "TASK_STATUS_PROCESSING" {
		return fmt.Errorf("task %s was already %s when the split-worker was to be killed", task.GetTaskId(), t.GetStatus())
	}
	// SIGKILL the container's process from outside, as a crash or the
	// OOM killer would (`podman kill` counts as stopped by the user and is
	// not restarted).
	pid, err := p.Pid(ctx, ctr.ID)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", ctr.Name(), pid, err)
	}
	fmt.Fprintf(out, "             killed %s (SIGKILL) with the order's first shipment job running\n", ctr.Name())
	for {
		n, err := p.RestartCount(ctx, ctr.ID)
		if err == nil && n > restarts0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("podman did not restart %s: %w", ctr.Name(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "             podman restarted %s\n", ctr.Name())
	t, err := c.WaitTask(ctx, task.GetTaskId())
	if err != nil {
		return err
	}
	if err := smoke.CheckSample(t); err != nil {
		return err
	}
	after, err := readStats(ctx, fulfilment)
	if err != nil {
		return err
	}
	if got, want := after.Created-before.Created, len(t.GetResult().GetShipments()); got != want {
		return fmt.Errorf("the fulfilment system created %d shipment jobs for %d shipments", got, want)
	}
	return nil
}
