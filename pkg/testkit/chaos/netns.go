package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// netAlias is the start of the alias of every bridge of a Net: it names
// the process that owns it, so a later run can tell a leftover of a
// killed run (its owner gone) from a bridge of a run still going.
const netAlias = "orderflow-chaos pid "

// Net is a network of the suite's own: a bridge ofc<id> in the machine's
// network namespace, with the address <subnet>.1/24 (a /24 of 10.213/16
// no interface of the machine uses), and one network namespace per host,
// ofc-<id>-<host>, joined to the bridge by a veth pair, with the host's
// address <subnet>.N/24 and its loopback up. The test process, in the
// machine's namespace, reaches every host through the bridge; the hosts
// reach each other and the bridge's address.
type Net struct {
	id, bridge, subnet string

	mu    sync.Mutex
	hosts []*Host
}

// Host is one network namespace of a Net: processes started through Wrap
// run in it, listen on Addr and connect from it.
type Host struct {
	// Name is the host's name in its Net; NS is its namespace's name.
	Name, NS string
	// Addr is the host's IPv4 address on the bridge.
	Addr string
	veth string
}

// NewNet creates a network of the suite's own, after deleting what a run
// killed before its end left behind (bridges whose owner has exited and
// their namespaces).
func NewNet() (*Net, error) {
	if err := cleanStale(); err != nil {
		return nil, err
	}
	var b [2]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n := &Net{id: id, bridge: "ofc" + id, subnet: subnet}
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"link", "set", "dev", n.bridge, "alias", netAlias + strconv.Itoa(os.Getpid())},
		{"addr", "add", n.Gateway() + "/24", "dev", n.bridge},
		{"link", "set", "dev", n.bridge, "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, errors.Join(err, n.Close())
		}
	}
	return n, nil
}

// Gateway is the bridge's address, the machine's own on the network: a
// host reaches a server of the test process's there.
func (n *Net) Gateway() string { return n.subnet + "1" }

// Host creates the host name (unique in the Net) with the next free
// address.
func (n *Net) Host(name string) (*Host, error) {
	n.mu.Lock()
	k := len(n.hosts) + 2
	if k > 254 {
		n.mu.Unlock()
		return nil, errors.New("net: no address left")
	}
	h := &Host{Name: name, NS: "ofc-" + n.id + "-" + name, Addr: n.subnet + strconv.Itoa(k), veth: fmt.Sprintf("ofv%s%d", n.id, k)}
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	peer := fmt.Sprintf("ofp%s%d", n.id, k)
	for _, args := range [][]string{
		{"netns", "add", h.NS},
		{"link", "add", h.veth, "type", "veth", "peer", "name", peer, "netns", h.NS},
		{"link", "set", "dev", h.veth, "master", n.bridge, "up"},
		{"-n", h.NS, "addr", "add", h.Addr + "/24", "dev", peer},
		{"-n", h.NS, "link", "set", "dev", peer, "up"},
		{"-n", h.NS, "link", "set", "dev", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Close kills what still runs in the hosts' namespaces (daemons such as
// epmd leave the process group of the command that started them), then
// deletes the namespaces, the veth pairs and the bridge; it may be called
// more than once.
func (n *Net) Close() error {
	n.mu.Lock()
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		killAll(h.NS)
		errs = append(errs, deleteNS(h.NS))
		_ = ip("link", "del", "dev", h.veth) // gone with the namespace, unless a process holds it
	}
	if linkExists(n.bridge) {
		errs = append(errs, ip("link", "del", "dev", n.bridge))
	}
	return errors.Join(errs...)
}

// Wrap makes cmd (not started yet) run in the host's namespace, through
// nsenter, which executes it in place: the process id, signals and
// process group are the command's own.
func (h *Host) Wrap(cmd *exec.Cmd) {
	args := append([]string{"nsenter", "--net=" + filepath.Join("/run/netns", h.NS), "--", cmd.Path}, cmd.Args[1:]...)
	if p, err := exec.LookPath("nsenter"); err == nil {
		cmd.Path = p
	} else {
		cmd.Err = err
	}
	cmd.Args = args
}

// Command is an exec.Cmd running name in the host's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	h.Wrap(cmd)
	return cmd
}

// Cut drops every packet between the host and the peers, in both
// directions, until Heal: a peer is an address (every packet to and from
// it) or an address:port (the TCP connections the host opens to that
// endpoint). The rules are on the INPUT and OUTPUT chains of the host's
// own namespace, so they touch nothing outside the suite's network;
// connections across the cut hang as on a real network split (no reset,
// no refusal). tag names the rules (a comment).
func (h *Host) Cut(tag string, peers []string) (*Partition, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("iptables not installed (run `make test-deps`): %w", err)
	}
	p := &Partition{tag: "orderflow-" + tag}
	comment := []string{"-m", "comment", "--comment", p.tag}
	for _, peer := range peers {
		addr, port, err := net.SplitHostPort(peer)
		out := []string{"OUTPUT", "-d", peer}
		in := []string{"INPUT", "-s", peer}
		if err == nil {
			out = []string{"OUTPUT", "-d", addr, "-p", "tcp", "--dport", port}
			in = []string{"INPUT", "-s", addr, "-p", "tcp", "--sport", port}
		}
		for _, rule := range [][]string{out, in} {
			rule = append(append(rule, comment...), "-j", "DROP")
			if err := iptablesIn(h.NS, append([]string{"-I"}, rule...)...); err != nil {
				return p, errors.Join(err, p.Heal())
			}
			p.mu.Lock()
			p.rules = append(p.rules, nsRule{ns: h.NS, rule: rule})
			p.mu.Unlock()
		}
	}
	return p, nil
}

