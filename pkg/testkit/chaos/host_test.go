package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/chaos"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestHostCutDropsBetweenTwoHostsOnly starts a Redis server on one host of
// a Net and asks it for PING from another host: answered; cut off from
// each other, not answered, while the test process (the machine's
// namespace) still is; healed, answered again. Close leaves no namespace
// behind.
func TestHostCutDropsBetweenTwoHostsOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"iptables", "nsenter", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (run `make test-deps`)", tool)
		}
	}
	n, err := chaos.NewNet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	server, err := n.Host("server")
	if err != nil {
		t.Fatal(err)
	}
	client, err := n.Host("client")
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartRedisIn(t, testenv.Host{Addr: server.Addr, Wrap: server.Wrap}, false)

	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "redis-cli", "-h", srv.Host, "-p", strconv.Itoa(srv.Port), "PING")
		client.Wrap(cmd)
		out, err := cmd.CombinedOutput()
		if err == nil && string(out) != "PONG\n" {
			return fmt.Errorf("answered %q", out)
		}
		return err
	}
	fromRoot := func() error {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
		defer rdb.Close()
		return rdb.Ping(context.Background()).Err()
	}

	if err := ping(); err != nil {
		t.Fatalf("PING from the client host before the cut: %v", err)
	}
	p, err := client.Cut("host-test", []string{server.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Heal() })
	if err := ping(); err == nil {
		t.Error("PING from the client host across the cut answered, want no answer")
	}
	if err := fromRoot(); err != nil {
		t.Errorf("PING from the machine's namespace during the cut = %v, want PONG", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Errorf("PING from the client host after healing: %v", err)
	}

	srv.Kill(t)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*chaos.Host{server, client} {
		if _, err := os.Stat(filepath.Join("/run/netns", h.NS)); !os.IsNotExist(err) {
			t.Errorf("namespace %s after Close: %v, want it gone", h.NS, err)
		}
	}
}
