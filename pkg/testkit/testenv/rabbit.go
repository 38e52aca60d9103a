package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitBin is where the Debian package keeps the real scripts (the ones
// in /usr/sbin switch to the rabbitmq user, which would drop the
// environment that places this node).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// RabbitNode is a RabbitMQ node of a test's own: its own node name,
// ports, data and log folders and Erlang cookie (HOME), and no plugins,
// so it clashes with no other node on the machine. It registers with the
// machine's epmd, which it leaves alone.
type RabbitNode struct {
	Name string
	Port int
	// DistPort is the Erlang distribution port: the other nodes of a
	// cluster (and the command-line tools) connect to it.
	DistPort int
	// Addr is the address it listens on (AMQP and distribution).
	Addr string
	dir  string
	env  []string
	cmd  *exec.Cmd
	done chan struct{}
	wrap func(*exec.Cmd) // adjusts its command before each start; nil: none
}

// StartRabbit starts a node with data under dir (which must exist) and
// waits until it accepts AMQP connections (timeout bounds the wait).
func StartRabbit(dir string, timeout time.Duration) (*RabbitNode, error) {
	n, err := newRabbit(dir, "", Loopback("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	return n, n.Start(timeout)
}

// StartRabbitTLS is StartRabbit with a TLS listener beside the plain one:
// the server certificate of certs, client certificates required and
// checked against its CA. It returns the node and the TLS port.
func StartRabbitTLS(dir string, certs Certs, timeout time.Duration) (*RabbitNode, int, error) {
	n, err := newRabbit(dir, "", Loopback("127.0.0.1"))
	if err != nil {
		return nil, 0, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, 0, err
	}
	conf := fmt.Sprintf(`listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
`, ports[0], certs.CA, certs.ServerCert, certs.ServerKey)
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return nil, 0, err
	}
	return n, ports[0], n.Start(timeout)
}

// newRabbit prepares a node with data under dir on host; a cookie other
// than "" is written as the node's Erlang cookie (nodes of one cluster
// share it). A node on an address other than 127.0.0.1 (a host of its
// own, in a network namespace with an epmd of its own) is named with a
// long name, rabbit-<hex>@<address>, which its peers reach without a name
// lookup, and lets guest log in from anywhere (the test process reaches
// it from another namespace).
func newRabbit(dir, cookie string, host Host) (*RabbitNode, error) {
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("rabbitmq-server not installed (run `make deps`): %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	n := &RabbitNode{Name: "orderflow-test-" + hex.EncodeToString(b[:]) + "@localhost", Port: ports[0], DistPort: ports[1], Addr: host.Addr, dir: dir, wrap: host.Wrap}
	long := host.Addr != "127.0.0.1"
	if long {
		n.Name = "rabbit-" + hex.EncodeToString(b[:]) + "@" + host.Addr
		if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte("loopback_users = none\n"), 0o644); err != nil {
			return nil, err
		}
	}
	plugins := filepath.Join(dir, "enabled_plugins")
	if err := os.WriteFile(plugins, []byte("[].\n"), 0o644); err != nil {
		return nil, err
	}
	if cookie != "" {
		if err := os.WriteFile(filepath.Join(dir, ".erlang.cookie"), []byte(cookie), 0o400); err != nil {
			return nil, err
		}
	}
	n.env = append(os.Environ(),
		"HOME="+dir,
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS="+host.Addr,
		"RABBITMQ_USE_LONGNAME="+strconv.FormatBool(long),
		"RABBITMQ_NODE_PORT="+strconv.Itoa(ports[0]),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+plugins,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
	)
	return n, nil
}

// ProcessGroup is the id of the node's process group (the server script
// and the Erlang VM it runs), 0 when the node is not running; a benchmark
// sums the CPU time of its members from /proc.
func (n *RabbitNode) ProcessGroup() int {
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Endpoints are the node's listening addresses: AMQP and distribution.
func (n *RabbitNode) Endpoints() []string {
	return []string{net.JoinHostPort(n.Addr, strconv.Itoa(n.Port)), net.JoinHostPort(n.Addr, strconv.Itoa(n.DistPort))}
}

// URL is the node's AMQP URL (guest may log in from loopback).
func (n *RabbitNode) URL() string {
	return "amqp://guest:guest@" + net.JoinHostPort(n.Addr, strconv.Itoa(n.Port)) + "/"
}

// Start starts the node (again, with the same name, ports and data) and
// waits until it accepts AMQP connections.
func (n *RabbitNode) Start(timeout time.Duration) error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
	cmd.Dir, cmd.Env = n.dir, n.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if n.wrap != nil {
		n.wrap(cmd)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start rabbitmq-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.cmd, n.done = cmd, done
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("rabbitmq node %s exited during start; see %s", n.Name, filepath.Join(n.dir, "server.out"))
		default:
		}
		if c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(time.Second)}); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.Kill()
	return fmt.Errorf("rabbitmq node %s not ready after %s", n.Name, timeout)
}