// iptablesIn runs iptables in the namespace ns.
func iptablesIn(ns string, args ...string) error {
	cmd := exec.Command("iptables", append([]string{"-w"}, args...)...)
	(&Host{NS: ns}).Wrap(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables in %s %s: %w: %s", ns, strings.Join(args, " "), err, out)
	}
	return nil
}

// killAll sends SIGKILL to every process in the namespace ns and waits
// (up to 5 s) until none is left.
func killAll(ns string) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if err != nil || len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

func deleteNS(ns string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ip("netns", "del", ns)
}

// freeSubnet picks a /24 of 10.213/16 ("10.213.X.") that no address or
// route of the machine is in.
func freeSubnet() (string, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		return "", fmt.Errorf("ip addr: %w", err)
	}
	routes, err := exec.Command("ip", "-4", "route").Output()
	if err != nil {
		return "", fmt.Errorf("ip route: %w", err)
	}
	used := string(out) + string(routes)
	for range 100 {
		x, _ := rand.Int(rand.Reader, big.NewInt(256))
		subnet := fmt.Sprintf("10.213.%d.", x.Int64())
		if !strings.Contains(used, subnet) {
			return subnet, nil
		}
	}
	return "", errors.New("no free /24 in 10.213/16")
}

// cleanStale deletes the bridges of Nets whose owning process has exited,
// with their namespaces and veths.
func cleanStale() error {
	links, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range links {
		br := l.Name()
		if !strings.HasPrefix(br, "ofc") {
			continue
		}
		alias, err := os.ReadFile(filepath.Join("/sys/class/net", br, "ifalias"))
		pid, ok := strings.CutPrefix(strings.TrimSpace(string(alias)), netAlias)
		if err != nil || !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pid)); err == nil {
			continue // its run is still going
		}
		id := strings.TrimPrefix(br, "ofc")
		nss, _ := os.ReadDir("/run/netns")
		for _, ns := range nss {
			if strings.HasPrefix(ns.Name(), "ofc-"+id+"-") {
				killAll(ns.Name())
				errs = append(errs, deleteNS(ns.Name()))
			}
		}
		for _, v := range links {
			if strings.HasPrefix(v.Name(), "ofv"+id) && linkExists(v.Name()) {
				_ = ip("link", "del", "dev", v.Name())
			}
		}
		errs = append(errs, ip("link", "del", "dev", br))
	}
	return errors.Join(errs...)
}
