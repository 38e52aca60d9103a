// Package stacktest starts a whole orderflow stack as real processes for
// end-to-end, browser and fault tests: it builds the service binaries once
// per test binary, runs each on free loopback ports with a unique Redis key
// prefix and AMQP name prefix, and lets a test kill (SIGKILL), stop
// (SIGTERM) and restart any of them. Each process logs to a file in the
// test's temporary directory; the logs' tails are printed when the test
// fails. At the end the processes are stopped and the prefix's Redis keys
// and RabbitMQ queues are deleted.
//
// Services whose command directory does not exist in the repository are
// not started (Available lists the ones that are); Options.Services makes
// the list explicit. Options.Replicas runs more than one instance of a
// service (instances "splitworker", "splitworker-2", …); every method that
// takes a name takes an instance name.
package stacktest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// The services a stack can run, by the name of their command.
const (
	Gateway     = "gateway"
	SplitWorker = "splitworker"
	Reconciler  = "reconciler"
	PaySim      = "paysim"
	Fulfilment  = "fulfilmentsim"
)

// JWTSecret is the HS256 secret every process of a stack shares.
const JWTSecret = "stacktest-jwt-secret-0123456789abcdef"

// GatewayReconcilerToken is the token with which a stack's gateway calls
// its reconciler.
const GatewayReconcilerToken = "stacktest-gateway-reconciler-token"

// MetricsToken is the scrape token of a stack: it reads /metrics on the
// services' admin ports (see GetMetrics).
const MetricsToken = "stacktest-metrics-token"

// Services returns every service name in start order (dependencies first).
func Services() []string {
	return []string{Fulfilment, PaySim, Reconciler, SplitWorker, Gateway}
}

// addrEnv names the environment variables that carry a service's listen
// addresses: the HTTP one (public or admin, serving /healthz) and the gRPC
// one, if it has one.
func addrEnv(name string) (httpVar, grpcVar string) {
	switch name {
	case Gateway:
		return "ORDERFLOW_GATEWAY_HTTP_ADDR", "ORDERFLOW_GATEWAY_GRPC_ADDR"
	case SplitWorker:
		return "ORDERFLOW_SPLITWORKER_HTTP_ADDR", ""
	case Reconciler:
		return "ORDERFLOW_RECONCILER_HTTP_ADDR", "ORDERFLOW_RECONCILER_GRPC_ADDR"
	case PaySim:
		return "ORDERFLOW_PAYSIM_ADDR", ""
	case Fulfilment:
		return "ORDERFLOW_FULFILMENT_ADDR", ""
	}
	return "", ""
}

// Options configure a stack. The zero value starts every available
// service with test-friendly settings.
type Options struct {
	// Services to start, in any order; nil means Available(). Naming a
	// service that was not built fails the test.
	Services []string
	// Env is added to every process's environment after the defaults.
	Env map[string]string
	// ServiceEnv is added to one service's environment after Env: keyed by
	// service name it applies to every instance of the service, keyed by
	// instance name (e.g. "splitworker-2") to that instance only, last.
	ServiceEnv map[string]map[string]string
	// Replicas runs this many instances of a service (1 when absent). The
	// others address the first instance.
	Replicas map[string]int
	// RedisAddr and AMQPURL default to testenv.RedisAddr and
	// testenv.AMQPURL; a comma list of RedisAddr is a Redis Cluster.
	RedisAddr, AMQPURL string
	// Queues are extra RabbitMQ queues (full names) deleted at cleanup,
	// besides the split-job topology of the prefix.
	Queues []string
	// ReadyTimeout bounds the wait for a process's /healthz (30 s when 0).
	ReadyTimeout time.Duration
	// Host, when set, is by instance where each process runs: it listens
	// on the host's address (127.0.0.1 otherwise) and is started
	// (restarted too) through the host's Wrap. Fault tests run processes
	// in network namespaces of their own so as to partition
	// them.
	Host func(inst string) testenv.Host
}

// Stack is a running set of orderflow processes.
type Stack struct {
	t         testing.TB
	binDir    string
	logDir    string
	prefix    string
	redisAddr string
	amqpURL   string
	ready     time.Duration
	queues    []string

	mu    sync.Mutex
	procs map[string]*process
	order []string
	host  func(inst string) testenv.Host
}

type process struct {
	name     string
	service  string
	httpAddr string
	grpcAddr string
	env      map[string]string
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
}

