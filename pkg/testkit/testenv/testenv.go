// Package testenv gives integration tests isolated access to the real Redis
// and RabbitMQ the machine runs (see deploy/local/ensure-deps.sh): a unique
// key prefix per test whose keys are deleted afterwards, unique RabbitMQ
// object names, and redis-server processes of a test's own for tests that
// must kill or restart one.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
)

// RedisAddr is the shared Redis, overridable by ORDERFLOW_REDIS_ADDR.
func RedisAddr() string {
	if a := os.Getenv("ORDERFLOW_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// AMQPURL is the shared RabbitMQ, overridable by ORDERFLOW_AMQP_URL.
func AMQPURL() string {
	if u := os.Getenv("ORDERFLOW_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Prefix returns a name unique to this test run, safe for Redis keys and
// RabbitMQ object names ("oft-<hex>").
func Prefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "oft-" + hex.EncodeToString(b[:])
}

// Redis returns a client of the shared Redis and a unique key prefix; every
// key under the prefix is deleted when the test ends. The test fails at
// once when Redis does not answer.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s does not answer (run `make deps`): %v", RedisAddr(), err)
	}
	prefix := Prefix(t)
	t.Cleanup(func() {
		DeletePrefix(context.Background(), rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix deletes every key that starts with prefix.
func DeletePrefix(ctx context.Context, rdb *redis.Client, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

// EphemeralLow is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range; 32768 when it cannot be read).
func EphemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// drawn at random from below the kernel's ephemeral range (10000 up, when
// the range starts above 11000): the kernel gives outgoing connections
// their source ports from that range, and a client of any test that took
// the port between FreePort and the service's bind would make the service
// exit with "address already in use".
func FreePort(t testing.TB) int {
	t.Helper()
	high := EphemeralLow()
	low := 1024
	if high > 11000 {
		low = 10000
	}
	for range 1000 {
		port := low + mrand.IntN(high-low)
		if _, taken := handedOut.Load(port); taken {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // bound by someone else
		}
		l.Close()
		if _, taken := handedOut.LoadOrStore(port, true); !taken {
			return port
		}
	}
	t.Fatalf("no free port in [%d, %d) that this process has not handed out already", low, high)
	return 0
}

// handedOut holds every port FreePort returned in this process: the
// kernel may offer a port again as soon as its probe listener closes, and
// two services of one stack given the same port cannot both bind it.
var handedOut sync.Map

// RedisServer is a redis-server process owned by one test.
type RedisServer struct {
	Addr string
	Host string
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
	// wrap, when set, adjusts its command before each start.
	wrap func(*exec.Cmd)
}

// Host is where a process of a test's own runs: Addr is the address it
// listens on and makes its own connections from, and Wrap, when set,
// adjusts its command before each start (to run it in a network
// namespace of a fault test's, say).
type Host struct {
	Addr string
	Wrap func(*exec.Cmd)
}

// Loopback is a host on the loopback address a: processes started there
// run in the test's own network namespace.
func Loopback(a string) Host { return Host{Addr: a} }

// StartRedis starts a redis-server of the test's own on a free port, with
// AOF (appendfsync always) when aof is set. It is killed when the test ends.
func StartRedis(t testing.TB, aof bool, extra ...string) *RedisServer {
	t.Helper()
	return StartRedisOn(t, "127.0.0.1", aof, extra...)
}

// StartRedisOn is StartRedis with the server on the loopback address
// host, which it also uses as the source of its own connections (to a
// primary it replicates), so fault tests can tell its traffic apart.
func StartRedisOn(t testing.TB, host string, aof bool, extra ...string) *RedisServer {
	t.Helper()
	return StartRedisIn(t, Loopback(host), aof, extra...)
}

// StartRedisIn is StartRedis with the server on host: listening on its
// address and connecting from it, started (and restarted) through its
// Wrap.
func StartRedisIn(t testing.TB, host Host, aof bool, extra ...string) *RedisServer {
	t.Helper()
	s := newRedisServer(t, host.Addr, aof, extra...)
	s.wrap = host.Wrap
	s.Start(t)
	t.Cleanup(func() { s.Kill(t) })
	return s
}

// newRedisServer is a server of StartRedisOn's, not started yet.
func newRedisServer(t testing.TB, host string, aof bool, extra ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed (run `make deps`): %v", err)
	}
	port := FreePort(t)
	dir := t.TempDir()
	// Protected mode counts only 127.0.0.1 as loopback; every address
	// here is on lo.
	args := []string{"--port", strconv.Itoa(port), "--bind", host, "--bind-source-addr", host, "--protected-mode", "no", "--save", "", "--dir", dir}
	if aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, extra...)
	return &RedisServer{Addr: net.JoinHostPort(host, strconv.Itoa(port)), Host: host, Port: port, dir: dir, args: args}
}

// Start (re)starts the server with its original arguments and data folder
// and waits until it answers.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if s.wrap != nil {
		s.wrap(s.cmd)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			return
		} else if !strings.Contains(err.Error(), "connection refused") && !strings.Contains(err.Error(), "LOADING") {
			t.Logf("waiting for redis-server %s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redis-server on %s did not answer", s.Addr)
}

// Kill stops the server with SIGKILL (no shutdown save) and waits for it.
func (s *RedisServer) Kill(t testing.TB) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pid is the running server's process id (0 when it is not running).
func (s *RedisServer) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Signal sends sig to the server process (SIGSTOP and SIGCONT pause and
// resume it).
func (s *RedisServer) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redis-server not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Dir is the server's data folder.
func (s *RedisServer) Dir() string { return filepath.Clean(s.dir) }

// SplitJobQueues returns the split-job queue names of prefix and deletes
// their queues and exchanges when the test ends (after the cleanups
// registered later, such as stopping a service that uses them).
func SplitJobQueues(t testing.TB, prefix string) jobqueue.Names {
	t.Helper()
	names := jobqueue.NewNames(prefix)
	t.Cleanup(func() {
		conn, err := amqp.Dial(AMQPURL())
		if err != nil {
			t.Errorf("delete queues of %s: %v", prefix, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("delete queues of %s: %v", prefix, err)
			return
		}
		for _, q := range names.Queues() {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		_ = ch.ExchangeDelete(names.Exchange, false, false)
		_ = ch.ExchangeDelete(names.DLX, false, false)
	})
	return names
}

// UsedMemory returns the used_memory of rdb's server (INFO memory), in
// bytes: cost curves divide its growth by the items they stored.
func UsedMemory(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}
