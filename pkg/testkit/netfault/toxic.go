package netfault

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Toxic forwards a loopback port to a target and can slow the traffic
// down (Latency), stall it while keeping the connections open
// (Blackhole), or drop every connection and refuse new ones (Cut). The
// faults apply to the open connections as well as to new ones.
type Toxic struct {
	addr      string
	delay     atomic.Int64 // added to each direction, in nanoseconds
	blackhole atomic.Bool

	mu     sync.Mutex
	target string
	lis    net.Listener // nil while cut
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewToxic starts a proxy on a free loopback port that forwards to target
// (host:port).
func NewToxic(target string) (*Toxic, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for a proxy to %s: %w", target, err)
	}
	t := &Toxic{addr: lis.Addr().String(), target: target, conns: make(map[net.Conn]struct{})}
	t.serve(lis)
	return t, nil
}

// Addr is the proxy's listen address (host:port).
func (t *Toxic) Addr() string { return t.addr }

// Latency adds d to every round trip through the proxy: half to the data
// towards the target, half to the answers (symmetric, so a client that
// estimates the target's clock from a round trip's midpoint is not
// misled). A later call replaces the latency.
func (t *Toxic) Latency(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("latency %v: negative", d)
	}
	t.delay.Store(int64(d / 2))
	return nil
}

// Blackhole drops the data in both directions while keeping the
// connections open, as a network that silently loses packets does; new
// connections are accepted and get nothing either. After Heal, streams
// that lost data are out of step, so their clients must reconnect.
func (t *Toxic) Blackhole() error {
	t.blackhole.Store(true)
	return nil
}

// Heal removes the latency and the blackhole: traffic flows normally
// again.
func (t *Toxic) Heal() {
	t.delay.Store(0)
	t.blackhole.Store(false)
}

// Cut drops the open connections and refuses new ones until Restore.
func (t *Toxic) Cut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lis != nil {
		_ = t.lis.Close()
		t.lis = nil
	}
	for c := range t.conns {
		_ = c.Close()
	}
}

// Restore listens again on the same address after Cut.
func (t *Toxic) Restore() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lis != nil {
		return nil
	}
	lis, err := net.Listen("tcp", t.addr)
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", t.addr, err)
	}
	t.serve(lis)
	return nil
}

// Retarget drops the open connections and forwards new ones, on the same
// listen address, to target instead (as a failover that moves the service
// behind one address does).
func (t *Toxic) Retarget(target string) error {
	t.Cut()
	t.mu.Lock()
	t.target = target
	t.mu.Unlock()
	return t.Restore()
}

// Close stops the proxy, drops its connections and waits for the
// forwarding goroutines.
func (t *Toxic) Close() {
	t.Cut()
	t.wg.Wait()
}

// serve accepts on lis; t.mu is held or t not yet shared.
func (t *Toxic) serve(lis net.Listener) {
	t.lis = lis
	t.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			t.wg.Go(func() { t.forward(c) })
		}
	})
}

func (t *Toxic) forward(c net.Conn) {
	t.mu.Lock()
	target := t.target
	t.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !t.track(c, up) {
		return
	}
	done := make(chan struct{})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			_ = c.Close()
			_ = up.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() { t.pipe(up, c, done, stop) })
	wg.Go(func() { t.pipe(c, up, done, stop) })
	wg.Wait()
	stop()
	t.mu.Lock()
	delete(t.conns, c)
	delete(t.conns, up)
	t.mu.Unlock()
}

// track registers a forwarded pair, or closes it when the proxy was cut
// meanwhile.
func (t *Toxic) track(c, up net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lis == nil {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	t.conns[c], t.conns[up] = struct{}{}, struct{}{}
	return true
}

// chunk is data read from one side, stamped with when it arrived.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src to dst: a reader stamps each chunk as it arrives and a
// writer sends it on once the latency has passed since then (so a latency
// delays the data without capping the throughput) or drops it while the
// blackhole is on. An end of src half-closes dst once the data before it
// is sent; any other failure stops both directions.
func (t *Toxic) pipe(dst, src net.Conn, done <-chan struct{}, stop func()) {
	chunks := make(chan chunk, 64)
	var eof atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], at: time.Now()}:
				case <-done:
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					eof.Store(true)
				} else {
					stop()
				}
				return
			}
		}
	})
	defer wg.Wait()
	for ch := range chunks {
		if d := time.Duration(t.delay.Load()); d > 0 {
			timer := time.NewTimer(time.Until(ch.at.Add(d)))
			select {
			case <-timer.C:
			case <-done:
				timer.Stop()
				return
			}
		}
		if t.blackhole.Load() {
			continue
		}
		if _, err := dst.Write(ch.data); err != nil {
			stop()
			return
		}
	}
	if eof.Load() {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
}