// Start builds (once) and starts the stack's services and waits until each
// answers its /healthz. Everything is stopped and cleaned up when the test
// ends.
func Start(t testing.TB, opts Options) *Stack {
	t.Helper()
	binDir, built, err := build()
	if err != nil {
		t.Fatalf("build services: %v", err)
	}
	names := opts.Services
	if names == nil {
		names = built
	}
	for _, n := range names {
		if !slices.Contains(built, n) {
			t.Fatalf("service %q is not in this repository (built: %v)", n, built)
		}
	}
	s := &Stack{
		t:         t,
		binDir:    binDir,
		logDir:    t.TempDir(),
		prefix:    testenv.Prefix(t),
		redisAddr: opts.RedisAddr,
		amqpURL:   opts.AMQPURL,
		ready:     opts.ReadyTimeout,
		procs:     make(map[string]*process),
		host:      opts.Host,
	}
	if s.redisAddr == "" {
		s.redisAddr = testenv.RedisAddr()
	}
	if s.amqpURL == "" {
		s.amqpURL = testenv.AMQPURL()
	}
	if s.ready == 0 {
		s.ready = 30 * time.Second
	}
	s.queues = opts.Queues

	// Every service gets addresses, started or not, so the others know
	// where it would be.
	addrs := map[string][2]string{}
	for _, n := range Services() {
		addrs[n] = s.listenAddrs(n, n)
	}
	for _, n := range Services() {
		if !slices.Contains(names, n) {
			continue
		}
		for i := range max(1, opts.Replicas[n]) {
			inst, own := n, addrs[n]
			if i > 0 {
				inst = fmt.Sprintf("%s-%d", n, i+1)
				own = s.listenAddrs(n, inst)
			}
			env := s.defaultEnv(n, own, addrs)
			if n == Gateway {
				// Every instance gets its own admin port (/metrics).
				env["ORDERFLOW_GATEWAY_ADMIN_ADDR"] = fmt.Sprintf("%s:%d", s.hostOf(inst).Addr, testenv.FreePort(t))
			}
			for _, overrides := range []map[string]string{opts.Env, opts.ServiceEnv[n], opts.ServiceEnv[inst]} {
				for k, v := range overrides {
					env[k] = v
				}
			}
			s.procs[inst] = &process{
				name:     inst,
				service:  n,
				httpAddr: own[0],
				grpcAddr: own[1],
				env:      env,
				logPath:  filepath.Join(s.logDir, inst+".log"),
			}
			s.order = append(s.order, inst)
		}
	}
	t.Cleanup(s.cleanup)
	for _, n := range s.order {
		s.launch(n)
	}
	for _, n := range s.order {
		s.waitReady(n)
	}
	t.Logf("stacktest: %v up, prefix %s, logs in %s", s.order, s.prefix, s.logDir)
	return s
}

// hostOf is where the instance runs.
func (s *Stack) hostOf(inst string) testenv.Host {
	if s.host == nil {
		return testenv.Loopback("127.0.0.1")
	}
	return s.host(inst)
}

// listenAddrs are free HTTP and gRPC addresses (empty when it has none)
// for instance inst of service name, on its host.
func (s *Stack) listenAddrs(name, inst string) [2]string {
	hv, gv := addrEnv(name)
	h := s.hostOf(inst).Addr
	var a [2]string
	if hv != "" {
		a[0] = fmt.Sprintf("%s:%d", h, testenv.FreePort(s.t))
	}
	if gv != "" {
		a[1] = fmt.Sprintf("%s:%d", h, testenv.FreePort(s.t))
	}
	return a
}

// defaultEnv is the environment of an instance of service name listening
// on own, before the test's overrides; addrs are the first instances'.
func (s *Stack) defaultEnv(name string, own [2]string, addrs map[string][2]string) map[string]string {
	url := func(n string) string { return "http://" + addrs[n][0] }
	env := map[string]string{
		"ORDERFLOW_ENV":           "development",
		"ORDERFLOW_REDIS_ADDR":    s.redisAddr,
		"ORDERFLOW_REDIS_PREFIX":  s.prefix,
		"ORDERFLOW_AMQP_URL":      s.amqpURL,
		"ORDERFLOW_AMQP_PREFIX":   s.prefix,
		"ORDERFLOW_JWT_SECRET":    JWTSecret,
		"ORDERFLOW_METRICS_TOKEN": MetricsToken,
		"ORDERFLOW_LOG_LEVEL":     "debug",
	}
	hv, gv := addrEnv(name)
	env[hv] = own[0]
	if gv != "" {
		env[gv] = own[1]
	}
	notify := url(Gateway) + "/v1/payments/notify"
	switch name {
	case Gateway:
		env["ORDERFLOW_DEV_LOGIN"] = "true"
		env["ORDERFLOW_GATEWAY_RECONCILER_ADDR"] = addrs[Reconciler][1]
		env["ORDERFLOW_GATEWAY_RECONCILER_TOKEN"] = GatewayReconcilerToken
		// The callback's signature is checked with the keys fetched here.
		env["ORDERFLOW_PAY_BASE_URL"] = url(PaySim)
	case SplitWorker:
		env["ORDERFLOW_SPLITWORKER_FULFILMENT_URL"] = url(Fulfilment)
	case Reconciler:
		env["ORDERFLOW_GATEWAY_RECONCILER_TOKEN"] = GatewayReconcilerToken
		env["ORDERFLOW_PAY_BASE_URL"] = url(PaySim)
		env["ORDERFLOW_PAY_NOTIFY_URL"] = notify
		env["ORDERFLOW_RECONCILE_SCHEDULE"] = "1s,2s,3s"
	case PaySim:
		env["ORDERFLOW_PAYSIM_NOTIFY_URL"] = notify
		env["ORDERFLOW_PAYSIM_MIN_CLOSE_AGE"] = "2s"
	case Fulfilment:
		env["ORDERFLOW_FULFILMENT_JOB_MIN"] = "50ms"
		env["ORDERFLOW_FULFILMENT_JOB_MAX"] = "200ms"
	}
	return env
}

