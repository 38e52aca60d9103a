package chaos_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orderflow/orderflow/pkg/testkit/chaos"
)

// TestPacketDelay slows down and drops the packets of connections to an
// echo server of the test's own: the median round trip grows by the
// delay, the DROP rule counts dropped packets, and once the delay is
// closed its rules are gone and round trips are as fast as before.
func TestPacketDelay(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("iptables not installed (run `make test-deps`): %v", err)
	}
	const delay, loss = 200 * time.Millisecond, 0.05
	addr, other := echoServer(t), echoServer(t)
	_, port, _ := net.SplitHostPort(addr)

	before := medianRoundTrip(t, addr, 1, 20)
	pd, err := chaos.NewPacketDelay(chaos.PacketDelayConfig{
		Tag:   "test-" + port,
		Match: []string{"-p", "tcp", "-d", "127.0.0.1", "--dport", port},
		Delay: delay, Loss: loss,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pd.Close() })

	// 8 connections of 30 round trips: several hundred packets, enough
	// for 5 % loss to drop some (no drop in 400 packets has odds of
	// about 1 in 10⁹).
	during := medianRoundTrip(t, addr, 8, 30)
	dropped, err := pd.Dropped()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("median round trip %s before, %s with %s delay and %g loss; %d packets held, %d dropped",
		before, during, delay, loss, pd.Held(), dropped)
	if during < before+delay || during > before+delay+800*time.Millisecond {
		t.Errorf("median round trip with the delay = %s, want %s + %s and well below a second more", during, before, delay)
	}
	if dropped == 0 {
		t.Errorf("packets dropped = 0, want some at loss %g (%d held)", loss, pd.Held())
	}
	if rtt := medianRoundTrip(t, other, 1, 20); rtt >= delay/2 {
		t.Errorf("median round trip to another port = %s, want below %s (not delayed)", rtt, delay/2)
	}

	if err := pd.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if rules := delayRules(t); len(rules) > 0 {
		t.Errorf("rules left after Close:\n%s", strings.Join(rules, "\n"))
	}
	if after := medianRoundTrip(t, addr, 1, 20); after >= delay/2 {
		t.Errorf("median round trip after Close = %s, want below %s (the delay gone)", after, delay/2)
	}
}

// TestPacketDelayRemovesStaleRules leaves a chain and its jump as a run
// killed before its Close would and checks that the next PacketDelay
// removes them, and leaves alone a chain whose process still runs.
func TestPacketDelayRemovesStaleRules(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("iptables not installed (run `make test-deps`): %v", err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("OFPD-%d-1", gone.Process.Pid)
	live := fmt.Sprintf("OFPD-%d-999", os.Getpid())
	for _, chain := range []string{stale, live} {
		iptablesOrFatal(t, "-N", chain)
		iptablesOrFatal(t, "-I", "OUTPUT", "-m", "comment", "--comment", "orderflow-chaos-packetdelay-stale-test", "-j", chain)
	}
	t.Cleanup(func() {
		for _, chain := range []string{stale, live} {
			_ = exec.Command("iptables", "-w", "-D", "OUTPUT", "-m", "comment", "--comment", "orderflow-chaos-packetdelay-stale-test", "-j", chain).Run()
			_ = exec.Command("iptables", "-w", "-X", chain).Run()
		}
	})

	pd, err := chaos.NewPacketDelay(chaos.PacketDelayConfig{
		Tag: "stale-test", Match: []string{"-p", "tcp", "-d", "127.0.0.1", "--dport", "1"}, Loss: 0.5,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), stale) {
		t.Errorf("chain %s of an exited process still there:\n%s", stale, out)
	}
	if !strings.Contains(string(out), "-N "+live) {
		t.Errorf("chain %s of a running process removed", live)
	}
}

func iptablesOrFatal(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %v: %v: %s", args, err, out)
	}
}

// TestPacketDelayInNamespace slows down the connections to an echo server
// listening in a host's network namespace (chaos.Net), with the rules and
// the queue in that namespace: the client's packets come in on the
// host's veth (INPUT), the answers leave by OUTPUT, and the round trip
// grows by the delay.
func TestPacketDelayInNamespace(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("iptables not installed (run `make test-deps`): %v", err)
	}
	const delay = 200 * time.Millisecond
	n, err := chaos.NewNet()
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	h, err := n.Host("echo")
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServe(t, listenIn(t, h.NS, h.Addr+":0"))
	_, port, _ := net.SplitHostPort(addr)

	before := medianRoundTrip(t, addr, 1, 10)
	pd, err := chaos.NewPacketDelay(chaos.PacketDelayConfig{
		Tag: "test-ns-" + port, NetNS: h.NS,
		Match: []string{"-p", "tcp", "-d", h.Addr, "--dport", port},
		Delay: delay,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pd.Close() })
	during := medianRoundTrip(t, addr, 1, 10)
	t.Logf("median round trip %s before, %s with %s delay in namespace %s; %d packets held", before, during, delay, h.NS, pd.Held())
	if during < before+delay || during > before+delay+800*time.Millisecond {
		t.Errorf("median round trip with the delay = %s, want %s + %s and well below a second more", during, before, delay)
	}
	if err := pd.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if after := medianRoundTrip(t, addr, 1, 10); after >= delay/2 {
		t.Errorf("median round trip after Close = %s, want below %s (the delay gone)", after, delay/2)
	}
}

// listenIn listens on addr from inside the network namespace ns: the
// socket is made on a thread moved into ns for the call, and stays in ns.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer home.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter namespace %s: %v", ns, err)
	}
	ln, lnErr := net.Listen("tcp", addr)
	if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine
		// instead of serving others in the wrong namespace.
		t.Fatalf("leave namespace %s: %v", ns, err)
	}
	runtime.UnlockOSThread()
	if lnErr != nil {
		t.Fatal(lnErr)
	}
	return ln
}

// echoServer listens on a free loopback port and answers every line with
// itself.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return echoServe(t, ln)
}

// echoServe answers every line on ln's connections with itself until the
// test ends, and returns ln's address.
func echoServe(t *testing.T, ln net.Listener) string {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// medianRoundTrip runs n round trips on each of conns new connections at
// once and returns the median.
func medianRoundTrip(t *testing.T, addr string, conns, n int) time.Duration {
	t.Helper()
	var (
		mu   sync.Mutex
		rtts []time.Duration
		wg   sync.WaitGroup
		errs = make(chan error, conns)
	)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for k := range n {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				msg := fmt.Sprintf("ping %d %d\n", i, k)
				start := time.Now()
				if _, err := c.Write([]byte(msg)); err != nil {
					errs <- err
					return
				}
				line, err := r.ReadString('\n')
				if err != nil {
					errs <- err
					return
				}
				if line != msg {
					errs <- fmt.Errorf("echo = %q, want %q", line, msg)
					return
				}
				mu.Lock()
				rtts = append(rtts, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("round trip to %s: %v", addr, err)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

// delayRules lists the iptables rules and chains of PacketDelays of this
// process.
func delayRules(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		t.Fatalf("iptables -S: %v", err)
	}
	var rules []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, fmt.Sprintf("OFPD-%d-", os.Getpid())) {
			rules = append(rules, line)
		}
	}
	return rules
}
