package chaos

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Group is a cgroup (v2) of the suite's own, under orderflow-chaos/ in the
// machine's cgroup2 hierarchy. Processes started in it (see FD) are one
// "host" of a partition: Cut drops the connections they open, whatever
// loopback address they come from, so processes that all listen and dial
// on 127.0.0.1 can still be partitioned one from another.
type Group struct {
	Name string
	rel  string // path relative to the cgroup2 root, as iptables' --path takes it
	dir  string
	fd   int
}

// NewGroup creates the cgroup orderflow-chaos/<name>; name must be unique
// to the caller.
func NewGroup(name string) (*Group, error) {
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	rel := filepath.Join("orderflow-chaos", name)
	dir := filepath.Join(root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return &Group{Name: name, rel: rel, dir: dir, fd: fd}, nil
}

// FD is the cgroup's directory: a process started with
// SysProcAttr{UseCgroupFD: true, CgroupFD: FD()} lives in it from its
// first instruction, so every socket it ever opens belongs to it.
func (g *Group) FD() int { return g.fd }

// Wrap makes cmd (not started yet) start in the cgroup.
func (g *Group) Wrap(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, g.fd
}

// Close removes the cgroup once its processes have exited (it waits up to
// 10 s for them).
func (g *Group) Close() error {
	_ = syscall.Close(g.fd)
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	return fmt.Errorf("remove cgroup %s: %w", g.dir, err)
}

// cgroup2Root is where the cgroup2 hierarchy is mounted (/sys/fs/cgroup
// on a unified system, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 && fields[2] == "cgroup2" {
			return fields[1], nil
		}
	}
	return "", errors.New("no cgroup2 hierarchy mounted")
}

// Cut partitions the processes of the groups from the listening endpoints
// to (host:port): every TCP connection a process of a group opens to one
// of them, open already or opened later, has its packets dropped in both
// directions until Heal, as on a real network split (no reset, no
// refusal). It marks such connections (conntrack mark, set by rules on the
// OUTPUT chain that match the group's cgroup and the endpoint) and drops
// the marked packets on the INPUT chain, which loopback traffic passes.
// Every rule names only the suite's cgroups and endpoints and carries a
// comment of tag's, which must be unique to the caller.
func Cut(tag string, from []*Group, to []string) (*Partition, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("iptables not installed (run `make deps`): %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	mark := fmt.Sprintf("0x%x", binary.BigEndian.Uint32(b[:])|1)
	p := &Partition{tag: "orderflow-" + tag}
	add := func(rule []string) error {
		if err := iptables(append([]string{"-I"}, rule...)...); err != nil {
			return err
		}
		p.mu.Lock()
		p.rules = append(p.rules, nsRule{rule: rule})
		p.mu.Unlock()
		return nil
	}
	comment := []string{"-m", "comment", "--comment", p.tag}
	if err := add(append(append([]string{"INPUT", "-m", "connmark", "--mark", mark}, comment...), "-j", "DROP")); err != nil {
		return p, errors.Join(err, p.Heal())
	}
	for _, g := range from {
		for _, ep := range to {
			host, port, err := net.SplitHostPort(ep)
			if err != nil {
				return p, errors.Join(err, p.Heal())
			}
			rule := append([]string{"OUTPUT", "-m", "cgroup", "--path", g.rel, "-p", "tcp", "-d", host, "--dport", port}, comment...)
			if err := add(append(rule, "-j", "CONNMARK", "--set-mark", mark)); err != nil {
				return p, errors.Join(err, p.Heal())
			}
		}
	}
	return p, nil
}
