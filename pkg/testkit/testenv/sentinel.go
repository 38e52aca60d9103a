package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelGroup is a Redis primary with replicas, monitored by Redis
// Sentinel processes, all of one test's own.
type SentinelGroup struct {
	// Master is the name the Sentinels monitor the primary under.
	Master string
	// Sentinels are the Sentinels' addresses (host:port).
	Sentinels []string
	// Servers are the data servers; Servers[0] is the first primary.
	Servers []*RedisServer
}

// StartSentinelGroup starts a redis-server primary, replicas replicas of
// it and sentinels `redis-server --sentinel` processes monitoring it as
// master (quorum 1, down-after 1 s, failover timeout 5 s), each on a free
// port with its configuration in a temporary folder. It returns once every
// replica is in sync and every Sentinel knows every replica. serverArgs
// are added to every data server's command line. The processes are killed
// when the test ends.
func StartSentinelGroup(t testing.TB, master string, replicas, sentinels int, serverArgs ...string) *SentinelGroup {
	t.Helper()
	return StartSentinelGroupOn(t, func(int) Host { return Loopback("127.0.0.1") }, master, replicas, sentinels, serverArgs...)
}

// StartSentinelGroupOn is StartSentinelGroup with process i (the primary
// first, then the replicas, then the Sentinels) on host(i): listening on
// its address, making its own connections from it, and started through
// its Wrap. The Sentinels announce the servers by these addresses.
func StartSentinelGroupOn(t testing.TB, host func(i int) Host, master string, replicas, sentinels int, serverArgs ...string) *SentinelGroup {
	t.Helper()
	if replicas < 1 || sentinels < 1 {
		t.Fatalf("StartSentinelGroup: %d replicas, %d sentinels", replicas, sentinels)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := &SentinelGroup{Master: master}
	primary := StartRedisIn(t, host(0), false, serverArgs...)
	g.Servers = append(g.Servers, primary)
	for i := range replicas {
		g.Servers = append(g.Servers, StartRedisIn(t, host(1+i), false, append(slices.Clone(serverArgs), "--replicaof", primary.Host, strconv.Itoa(primary.Port))...))
	}
	pc := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer pc.Close()
	if err := waitFor(ctx, func() (bool, string, error) {
		info, err := pc.Info(ctx, "replication").Result()
		return err == nil && infoHas(info, map[string]string{"connected_slaves": strconv.Itoa(replicas)}), info, err
	}); err != nil {
		t.Fatalf("replicas of %s: %v", primary.Addr, err)
	}
	for i := range sentinels {
		g.Sentinels = append(g.Sentinels, startSentinel(t, host(1+replicas+i), master, primary))
	}
	for _, addr := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		err := waitFor(ctx, func() (bool, string, error) {
			rs, err := sc.Replicas(ctx, master).Result()
			return err == nil && len(rs) == replicas, fmt.Sprint(rs), err
		})
		_ = sc.Close()
		if err != nil {
			t.Fatalf("sentinel %s does not see %d replicas of %s: %v", addr, replicas, master, err)
		}
	}
	return g
}

// startSentinel starts one Sentinel on host monitoring primary and returns
// its address.
func startSentinel(t testing.TB, h Host, master string, primary *RedisServer) string {
	t.Helper()
	host := h.Addr
	sport := FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it: it must be writable
	body := fmt.Sprintf(`port %d
bind %s
bind-source-addr %s
protected-mode no
dir %s
sentinel monitor %s %s %d 1
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, sport, host, host, dir, master, primary.Host, primary.Port, master, master, master)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if h.Wrap != nil {
		h.Wrap(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis sentinel: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort(host, strconv.Itoa(sport))
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string, error) {
		err := sc.Ping(ctx).Err()
		return err == nil, "", err
	}); err != nil {
		t.Fatalf("redis sentinel on %s: %v", addr, err)
	}
	return addr
}

// Primary asks the first Sentinel for the current primary's address.
func (g *SentinelGroup) Primary(ctx context.Context) (string, error) {
	return askPrimary(ctx, g.Sentinels[0], g.Master)
}

// askPrimary asks the Sentinel at addr for the address of master's primary.
func askPrimary(ctx context.Context, addr, master string) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, master).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s get-master-addr-by-name %s: %w", addr, master, err)
	}
	return hp[0] + ":" + hp[1], nil
}

// Failover runs SENTINEL FAILOVER on the first Sentinel and waits until
// the group has settled: every Sentinel names the same new primary, that
// server is a primary and the old primary has become its replica. It
// returns the new primary's address.
func (g *SentinelGroup) Failover(ctx context.Context) (string, error) {
	old, err := g.Primary(ctx)
	if err != nil {
		return "", err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0]})
	defer sc.Close()
	if err := sc.Failover(ctx, g.Master).Err(); err != nil {
		return "", fmt.Errorf("sentinel failover %s: %w", g.Master, err)
	}
	return g.awaitNewPrimary(ctx, old, true)
}

// AwaitPrimaryOtherThan waits until every Sentinel names one primary
// other than old and that server answers as a primary (after old was
// killed, say), and returns its address.
func (g *SentinelGroup) AwaitPrimaryOtherThan(ctx context.Context, old string) (string, error) {
	return g.awaitNewPrimary(ctx, old, false)
}

// awaitNewPrimary waits until the Sentinels agree on a primary other
// than old that is a primary; with demoted, until old is its replica too.
func (g *SentinelGroup) awaitNewPrimary(ctx context.Context, old string, demoted bool) (string, error) {
	var now string
	err := waitFor(ctx, func() (bool, string, error) {
		named := map[string]bool{}
		for _, s := range g.Sentinels {
			addr, err := askPrimary(ctx, s, g.Master)
			if err != nil {
				return false, "", err
			}
			named[addr] = true
			now = addr
		}
		if len(named) != 1 || now == old {
			return false, fmt.Sprint("sentinels name ", named), nil
		}
		want := map[string]string{now: "master"}
		if demoted {
			want[old] = "slave"
		}
		for addr, role := range want {
			if got, err := serverRole(ctx, addr); err != nil || got != role {
				return false, fmt.Sprintf("%s is %s", addr, got), err
			}
		}
		return true, "", nil
	})
	if err != nil {
		return "", fmt.Errorf("failover of %s from %s: %w", g.Master, old, err)
	}
	return now, nil
}

// AwaitDemoted waits until the Sentinels agree on a primary other than
// old and old has become its replica (after a partition heals, say).
func (g *SentinelGroup) AwaitDemoted(ctx context.Context, old string) (string, error) {
	return g.awaitNewPrimary(ctx, old, true)
}

// Server returns the group's data server at addr, or nil.
func (g *SentinelGroup) Server(addr string) *RedisServer {
	for _, s := range g.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// serverRole returns the first field of ROLE on the server at addr
// ("master", "slave" or "sentinel").
func serverRole(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 {
		return "", fmt.Errorf("ROLE on %s: %v, %w", addr, role, err)
	}
	return fmt.Sprint(role[0]), nil
}

// waitFor polls cond every 50 ms until it reports done or ctx ends; the
// error then carries the last state and error cond reported.
func waitFor(ctx context.Context, cond func() (done bool, state string, err error)) error {
	for {
		done, state, err := cond()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last state %q, error %v)", ctx.Err(), state, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
