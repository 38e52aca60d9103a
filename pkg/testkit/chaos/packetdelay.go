package chaos

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
)

// The NFQUEUE queue numbers PacketDelay binds: a range of its own, so it
// never takes a queue another program reads.
const (
	delayQueueFirst = 1400
	delayQueueCount = 100
)

// delayChainPrefix starts the name of every PacketDelay chain; the rest is
// the owning process's id and a sequence number (OFPD-<pid>-<n>), so a
// chain left by a process that no longer runs can be told from a live
// one's and removed.
const delayChainPrefix = "OFPD-"

// delayComment is the comment every PacketDelay rule carries (with the
// caller's tag after it).
const delayComment = "orderflow-chaos-packetdelay"

var delaySeq atomic.Int64

// PacketDelayConfig says which packets a PacketDelay slows down and drops,
// and where.
type PacketDelayConfig struct {
	// Tag names the rules (their comment is
	// orderflow-chaos-packetdelay-<Tag>); it must be unique to the caller
	// and hold no spaces.
	Tag string
	// NetNS is the network namespace (a name under /run/netns, as `ip
	// netns` makes) whose iptables rules and netlink queue are used; ""
	// is this process's own.
	NetNS string
	// Match is the iptables match of the packets that open the
	// connections to slow down, as a client sends them, for example
	// {"-p", "tcp", "-d", "127.0.0.1", "--dport", "6379"}, with, to
	// narrow it, a cgroup match of the clients'. Every packet of such a
	// connection, both ways, is then delayed and may be dropped.
	Match []string
	// Delay is added to every round trip: each packet is held Delay/2,
	// in either direction.
	Delay time.Duration
	// Loss is the share of packets dropped (0 to 1), in either direction.
	Loss float64
}

// PacketDelay delays and drops the packets of chosen connections, as netem
// would; this machine's kernel has no netem queueing discipline, so it is
// built from the parts it has: iptables' statistic match drops a random
// share of the packets, and the NFQUEUE target hands the others to a
// netlink queue this process reads, which gives each its ACCEPT verdict
// once it has been held long enough, in the order they came.
//
// The rules live in an iptables chain of its own (OFPD-<pid>-<n>) in the
// filter table, jumped to from OUTPUT, which every packet the namespace
// sends crosses (loopback traffic included), and from INPUT for packets
// coming in on another interface than loopback (a veth's, when the
// namespace is a host's), so each packet is handled once. The chain marks
// the connections whose packets fit Match (conntrack mark), drops Loss of
// the marked connections' packets and queues the rest. The NFQUEUE rule
// carries --queue-bypass: if this process dies, packets pass undelayed
// until the next PacketDelay removes its chain.
type PacketDelay struct {
	cfg   PacketDelayConfig
	chain string
	queue uint16

	conn    *netlink.Conn
	pending chan heldPacket
	stop    atomic.Bool
	wg      sync.WaitGroup
	held    atomic.Int64

	mu      sync.Mutex
	jumps   [][]string // the rules in OUTPUT and INPUT that jump to chain
	made    bool       // the chain exists
	dropped int64      // the DROP rule's count when the chain was removed
	closed  bool
}

// heldPacket is a queued packet and when it may go on.
type heldPacket struct {
	id  uint32
	due time.Time
}

// NewPacketDelay removes the chains left by PacketDelays of processes that
// no longer run, binds a free queue of its range, and installs the rules:
// from its return on, the matched connections are slow and lossy until
// Close.
func NewPacketDelay(cfg PacketDelayConfig) (*PacketDelay, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("iptables not installed (run `make test-deps`): %w", err)
	}
	if cfg.Loss < 0 || cfg.Loss >= 1 || cfg.Delay < 0 || len(cfg.Match) == 0 || strings.ContainsAny(cfg.Tag, " \t\"") {
		return nil, fmt.Errorf("packet delay %q: want a match, a delay ≥ 0, a loss in [0, 1) and a tag without spaces", cfg.Tag)
	}
	p := &PacketDelay{
		cfg:     cfg,
		chain:   fmt.Sprintf("%s%d-%d", delayChainPrefix, os.Getpid(), delaySeq.Add(1)),
		pending: make(chan heldPacket, 1<<16),
	}
	if err := p.removeStale(); err != nil {
		return nil, err
	}
	if cfg.Delay > 0 {
		if err := p.bind(); err != nil {
			return nil, err
		}
		p.wg.Add(2)
		go p.read()
		go p.release()
	}
	if err := p.install(); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// Held is how many packets have been queued (and delayed) so far.