// ctl runs rabbitmqctl against the node.
func (n *RabbitNode) ctl(ctx context.Context, args ...string) (string, error) {
	return n.tool(ctx, "rabbitmqctl", args...)
}

// Eval evaluates an Erlang expression on the node (rabbitmqctl eval) and
// returns what it printed.
func (n *RabbitNode) Eval(ctx context.Context, expr string) (string, error) {
	return n.ctl(ctx, "eval", expr)
}

// tool runs one of RabbitMQ's command-line tools against the node.
func (n *RabbitNode) tool(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitBin, name), append([]string{"-n", n.Name}, args...)...)
	cmd.Dir, cmd.Env = n.dir, n.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %v on %s: %w\n%s", name, args, n.Name, err, out)
	}
	return string(out), nil
}

// LogTail returns the last n lines of the node's log.
func (n *RabbitNode) LogTail(lines int) string {
	files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*.log"))
	var b strings.Builder
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", f, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
	return b.String()
}

// Running reports whether the node's process is alive (started and not
// killed or stopped since).
func (n *RabbitNode) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Stop stops the node gracefully (rabbitmqctl stop), then kills what is
// left of its process group. It reports an error when the graceful stop
// did not finish in time (the node is killed then all the same): on two
// cores shared with other test packages, rabbitmqctl stop has taken more
// than 30 s.
func (n *RabbitNode) Stop() error {
	if n.cmd == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ctl := exec.CommandContext(ctx, filepath.Join(rabbitBin, "rabbitmqctl"), "-n", n.Name, "stop")
	ctl.Dir, ctl.Env = n.dir, n.env
	out, err := ctl.CombinedOutput()
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		err = errors.Join(err, errors.New("node did not exit after rabbitmqctl stop"))
	}
	n.Kill()
	if err != nil {
		return fmt.Errorf("rabbitmqctl stop: %w\n%s", err, out)
	}
	return nil
}

// Kill sends SIGKILL to the node's process group and waits for the node's
// process to exit.
func (n *RabbitNode) Kill() {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
	n.cmd = nil
}

