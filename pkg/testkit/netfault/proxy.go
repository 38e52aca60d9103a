// Package netfault injects network faults between a process and a TCP
// dependency, in process and without privileges: a forwarding proxy that
// can cut the connections (Proxy), one that can also delay or silently
// drop the traffic (Toxic), and a listener that never answers (Silent).
// It imports nothing beyond the standard library, so the runtime modules'
// tests can use it without pulling test-only modules into their go.mod.
package netfault

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards TCP connections from a loopback port to a target. Cut
// drops every open connection and refuses new ones (they are accepted and
// closed at once, like a peer that resets) until Restore.
type Proxy struct {
	lis    net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	trigger []byte      // CutAfter's armed pattern, or nil
	armed   atomic.Bool // trigger != nil, read without the lock
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) { return NewProxyOn("127.0.0.1", target) }

// NewProxyOn listens on a free port of the address host and forwards to
// target (the bridge of a Net, say, for a server of the machine's own
// namespace that listens on loopback only).
func NewProxyOn(host, target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	p := &Proxy{lis: lis, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Cut drops the open connections and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// CutAfter arms a one-shot cut: the first read from a client that contains
// match (within that one read) is forwarded to the target, and the proxy
// cuts at that moment, as Cut does, without forwarding the target's
// answer. The target runs the command and the client never hears of it:
// an outcome the client cannot know, as when a server dies after its
// write reached a replica. Restore lets connections through again.
func (p *Proxy) CutAfter(match []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger = bytes.Clone(match)
	p.armed.Store(true)
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Open is the number of connections being forwarded now (each counts its
// two sides once).
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops listening, drops every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	err := p.lis.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err == nil || errors.Is(err, net.ErrClosed) {
			_ = dst.(*net.TCPConn).CloseWrite()
		}
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Go(func() { p.upstream(up, c) })
	wg.Go(func() { pipe(c, up) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// upstream forwards the client's data to the target, firing an armed
// CutAfter: every other connection and then the client's side are closed
// before the matching data is sent on, so no answer reaches the client,
// while the target's side stays open until the target answers (the
// downstream copy then fails and closes it).
func (p *Proxy) upstream(up, c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			tripped := p.armed.Load() && p.trip(up, buf[:n])
			if _, werr := up.Write(buf[:n]); werr != nil || tripped {
				_ = c.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				_ = up.(*net.TCPConn).CloseWrite()
			}
			_ = up.Close()
			_ = c.Close()
			return
		}
	}
}

// trip reports whether data fires the armed CutAfter; if so it cuts,
// sparing the target side up.
func (p *Proxy) trip(up net.Conn, data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trigger == nil || !bytes.Contains(data, p.trigger) {
		return false
	}
	p.trigger, p.cut = nil, true
	p.armed.Store(false)
	for c := range p.conns {
		if c != up {
			_ = c.Close()
		}
	}
	return true
}

// track registers a forwarded pair, or closes it when the proxy was cut
// meanwhile.
func (p *Proxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}