func (p *PacketDelay) Held() int64 { return p.held.Load() }

// Dropped is the packet count of the DROP rule: how many packets were
// dropped so far (until Close, after it the count at Close).
func (p *PacketDelay) Dropped() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.made {
		return p.dropped, nil
	}
	return p.dropCount()
}

// Close removes the rules, releases the packets still held once their
// time has come, and unbinds the queue. It may be called more than once.
func (p *PacketDelay) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, rule := range p.jumps {
		if _, err := p.iptables(append([]string{"-D"}, rule...)...); err != nil {
			errs = append(errs, err)
		}
	}
	p.jumps = nil
	if p.conn != nil {
		// A packet that passed the rules just before they went is
		// handed to the queue shortly after: wait for it, then let the
		// releaser give the last ones their verdict when due.
		time.Sleep(p.cfg.Delay/2 + 100*time.Millisecond)
		p.stop.Store(true)
		_ = p.conn.SetReadDeadline(time.Now())
		p.wg.Wait()
		errs = append(errs, p.conn.Close())
	}
	if p.made {
		if n, err := p.dropCount(); err == nil {
			p.dropped = n
		}
		errs = append(errs, p.removeChain(p.chain))
		p.made = false
	}
	return errors.Join(errs...)
}

// install creates the chain, fills it and makes OUTPUT and INPUT jump to
// it.
func (p *PacketDelay) install() error {
	comment := []string{"-m", "comment", "--comment", delayComment + "-" + p.cfg.Tag}
	if _, err := p.iptables("-N", p.chain); err != nil {
		return err
	}
	p.mu.Lock()
	p.made = true
	p.mu.Unlock()
	var b [4]byte
	_, _ = rand.Read(b[:])
	mark := fmt.Sprintf("0x%x", binary.BigEndian.Uint32(b[:])|1)
	marked := []string{"-m", "connmark", "--mark", mark}
	rules := [][]string{append(append(append([]string{}, p.cfg.Match...), comment...), "-j", "CONNMARK", "--set-mark", mark)}
	if p.cfg.Loss > 0 {
		rules = append(rules, append(append(append([]string{}, marked...), comment...),
			"-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(p.cfg.Loss, 'f', -1, 64), "-j", "DROP"))
	}
	if p.cfg.Delay > 0 {
		rules = append(rules, append(append(append([]string{}, marked...), comment...),
			"-j", "NFQUEUE", "--queue-num", strconv.Itoa(int(p.queue)), "--queue-bypass"))
	}
	for _, rule := range rules {
		if _, err := p.iptables(append([]string{"-A", p.chain}, rule...)...); err != nil {
			return err
		}
	}
	for _, jump := range [][]string{
		append(append([]string{"OUTPUT"}, comment...), "-j", p.chain),
		append(append([]string{"INPUT", "!", "-i", "lo"}, comment...), "-j", p.chain),
	} {
		if _, err := p.iptables(append([]string{"-I"}, jump...)...); err != nil {
			return err
		}
		p.mu.Lock()
		p.jumps = append(p.jumps, jump)
		p.mu.Unlock()
	}
	return nil
}

// dropCount reads the DROP rule's packet count from `iptables -L -v -x`.
func (p *PacketDelay) dropCount() (int64, error) {
	out, err := p.iptables("-L", p.chain, "-v", "-x", "-n")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 2 && f[2] == "DROP" {
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, nil
}

// removeStale removes the chains (and the jumps to them) of PacketDelays
// whose process no longer runs: a run killed before its Close.
func (p *PacketDelay) removeStale() error {
	out, err := p.iptables("-S")
	if err != nil {
		return err
	}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "-N" || !strings.HasPrefix(f[1], delayChainPrefix) {
			continue
		}
		pidText, _, _ := strings.Cut(strings.TrimPrefix(f[1], delayChainPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // not one of ours, or its process still runs
		}
		errs = append(errs, p.removeChain(f[1]))
	}
	return errors.Join(errs...)
}

// removeChain deletes every rule that jumps to chain, then the chain.
func (p *PacketDelay) removeChain(chain string) error {
	out, err := p.iptables("-S")
	if err != nil {
		return err
	}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// -A OUTPUT … -j <chain>; the comments hold no spaces, so the
		// fields are the rule's arguments.
		if len(f) > 3 && f[0] == "-A" && f[len(f)-2] == "-j" && f[len(f)-1] == chain && strings.Contains(sc.Text(), delayComment) {
			f[0] = "-D"
			if _, err := p.iptables(f...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := p.iptables("-F", chain); err != nil {
		errs = append(errs, err)
	}
	if _, err := p.iptables("-X", chain); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// iptables runs iptables (waiting for the xtables lock) in the namespace.
func (p *PacketDelay) iptables(args ...string) ([]byte, error) {
	cmd := exec.Command("iptables", append([]string{"-w"}, args...)...)
	if p.cfg.NetNS != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.cfg.NetNS, "iptables", "-w"}, args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("iptables %s (netns %q): %w: %s", strings.Join(args, " "), p.cfg.NetNS, err, stderr.String())
	}
	return out, nil
}

// The nfnetlink_queue protocol (uapi/linux/netfilter/nfnetlink_queue.h):
// message types, attributes and constants this file uses.
const (
	nfqnlMsgPacket       = 0 // NFQNL_MSG_PACKET: a queued packet
	nfqnlMsgConfig       = 2 // NFQNL_MSG_CONFIG
	nfqnlMsgVerdictBatch = 3 // NFQNL_MSG_VERDICT_BATCH: every packet up to an id

	nfqaPacketHdr  = 1 // NFQA_PACKET_HDR: packet id (be32), hw protocol, hook
	nfqaVerdictHdr = 2 // NFQA_VERDICT_HDR: verdict (be32), packet id (be32)

	nfqaCfgCmd         = 1 // NFQA_CFG_CMD: command (u8), pad, pf (be16)
	nfqaCfgParams      = 2 // NFQA_CFG_PARAMS: copy range (be32), copy mode (u8)
	nfqaCfgQueueMaxlen = 3 // NFQA_CFG_QUEUE_MAXLEN (be32)
	nfqaCfgMask        = 4 // NFQA_CFG_MASK (be32)
	nfqaCfgFlags       = 5 // NFQA_CFG_FLAGS (be32)

	nfqnlCfgCmdBind = 1 // NFQNL_CFG_CMD_BIND
	nfqnlCopyMeta   = 1 // NFQNL_COPY_META: the packet's metadata, not its bytes

	// NFQA_CFG_F_FAIL_OPEN: a packet that finds the queue full passes
	// (undelayed) instead of being dropped; NFQA_CFG_F_GSO: large
	// loopback packets are queued whole, not segmented first.
	nfqaCfgFFailOpen = 1
	nfqaCfgFGSO      = 4

	nfAccept = 1 // NF_ACCEPT

	delayQueueMaxlen = 1 << 16
)

// bind opens a netlink socket in the namespace and binds the first queue
// of the range that no one else has.
func (p *PacketDelay) bind() error {
	cfg := &netlink.Config{}
	if p.cfg.NetNS != "" {
		ns, err := os.Open("/run/netns/" + p.cfg.NetNS)
		if err != nil {
			return fmt.Errorf("open network namespace: %w", err)
		}
		defer ns.Close()
		cfg.NetNS = int(ns.Fd())
	}
	conn, err := netlink.Dial(syscall.NETLINK_NETFILTER, cfg)
	if err != nil {
		return fmt.Errorf("netfilter netlink socket: %w", err)
	}
	// Packet notices must not be lost: a full socket buffer would leave
	// packets queued with no one to release them.
	_ = conn.SetReadBuffer(8 << 20)
	_ = conn.SetOption(netlink.NoENOBUFS, true)
	var errs []error
	for q := uint16(delayQueueFirst); q < delayQueueFirst+delayQueueCount; q++ {
		if queueTaken(q) {
			continue
		}
		if err := configureQueue(conn, q); err != nil {
			errs = append(errs, fmt.Errorf("queue %d: %w", q, err))
			continue
		}
		p.conn, p.queue = conn, q
		return nil
	}
	_ = conn.Close()
	return fmt.Errorf("bind a netfilter queue in %d-%d: %w", delayQueueFirst, delayQueueFirst+delayQueueCount-1, errors.Join(errs...))
}

// queueTaken reports whether /proc/net/netfilter/nfnetlink_queue lists
// queue q as bound (by this namespace's readers).
func queueTaken(q uint16) bool {
	b, err := os.ReadFile("/proc/net/netfilter/nfnetlink_queue")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == strconv.Itoa(int(q)) {
			return true
		}
	}
	return false
}

// configureQueue binds queue q to conn (the kernel refuses a queue bound
// to another socket) with metadata-only copies, a long queue, fail-open
// and whole GSO packets.
func configureQueue(conn *netlink.Conn, q uint16) error {
	send := func(attrs []netfilter.Attribute) error {
		m, err := netfilter.MarshalNetlink(netfilter.Header{
			SubsystemID: netfilter.NFSubsysQueue, MessageType: nfqnlMsgConfig,
			Family: netfilter.ProtoUnspec, ResourceID: q,
			Flags: netlink.Request | netlink.Acknowledge,
		}, attrs)
		if err != nil {
			return err
		}
		_, err = conn.Execute(m)
		return err
	}
	if err := send([]netfilter.Attribute{{Type: nfqaCfgCmd, Data: []byte{nfqnlCfgCmdBind, 0, 0, 0}}}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	params := append(netfilter.Uint32Bytes(0), nfqnlCopyMeta)
	flags := netfilter.Uint32Bytes(nfqaCfgFFailOpen | nfqaCfgFGSO)
	if err := send([]netfilter.Attribute{
		{Type: nfqaCfgParams, Data: params},
		{Type: nfqaCfgQueueMaxlen, Data: netfilter.Uint32Bytes(delayQueueMaxlen)},
		{Type: nfqaCfgFlags, Data: flags},
		{Type: nfqaCfgMask, Data: flags},
	}); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return nil
}

// read receives the queued packets' notices and hands each to the
// releaser with the time it may go on.
func (p *PacketDelay) read() {
	defer p.wg.Done()
	defer close(p.pending)
	hold := p.cfg.Delay / 2
	for {
		msgs, err := p.conn.Receive()
		if err != nil {
			if p.stop.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// An error answer to a verdict: the packets stay queued
			// and the next verdict covers them.
			continue
		}
		now := time.Now()
		for _, m := range msgs {
			h, attrs, err := netfilter.UnmarshalNetlink(m)
			if err != nil || h.SubsystemID != netfilter.NFSubsysQueue || h.MessageType != nfqnlMsgPacket {
				continue
			}
			for _, a := range attrs {
				if a.Type == nfqaPacketHdr && len(a.Data) >= 4 {
					p.held.Add(1)
					p.pending <- heldPacket{id: binary.BigEndian.Uint32(a.Data), due: now.Add(hold)}
				}
			}
		}
	}
}

// release gives the held packets their ACCEPT verdict once due, in the
// order they came: one batch verdict for every packet due by then.
func (p *PacketDelay) release() {
	defer p.wg.Done()
	next, ok := <-p.pending
	for ok {
		time.Sleep(time.Until(next.due))
		last := next.id
		more := false
	due:
		for {
			select {
			case next, ok = <-p.pending:
				if !ok {
					break due
				}
				if next.due.After(time.Now()) {
					more = true
					break due
				}
				last = next.id
			default:
				break due
			}
		}
		p.accept(last)
		if !ok || more {
			continue
		}
		next, ok = <-p.pending
	}
}

// accept gives every packet up to id the ACCEPT verdict.
func (p *PacketDelay) accept(id uint32) {
	verdict := append(netfilter.Uint32Bytes(nfAccept), netfilter.Uint32Bytes(id)...)
	m, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysQueue, MessageType: nfqnlMsgVerdictBatch,
		Family: netfilter.ProtoUnspec, ResourceID: p.queue, Flags: netlink.Request,
	}, []netfilter.Attribute{{Type: nfqaVerdictHdr, Data: verdict}})
	if err != nil {
		return
	}
	_, _ = p.conn.Send(m)
}