// Prefix is the stack's Redis key prefix and AMQP name prefix.
func (s *Stack) Prefix() string { return s.prefix }

// RedisAddr is the Redis server the stack uses.
func (s *Stack) RedisAddr() string { return s.redisAddr }

// AMQPURL is the RabbitMQ server the stack uses.
func (s *Stack) AMQPURL() string { return s.amqpURL }

// Names are the instances this stack runs, in start order.
func (s *Stack) Names() []string { return slices.Clone(s.order) }

// Has reports whether the stack runs the service.
func (s *Stack) Has(name string) bool {
	_, ok := s.procs[name]
	return ok
}

func (s *Stack) proc(name string) *process {
	p, ok := s.procs[name]
	if !ok {
		s.t.Helper()
		s.t.Fatalf("stacktest: service %q is not part of this stack %v", name, s.order)
	}
	return p
}

// HTTPAddr is the service's HTTP listen address (host:port).
func (s *Stack) HTTPAddr(name string) string { return s.proc(name).httpAddr }

// GRPCAddr is the service's gRPC listen address, empty when it has none.
func (s *Stack) GRPCAddr(name string) string { return s.proc(name).grpcAddr }

// URL is the base URL of the service's HTTP server, e.g. the gateway's
// page and REST API.
func (s *Stack) URL(name string) string { return "http://" + s.proc(name).httpAddr }

// MetricsURL is the URL of the service's /metrics: on the gateway's admin
// port, on the other services' only HTTP port.
func (s *Stack) MetricsURL(name string) string {
	if a := s.Env(name, "ORDERFLOW_GATEWAY_ADMIN_ADDR"); s.proc(name).service == Gateway && a != "" {
		return "http://" + a + "/metrics"
	}
	return s.URL(name) + "/metrics"
}

// GetMetrics GETs the service's /metrics (MetricsURL) with the stack's
// scrape token; the caller closes the response's body.
func (s *Stack) GetMetrics(name string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, s.MetricsURL(name), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+MetricsToken)
	return http.DefaultClient.Do(req)
}

// LogPath is the file the service's output goes to.
func (s *Stack) LogPath(name string) string { return s.proc(name).logPath }

// Env returns the service's environment variable key as it will be at
// its next start.
func (s *Stack) Env(name, key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc(name).env[key]
}

// SetEnv changes the service's environment for its next Start.
func (s *Stack) SetEnv(name, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc(name).env[key] = value
}

// Running reports whether the service's process is alive.
func (s *Stack) Running(name string) bool {
	s.mu.Lock()
	p := s.proc(name)
	done := p.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is the process id of the service's running process (0 when it is
// not running), for reading its CPU time from /proc.
func (s *Stack) Pid(name string) int {
	s.mu.Lock()
	cmd := s.proc(name).cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil || !s.Running(name) {
		return 0
	}
	return cmd.Process.Pid
}

// Kill sends SIGKILL to the service and waits for it to exit.
func (s *Stack) Kill(name string) {
	s.t.Helper()
	s.signal(name, syscall.SIGKILL, 0)
}

// Stop sends SIGTERM to the service and waits for it to exit (SIGKILL
// after 10 s).
func (s *Stack) Stop(name string) {
	s.t.Helper()
	s.signal(name, syscall.SIGTERM, 10*time.Second)
}

// Pause freezes the service's process with SIGSTOP (a long GC pause, a
// VM stall): it keeps its sockets and leases but does nothing until
// Resume.
func (s *Stack) Pause(name string) { s.send(name, syscall.SIGSTOP) }

// Resume lets a paused service run again (SIGCONT).
func (s *Stack) Resume(name string) { s.send(name, syscall.SIGCONT) }

func (s *Stack) send(name string, sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.proc(name).cmd
	s.mu.Unlock()
	if cmd != nil && s.Running(name) {
		_ = cmd.Process.Signal(sig)
	}
}

// Start starts the service again (after Kill or Stop) on the same
// addresses and waits until it is healthy.
func (s *Stack) Start(name string) {
	s.t.Helper()
	if s.Running(name) {
		s.t.Fatalf("stacktest: %s is already running", name)
	}
	s.launch(name)
	s.waitReady(name)
}

func (s *Stack) signal(name string, sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	p := s.proc(name)
	cmd, done := p.cmd, p.done
	s.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process must run to stop
	}
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			s.t.Logf("stacktest: %s did not stop within %s; killing it", name, grace)
			_ = cmd.Process.Kill()
		}
	}
	<-done
}