func freePorts(k int) ([]int, error) {
	var ports []int
	var open []net.Listener
	defer func() {
		for _, l := range open {
			_ = l.Close()
		}
	}()
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		open = append(open, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// RabbitCluster is a RabbitMQ cluster of a test's own: nodes sharing one
// Erlang cookie, joined to the first.
type RabbitCluster struct {
	Nodes []*RabbitNode
}

// StartRabbitCluster starts size nodes (each as StartRabbit does, with one
// cookie for all), joins every other node to the first and waits until
// each node sees the whole cluster running. The nodes are killed when the
// test ends.
func StartRabbitCluster(t testing.TB, size int) *RabbitCluster {
	t.Helper()
	return StartRabbitClusterOn(t, size, func(int) Host { return Loopback("127.0.0.1") })
}

// StartRabbitClusterOn is StartRabbitCluster with node i on host(i):
// listening on its address and started (on every start) through its Wrap,
// so that a fault test can partition the nodes. Nodes on addresses other
// than 127.0.0.1 have long names (see newRabbit).
func StartRabbitClusterOn(t testing.TB, size int, host func(i int) Host) *RabbitCluster {
	t.Helper()
	var b [16]byte
	_, _ = rand.Read(b[:])
	cookie := strings.ToUpper(hex.EncodeToString(b[:]))
	c := &RabbitCluster{}
	for range size {
		n, err := newRabbit(t.TempDir(), cookie, host(len(c.Nodes)))
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Kill()
		}
	})
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.Start(3 * time.Minute) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start rabbitmq nodes: %v", err)
	}
	// Every rabbitmqctl call boots an Erlang VM of its own: on two cores
	// shared with other test packages the joins alone have taken minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	for _, n := range c.Nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"reset"}, {"join_cluster", c.Nodes[0].Name}, {"start_app"}} {
			if _, err := n.ctl(ctx, args...); err != nil {
				t.Fatalf("join rabbitmq cluster: %v", err)
			}
		}
	}
	if err := c.AwaitRunning(ctx, size); err != nil {
		t.Fatal(err)
	}
	return c
}

// URLs lists the nodes' AMQP URLs as a comma-separated list.
func (c *RabbitCluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// NodeByPort returns the node listening for AMQP on port, or nil.
func (c *RabbitCluster) NodeByPort(port int) *RabbitNode {
	for _, n := range c.Nodes {
		if n.Port == port {
			return n
		}
	}
	return nil
}

// Running is the number of cluster nodes whose process is alive.
func (c *RabbitCluster) Running() int {
	k := 0
	for _, n := range c.Nodes {
		if n.Running() {
			k++
		}
	}
	return k
}

// AwaitRunning waits until every node whose process runs reports want
// running cluster nodes.
func (c *RabbitCluster) AwaitRunning(ctx context.Context, want int) error {
	for _, n := range c.Nodes {
		if n.Running() {
			if err := awaitRunning(ctx, n, want); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitRunning waits until node n reports want running cluster nodes.
func awaitRunning(ctx context.Context, n *RabbitNode, want int) error {
	var last string
	for {
		out, err := n.ctl(ctx, "eval", "length(rabbit_nodes:all_running()).")
		if err == nil && strings.TrimSpace(out) == strconv.Itoa(want) {
			return nil
		}
		last = out
		select {
		case <-ctx.Done():
			return fmt.Errorf("rabbitmq node %s: %d running nodes not seen (last %q, %v)", n.Name, want, last, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// quorumStatus is rabbitmq-queues quorum_status of a queue in vhost "/",
// one row per member, asked of the first running node.
func (c *RabbitCluster) quorumStatus(ctx context.Context, queue string) ([]map[string]any, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		out, err := n.tool(ctx, "rabbitmq-queues", "quorum_status", queue, "--formatter", "json", "--quiet")
		if err != nil {
			return nil, err
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return nil, fmt.Errorf("quorum_status %s: %w (%q)", queue, err, out)
		}
		return rows, nil
	}
	return nil, errors.New("no rabbitmq node running")
}

// QuorumMembers names the members of a quorum queue in vhost "/".
func (c *RabbitCluster) QuorumMembers(ctx context.Context, queue string) ([]string, error) {
	rows, err := c.quorumStatus(ctx, queue)
	var members []string
	for _, r := range rows {
		members = append(members, fmt.Sprint(r["Node Name"]))
	}
	return members, err
}

// QuorumLeader returns the node that leads a quorum queue in vhost "/".
func (c *RabbitCluster) QuorumLeader(ctx context.Context, queue string) (*RabbitNode, error) {
	rows, err := c.quorumStatus(ctx, queue)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if fmt.Sprint(r["Raft State"]) != "leader" {
			continue
		}
		for _, n := range c.Nodes {
			if n.Name == fmt.Sprint(r["Node Name"]) {
				return n, nil
			}
		}
	}
	return nil, fmt.Errorf("quorum queue %s has no leader: %v", queue, rows)
}
