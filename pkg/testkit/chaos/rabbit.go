package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitBin is where the Debian package keeps the real scripts (the ones
// in /usr/sbin switch to the rabbitmq user, which would drop the
// environment that places this node).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// RabbitNode is a RabbitMQ node of the suite's own: its own node name,
// ports, data and log folders and Erlang cookie (HOME), and no plugins,
// so it clashes with no other node on the machine. It registers with the
// machine's epmd, which it leaves alone.
type RabbitNode struct {
	Name string
	Port int
	dir  string
	env  []string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRabbit starts a node with data under dir (which must exist) and
// waits until it accepts AMQP connections (timeout bounds the wait).
func StartRabbit(dir string, timeout time.Duration) (*RabbitNode, error) {
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("rabbitmq-server not installed (run `make deps`): %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	n := &RabbitNode{Name: "orderflow-chaos-" + hex.EncodeToString(b[:]) + "@localhost", Port: ports[0], dir: dir}
	plugins := filepath.Join(dir, "enabled_plugins")
	if err := os.WriteFile(plugins, []byte("[].\n"), 0o644); err != nil {
		return nil, err
	}
	n.env = append(os.Environ(),
		"HOME="+dir,
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(ports[0]),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+plugins,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
	)
	return n, n.Start(timeout)
}

// URL is the node's AMQP URL (guest may log in from loopback).
func (n *RabbitNode) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port) }

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

// Stop stops the node gracefully (rabbitmqctl stop), then kills what is
// left of its process group.
func (n *RabbitNode) Stop() error {
	if n.cmd == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := exec.CommandContext(ctx, filepath.Join(rabbitBin, "rabbitmqctl"), "-n", n.Name, "stop")
	ctl.Dir, ctl.Env = n.dir, n.env
	out, err := ctl.CombinedOutput()
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
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
