package chaos_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/chaos"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// netHosts is the network of a scenario whose processes run as hosts of
// their own: one network namespace per process on a bridge of the
// scenario's own (chaos.Net). The test process (the load, the checks)
// reaches every host through the bridge.
type netHosts struct {
	t   *testing.T
	net *chaos.Net

	mu    sync.Mutex
	hosts map[string]*chaos.Host
}

// newNetHosts creates the scenario's network; it is deleted when the
// scenario ends, after the processes started later are stopped (cleanups
// run last registered first).
func newNetHosts(t *testing.T) *netHosts {
	n, err := chaos.NewNet()
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Logf("delete network: %v", err)
		}
	})
	return &netHosts{t: t, net: n, hosts: map[string]*chaos.Host{}}
}

// host is the host name, created at its first use.
func (nh *netHosts) host(name string) *chaos.Host {
	nh.mu.Lock()
	defer nh.mu.Unlock()
	if h := nh.hosts[name]; h != nil {
		return h
	}
	h, err := nh.net.Host(name)
	if err != nil {
		nh.t.Fatalf("host %s: %v", name, err)
	}
	nh.hosts[name] = h
	return h
}

// on is host name as testenv and stacktest take it.
func (nh *netHosts) on(name string) testenv.Host {
	h := nh.host(name)
	return testenv.Host{Addr: h.Addr, Wrap: h.Wrap}
}

// byAddr is the host with address addr (host or host:port).
func (nh *netHosts) byAddr(addr string) *chaos.Host {
	if h, _, ok := strings.Cut(addr, ":"); ok {
		addr = h
	}
	nh.mu.Lock()
	defer nh.mu.Unlock()
	for _, h := range nh.hosts {
		if h.Addr == addr {
			return h
		}
	}
	nh.t.Fatalf("no host has address %s", addr)
	return nil
}

// runStack runs every service instance of the stack on a host of its own
// (named as the instance) and gives the services the suite's RabbitMQ
// node through a proxy on the bridge (the node listens on the machine's
// loopback only, where guest may log in).
func (nh *netHosts) runStack(su *suite, o *stacktest.Options) {
	o.Host = func(inst string) testenv.Host { return nh.on(inst) }
	p, err := netfault.NewProxyOn(nh.net.Gateway(), su.target(true))
	if err != nil {
		nh.t.Fatalf("proxy to rabbitmq: %v", err)
	}
	nh.t.Cleanup(func() { _ = p.Close() })
	o.AMQPURL = via(p.Addr(), true)
}

// cut drops every packet between host h and the hosts or endpoints peers
// (chaos.Host.Cut) and returns the function that heals it; it is healed
// at the end of the scenario whatever happens.
func (nh *netHosts) cut(r *run, tag string, h *chaos.Host, peers []string) (heal func()) {
	p, err := h.Cut(fmt.Sprintf("%s-%s", strings.TrimPrefix(r.s.Prefix(), "oft-"), tag), peers)
	if p != nil {
		r.t.Cleanup(func() { _ = p.Heal() })
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return func() {
		if err := p.Heal(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// reachRedis makes the suite's Redis listen on the bridge's address too
// (CONFIG SET bind; back to loopback only when the scenario ends) and
// returns its address there, where the hosts reach it.
func (nh *netHosts) reachRedis(su *suite) string {
	rdb := redis.NewClient(&redis.Options{Addr: su.redis.Addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "bind", "127.0.0.1 "+nh.net.Gateway()).Err(); err != nil {
		nh.t.Fatalf("redis: listen on the bridge: %v", err)
	}
	nh.t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: su.redis.Addr})
		defer rdb.Close()
		if err := rdb.ConfigSet(context.Background(), "bind", "127.0.0.1").Err(); err != nil {
			nh.t.Logf("redis: listen on loopback only again: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(su.redis.Addr)
	return net.JoinHostPort(nh.net.Gateway(), port)
}
