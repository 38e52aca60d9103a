package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Toxic is a toxiproxy proxy run in process: it forwards a loopback port
// to a target and can slow the traffic down (Latency), stall it while
// keeping the connections open (Blackhole), or drop every connection and
// refuse new ones (Cut).
type Toxic struct {
	p     *toxiproxy.Proxy
	count atomic.Int64
}

var toxicSeq atomic.Int64

// NewToxic starts a proxy on a free loopback port that forwards to target
// (host:port).
func NewToxic(target string) (*Toxic, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, fmt.Sprintf("toxic-%d", toxicSeq.Add(1)), "127.0.0.1:0", target)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start toxiproxy to %s: %w", target, err)
	}
	return &Toxic{p: p}, nil
}

// Addr is the proxy's listen address (host:port).
func (t *Toxic) Addr() string { return t.p.Listen }

// add adds one toxic of type kind to a stream ("upstream" is client to
// target, "downstream" target to client).
func (t *Toxic) add(kind, stream string, attrs string) error {
	body := fmt.Sprintf(`{"name":"%s-%d","type":%q,"stream":%q,"attributes":%s}`, kind, t.count.Add(1), kind, stream, attrs)
	if _, err := t.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("add %s toxic: %w", kind, err)
	}
	return nil
}

// Latency adds d to every round trip through the proxy: half to the data
// towards the target, half to the answers (symmetric, so a client that
// estimates the target's clock from a round trip's midpoint is not misled).
func (t *Toxic) Latency(d time.Duration) error {
	attrs := fmt.Sprintf(`{"latency":%d}`, (d / 2).Milliseconds())
	if err := t.add("latency", "upstream", attrs); err != nil {
		return err
	}
	return t.add("latency", "downstream", attrs)
}

// Jitter is Latency with a random ± jitter on each half (toxiproxy
// draws it per chunk of data).
func (t *Toxic) Jitter(d, jitter time.Duration) error {
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, (d / 2).Milliseconds(), (jitter / 2).Milliseconds())
	if err := t.add("latency", "upstream", attrs); err != nil {
		return err
	}
	return t.add("latency", "downstream", attrs)
}

// Loss approximates packet loss, which toxiproxy (a TCP proxy) cannot
// drop below the stream: with probability p per connection, the
// connection stalls (its data is held, as when every packet is lost) and
// with probability p it is reset by the peer. A client sees time-outs and
// resets on a share of its connections and has to reconnect, as it does
// on a lossy network; it never sees corrupted or reordered bytes.
func (t *Toxic) Loss(p float64) error {
	for _, tx := range []struct{ kind, attrs string }{{"timeout", `{"timeout":0}`}, {"reset_peer", `{"timeout":0}`}} {
		body := fmt.Sprintf(`{"name":"%s-%d","type":%q,"stream":"downstream","toxicity":%g,"attributes":%s}`,
			tx.kind, t.count.Add(1), tx.kind, p, tx.attrs)
		if _, err := t.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return fmt.Errorf("add %s toxic: %w", tx.kind, err)
		}
	}
	return nil
}

// Blackhole drops the data in both directions while keeping the
// connections open, as a network that silently loses packets does; new
// connections are accepted and get nothing either. After Heal, streams
// that lost data are out of step, so their clients must reconnect.
func (t *Toxic) Blackhole() error {
	if err := t.add("timeout", "upstream", `{"timeout":0}`); err != nil {
		return err
	}
	return t.add("timeout", "downstream", `{"timeout":0}`)
}

// Heal removes every toxic: traffic flows normally again.
func (t *Toxic) Heal() { t.p.Toxics.ResetToxics(context.Background()) }

// Cut drops the open connections and refuses new ones until Restore.
func (t *Toxic) Cut() { t.p.Stop() }

// Restore listens again on the same address after Cut.
func (t *Toxic) Restore() error {
	if err := t.p.Start(); err != nil {
		return fmt.Errorf("restart toxiproxy on %s: %w", t.p.Listen, err)
	}
	return nil
}

// Retarget drops the open connections and forwards new ones, on the same
// listen address, to target instead (as a failover that moves the service
// behind one address does).
func (t *Toxic) Retarget(target string) error {
	t.p.Stop()
	t.p.Upstream = target
	return t.Restore()
}

// Close stops the proxy and drops its connections.
func (t *Toxic) Close() { t.p.Stop() }