// launch starts the service's process without waiting for it.
func (s *Stack) launch(name string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc(name)
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatalf("stacktest: open log: %v", err)
	}
	fmt.Fprintf(logf, "=== stacktest: starting %s at %s\n", name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(filepath.Join(s.binDir, p.service))
	cmd.Env = environ(p.env)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a Ctrl-C of the test does not reach it
	// before the cleanup does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if w := s.hostOf(name).Wrap; w != nil {
		w(cmd)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("stacktest: start %s: %v", name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.mu.Lock()
		p.err = err
		s.mu.Unlock()
		close(done)
	}()
}

// environ is the parent's environment without ORDERFLOW_* settings plus env.
func environ(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORDERFLOW_") {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// waitReady waits until the service answers GET /healthz with 200 (or
// 404 when it has no such route), failing the test if it exits first.
func (s *Stack) waitReady(name string) {
	s.t.Helper()
	s.mu.Lock()
	p := s.proc(name)
	done, url := p.done, "http://"+p.httpAddr+"/healthz"
	s.mu.Unlock()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(s.ready)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-done:
			s.t.Fatalf("stacktest: %s exited before it was ready: %v\n%s", name, p.err, tail(p.logPath, 40))
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("stacktest: %s not ready after %s (%s)\n%s", name, s.ready, last, tail(p.logPath, 40))
}

// cleanup stops every process, prints the logs' tails if the test failed
// and deletes the prefix's Redis keys and RabbitMQ queues.
func (s *Stack) cleanup() {
	var wg sync.WaitGroup
	for _, n := range s.order {
		wg.Go(func() { s.signal(n, syscall.SIGTERM, 5*time.Second) })
	}
	wg.Wait()
	if s.t.Failed() {
		for _, n := range s.order {
			p := s.procs[n]
			s.t.Logf("stacktest: last lines of %s (%s):\n%s", n, p.logPath, tail(p.logPath, 60))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if addrs := strings.Split(s.redisAddr, ","); len(addrs) > 1 {
		// A Redis Cluster: the prefix's keys are spread over the masters.
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		_ = c.ForEachMaster(ctx, func(ctx context.Context, rdb *redis.Client) error {
			testenv.DeletePrefix(ctx, rdb, s.prefix)
			return nil
		})
		_ = c.Close()
	} else {
		rdb := redis.NewClient(&redis.Options{Addr: s.redisAddr})
		testenv.DeletePrefix(ctx, rdb, s.prefix)
		_ = rdb.Close()
	}
	if err := s.deleteQueues(); err != nil {
		s.t.Logf("stacktest: delete queues of %s: %v", s.prefix, err)
	}
}

// deleteQueues deletes the split-job topology of the stack's prefix and
// the extra queues named in Options.
func (s *Stack) deleteQueues() error {
	url, _, _ := strings.Cut(s.amqpURL, ",") // a cluster's first node
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	names := jobqueue.NewNames(s.prefix)
	for _, q := range append(names.Queues(), s.queues...) {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.Close()
	}
	for _, x := range []string{names.Exchange, names.DLX} {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_ = ch.ExchangeDelete(x, false, false)
		_ = ch.Close()
	}
	return nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DevToken asks the gateway's dev login for a member's bearer token.
func (s *Stack) DevToken(t testing.TB, member string) string {
	t.Helper()
	return s.devLogin(t, member)
}

// AdminToken asks the gateway's dev login for a bearer token of operator
// carrying the admin role.
func (s *Stack) AdminToken(t testing.TB, operator string) string {
	t.Helper()
	return s.devLogin(t, operator, "admin")
}

func (s *Stack) devLogin(t testing.TB, member string, roles ...string) string {
	t.Helper()
	body, _ := json.Marshal(struct {
		MemberID string   `json:"memberId"`
		Roles    []string `json:"roles,omitempty"`
	}{member, roles})
	resp, err := http.Post(s.URL(Gateway)+"/v1/dev/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("dev login %s: %v", member, err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Token == "" {
		t.Fatalf("dev login %s: status %s, err %v", member, resp.Status, err)
	}
	return out.Token
}
