// Package amqpbus talks to RabbitMQ: a connection that is redialled after
// it drops, to the next node of a cluster when several are configured
// (with topology declared again on every new connection),
// publishing with publisher confirms and the mandatory flag, and a consumer
// loop with manual acknowledgements and bounded prefetch that resubscribes
// by itself.
package amqpbus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/platform/backoff"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/platform/tlsconf"
)

// Config is the RabbitMQ part of a service's configuration.
type Config struct {
	// URL is one node's AMQP URL, or a comma-separated list of the URLs of
	// a cluster's nodes: a connection goes to one of them and, when it
	// drops or cannot be made, to the next.
	URL            config.Secret `env:"ORDERFLOW_AMQP_URL" envDefault:"amqp://guest:guest@127.0.0.1:5672/" desc:"AMQP URL of a RabbitMQ node, or comma-separated URLs of a cluster's nodes, tried in turn." range:"amqp:// or amqps:// URLs"`
	DialTimeout    time.Duration `env:"ORDERFLOW_AMQP_DIAL_TIMEOUT" envDefault:"3s" desc:"Bound of opening one RabbitMQ connection."`
	PublishTimeout time.Duration `env:"ORDERFLOW_AMQP_PUBLISH_TIMEOUT" envDefault:"5s" desc:"Bound of waiting for one publish confirm."`
	// Heartbeat is the AMQP heartbeat the client asks for: a connection
	// whose node sends nothing for three of them (a partition: no reset, no
	// refusal) is closed, and the next dial goes to the next node.
	Heartbeat       time.Duration `env:"ORDERFLOW_AMQP_HEARTBEAT" envDefault:"5s" desc:"AMQP heartbeat asked for; a connection silent for three is closed and the next node dialled."`
	PublishChannels int           `env:"ORDERFLOW_AMQP_PUBLISH_CHANNELS" envDefault:"4" desc:"Confirm-mode channels the publisher spreads publishes over."`
	PublishInFlight int           `env:"ORDERFLOW_AMQP_PUBLISH_IN_FLIGHT" envDefault:"256" desc:"Confirms outstanding at once on one publish channel."`
	// TLSCAFile holds the certificates that may sign the nodes' (empty:
	// the system's roots); TLSCertFile and TLSKeyFile are the client's, for
	// nodes that require one. They apply to amqps:// URLs.
	TLSCAFile   string `env:"ORDERFLOW_AMQP_TLS_CA_FILE" desc:"CA certificates (PEM) that may sign the nodes' certificates, for amqps:// URLs (empty: the system's roots)."`
	TLSCertFile string `env:"ORDERFLOW_AMQP_TLS_CERT_FILE" desc:"Client certificate (PEM) for nodes that require one."`
	TLSKeyFile  string `env:"ORDERFLOW_AMQP_TLS_KEY_FILE" desc:"Client key (PEM) for nodes that require one."`
}

// tlsConfig is the client TLS configuration of amqps:// URLs (nil: the
// library's default, the system's roots).
func (c Config) tlsConfig() (*tls.Config, error) {
	f := tlsconf.Files{
		CA: c.TLSCAFile, CAVar: "ORDERFLOW_AMQP_TLS_CA_FILE",
		Cert: c.TLSCertFile, CertVar: "ORDERFLOW_AMQP_TLS_CERT_FILE",
		Key: c.TLSKeyFile, KeyVar: "ORDERFLOW_AMQP_TLS_KEY_FILE",
	}
	if !f.Set() {
		return nil, nil
	}
	return f.Config()
}

// urls lists the configured node URLs.
func (c Config) urls() []string {
	var out []string
	for _, u := range strings.Split(c.URL.Reveal(), ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Validate checks that ORDERFLOW_AMQP_URL holds at least one URL and that
// each parses; an error names the variable and the entry's position, never
// the URL (it carries the password).
func (c Config) Validate() error {
	parts := strings.Split(c.URL.Reveal(), ",")
	var errs []error
	for i, u := range parts {
		if strings.TrimSpace(u) == "" {
			if len(parts) > 1 {
				errs = append(errs, fmt.Errorf("ORDERFLOW_AMQP_URL entry %d is empty", i+1))
			}
			continue
		}
		if _, err := amqp.ParseURI(strings.TrimSpace(u)); err != nil {
			errs = append(errs, fmt.Errorf("ORDERFLOW_AMQP_URL entry %d is not an AMQP URL (amqp:// or amqps://)", i+1))
		}
	}
	if len(c.urls()) == 0 {
		errs = append(errs, errors.New("ORDERFLOW_AMQP_URL must be set"))
	}
	if _, err := c.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var (
	// ErrNotConfirmed means the broker did not confirm a publish. Every
	// publish error wraps it. Unless the error also wraps ErrNotQueued the
	// outcome is unknown: the confirm timed out or the channel failed after
	// the message was sent, so the broker may well have queued it.
	ErrNotConfirmed = errors.New("publish not confirmed by broker")
	// ErrNotQueued means the message is certainly in no queue: the broker
	// nacked it or returned it as unroutable, or it was never sent. Only
	// then may a caller undo what it recorded for the message.
	ErrNotQueued = errors.New("message not queued")
	// ErrUnreachable means the last dial of every node failed and no
	// connection has been made since: callers fail at once instead of
	// waiting on dials, while a new dial is tried in the background.
	ErrUnreachable = errors.New("rabbitmq unreachable")
)

// Topology declares exchanges, queues and bindings on a fresh channel. It is
// run on every new connection, so it must be idempotent.
type Topology func(ch *amqp.Channel) error

// Conn is a RabbitMQ connection that is dialled again, on demand, after it
// drops. With several node URLs it starts at a random node (so replicas
// spread over the cluster) and each new dial starts at the node after the
// one last connected to, trying every node once before it gives up.
//
// A dial runs in the background, one at a time, and callers wait for it
// only as long as their context allows. Once a dial of every node has
// failed, RabbitMQ counts as unreachable: callers get ErrUnreachable at
// once (each call starts a new dial if none is under way) until a dial
// succeeds, so a partition that drops packets costs a request nothing
// like the dial timeouts of every node.
type Conn struct {
	cfg  Config
	log  *slog.Logger
	topo Topology
	urls []string

	mu   sync.Mutex
	conn *amqp.Connection
	next int // index in urls the next dial starts at
	// dialing is closed when the dial under way ends; nil when none is.
	dialing chan struct{}
	// dialErr is why the last dial failed on every node; nil once one
	// succeeded.
	dialErr error
	dials   sync.WaitGroup

	// ackHold bounds how long a consumer holds an ack back to send it
	// with others (see settler).
	ackHold time.Duration
	// settleFrames counts the ack, nack and reject frames the consumers
	// sent.
	settleFrames atomic.Int64
}

// New returns a Conn; it does not dial until first used.
func New(cfg Config, log *slog.Logger, topo Topology) *Conn {
	urls := cfg.urls()
	next := 0
	if len(urls) > 1 {
		next = rand.IntN(len(urls))
	}
	return &Conn{cfg: cfg, log: log, topo: topo, urls: urls, next: next, ackHold: 20 * time.Millisecond}
}

// connection returns the live connection. When there is none it starts a
// dial (unless one is under way) and waits for it while ctx allows, or
// fails at once with ErrUnreachable when the last dial failed on every
// node.
func (c *Conn) connection(ctx context.Context) (*amqp.Connection, error) {
	c.mu.Lock()
	if c.conn != nil && !c.conn.IsClosed() {
		conn := c.conn
		c.mu.Unlock()
		return conn, nil
	}
	if len(c.urls) == 0 {
		c.mu.Unlock()
		return nil, errors.New("amqp dial: ORDERFLOW_AMQP_URL is empty")
	}
	if c.dialing == nil {
		c.dialing = make(chan struct{})
		c.dials.Add(1)
		go c.dialNodes(c.dialing)
	}
	if err := c.dialErr; err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	done := c.dialing
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqp dial: %w", ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	if c.dialErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, c.dialErr)
	}
	return nil, errors.New("amqp dial: the connection closed as it was made")
}

// dialNodes tries every node once, from the one after the node last
// connected to, records the connection or why every dial failed, and
// closes done.
func (c *Conn) dialNodes(done chan struct{}) {
	defer c.dials.Done()
	c.mu.Lock()
	start := c.next
	c.mu.Unlock()
	var (
		errs []error
		conn *amqp.Connection
		next = start
	)
	for k := range c.urls {
		i := (start + k) % len(c.urls)
		cn, err := c.dial(c.urls[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d of %d: %w", i+1, len(c.urls), err))
			continue
		}
		c.log.Info("amqp connected", "node", i+1, "addr", cn.RemoteAddr().String())
		conn, next = cn, (i+1)%len(c.urls)
		break
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = next
	if conn != nil {
		c.conn, c.dialErr = conn, nil
	} else {
		c.dialErr = errors.Join(errs...)
	}
	c.dialing = nil
	close(done)
}

// dial connects to one node and declares the topology on it.
func (c *Conn) dial(url string) (*amqp.Connection, error) {
	tc, err := c.cfg.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("amqp tls: %w", err)
	}
	heartbeat := c.cfg.Heartbeat
	if heartbeat <= 0 {
		heartbeat = 5 * time.Second
	}
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:       heartbeat,
		Dial:            amqp.DefaultDial(c.cfg.DialTimeout),
		Properties:      amqp.Table{"connection_name": "orderflow"},
		TLSClientConfig: tc,
	})
	if err != nil {
		return nil, fmt.Errorf("amqp dial: %w", err)
	}
	if c.topo != nil {
		ch, err := conn.Channel()
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("amqp topology channel: %w", err)
		}
		if err := c.topo(ch); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("amqp declare topology: %w", err)
		}
		_ = ch.Close()
	}
	return conn, nil
}

// RemoteAddr is the address of the node the live connection goes to, or
// "" when there is none.
func (c *Conn) RemoteAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.conn.IsClosed() {
		return ""
	}
	return c.conn.RemoteAddr().String()
}

// Channel opens a channel on the live connection, waiting for a dial if
// needed (see Conn).
func (c *Conn) Channel() (*amqp.Channel, error) {
	conn, err := c.connection(context.Background())
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp open channel: %w", err)
	}
	return ch, nil
}

// SettleFrames returns the ack, nack and reject frames c's consumers have
// sent. Acks that go together are one frame, so under load it stays below
// the deliveries settled.
func (c *Conn) SettleFrames() int64 { return c.settleFrames.Load() }

// Check reports whether RabbitMQ can be reached (dialling if needed; at
// once ErrUnreachable while the last dial failed on every node).
func (c *Conn) Check() error {
	_, err := c.connection(context.Background())
	return err
}

// unreachable returns an error wrapping ErrUnreachable while the last dial
// failed on every node and no connection has been made since.
func (c *Conn) unreachable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dialErr != nil && (c.conn == nil || c.conn.IsClosed()) {
		return fmt.Errorf("%w: %w", ErrUnreachable, c.dialErr)
	}
	return nil
}

// Close waits for a dial under way and closes the connection.
func (c *Conn) Close() error {
	c.dials.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("amqp close: %w", err)
	}
	return nil
}

// Publisher publishes with confirms over a few shared confirm-mode
// channels, many publishes in flight on each: every publish waits for its
// own confirm (a deferred confirmation), so one slow confirm holds up only
// its own caller, and the broker can confirm a burst of publishes with one
// frame. A message returned as unroutable is matched to its publish by a
// per-publish id header (PublishIDHeader).
type Publisher struct {
	conn     *Conn
	timeout  time.Duration
	inFlight int
	ids      atomic.Uint64
	next     atomic.Uint64

	mu    sync.Mutex
	chans []*pubChannel // nil until first used, replaced once closed
	// opening is closed when the opening of missing channels under way
	// ends; nil when none is. openErr is why the last one failed.
	opening chan struct{}
	openErr error
	closed  bool
}

// PublishIDHeader carries a number unique among one publisher's publishes,
// so that a returned message is matched to the publish it came from.
const PublishIDHeader = "orderflow-publish-id"

// pubChannel is one shared confirm-mode channel.
type pubChannel struct {
	ch *amqp.Channel
	// index is the channel's place in the publisher's list.
	index int
	// slots holds a token per publish whose confirm is outstanding.
	slots chan struct{}
	// returns receives the broker's basic.return frames. The broker sends
	// the return of a message before its confirm and the client hands both
	// over in order from one reader, so a return is in this buffer before
	// its publish's confirm is seen. Its capacity is the channel's slots,
	// and a slot is freed only after the returns received before its
	// confirm have been drained, so the reader never blocks on it.
	returns chan amqp.Return

	mu sync.Mutex
	// pending maps the id of each publish in flight to whether it was
	// returned.
	pending map[int64]bool
	// retired is set once the channel takes no new publishes; it is closed
	// when the last one in flight is settled.
	retired bool
}

// NewPublisher returns a publisher on conn.
func NewPublisher(conn *Conn) *Publisher {
	n := conn.cfg.PublishChannels
	if n <= 0 {
		n = 1
	}
	inFlight := conn.cfg.PublishInFlight
	if inFlight <= 0 {
		inFlight = 1
	}
	return &Publisher{conn: conn, timeout: conn.cfg.PublishTimeout, inFlight: inFlight, chans: make([]*pubChannel, n)}
}

// channel returns the i-th shared channel. When it is missing or closed,
// every missing or closed channel is opened (again) in the background, so
// that after the first publish (or a reconnect) all of them are ready; the
// caller waits for that while ctx allows. A channel the broker closes as
// it is opened (another publish on it broke a rule: a missing exchange) is
// opened again, up to three times, so that one publish's fault does not
// fail the others. While RabbitMQ is unreachable (see Conn) it fails at
// once.
func (p *Publisher) channel(ctx context.Context, i int) (*pubChannel, error) {
	for range 3 {
		pc, err := p.openChannel(ctx, i)
		if pc != nil || err != nil {
			return pc, err
		}
	}
	return nil, errors.New("amqp open channel: closed as it was opened, three times")
}

// openChannel is one try of channel: the channel, or an error, or neither
// when the channel opened was closed again at once.
func (p *Publisher) openChannel(ctx context.Context, i int) (*pubChannel, error) {
	p.mu.Lock()
	if pc := p.chans[i]; pc != nil && !pc.ch.IsClosed() {
		p.mu.Unlock()
		return pc, nil
	}
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("amqp publisher closed")
	}
	if p.opening == nil {
		p.opening = make(chan struct{})
		go p.openMissing(p.opening)
	}
	done := p.opening
	p.mu.Unlock()
	if err := p.conn.unreachable(); err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqp open channel: %w", ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc := p.chans[i]; pc != nil && !pc.ch.IsClosed() {
		return pc, nil
	}
	if p.openErr != nil {
		return nil, p.openErr
	}
	return nil, nil
}

// openMissing opens every missing or closed shared channel, stopping at
// the first failure, and closes done. It ends when the dial or the channel
// opening it waits on does (bounded by the dial timeouts and heartbeats).
func (p *Publisher) openMissing(done chan struct{}) {
	var err error
	for j := range p.chans {
		p.mu.Lock()
		pc, stop := p.chans[j], p.closed
		p.mu.Unlock()
		if stop {
			break
		}
		if pc != nil && !pc.ch.IsClosed() {
			continue
		}
		if pc, err = p.open(j); err != nil {
			break
		}
		p.mu.Lock()
		if p.closed {
			_ = pc.ch.Close()
		} else {
			p.chans[j] = pc
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.openErr = err
	p.opening = nil
	close(done)
	p.mu.Unlock()
}

// open opens a confirm-mode channel to be the i-th.
func (p *Publisher) open(i int) (*pubChannel, error) {
	ch, err := p.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp confirm mode: %w", err)
	}
	pc := &pubChannel{ch: ch, index: i, slots: make(chan struct{}, p.inFlight),
		returns: make(chan amqp.Return, p.inFlight), pending: make(map[int64]bool)}
	ch.NotifyReturn(pc.returns)
	return pc, nil
}

// begin takes an in-flight slot on a shared channel (waiting while that
// channel is full) and registers publish id on it. The caller must call
// end once the publish is settled.
func (p *Publisher) begin(ctx context.Context, id int64) (*pubChannel, error) {
	for {
		pc, err := p.channel(ctx, int(p.next.Add(1)%uint64(len(p.chans))))
		if err != nil {
			return nil, err
		}
		select {
		case pc.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		pc.mu.Lock()
		if pc.retired {
			pc.mu.Unlock()
			<-pc.slots
			continue
		}
		pc.pending[id] = false
		pc.mu.Unlock()
		return pc, nil
	}
}

// retire takes pc out of use: later publishes go to a new channel, and pc
// is closed once the publishes in flight on it are settled.
func (p *Publisher) retire(pc *pubChannel) {
	p.mu.Lock()
	if p.chans[pc.index] == pc {
		p.chans[pc.index] = nil
	}
	p.mu.Unlock()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.retired = true
	if len(pc.pending) == 0 {
		_ = pc.ch.Close()
	}
}

// end deregisters publish id, frees its slot and reports whether the
// broker returned the message. Called after the publish's confirm (or the
// channel's close) it sees every return the broker sent for it.
func (pc *pubChannel) end(id int64) (returned bool) {
	pc.mu.Lock()
	pc.drainReturns()
	returned = pc.pending[id]
	delete(pc.pending, id)
	if pc.retired && len(pc.pending) == 0 {
		_ = pc.ch.Close()
	}
	pc.mu.Unlock()
	<-pc.slots
	return returned
}

// drainReturns marks the publishes whose returns have arrived; the caller
// holds pc.mu.
func (pc *pubChannel) drainReturns() {
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				return
			}
			id, _ := r.Headers[PublishIDHeader].(int64)
			if _, inFlight := pc.pending[id]; inFlight {
				pc.pending[id] = true
			}
		default:
			return
		}
	}
}

// Publish sends msg with the mandatory flag and waits until the broker has
// confirmed it. It returns nil only when the message was routed to a queue
// and confirmed; otherwise an error wrapping ErrNotConfirmed, which also
// wraps ErrNotQueued when the broker certainly did not queue the message
// (a nack, a return, or no channel to send it on).
//
// The wait does not depend on ctx (only its values are used): a caller
// that goes away must not turn a message the broker took into one the
// publisher reports as lost. The publisher's own timeout bounds the wait.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (err error) {
	ctx, span, msg := startPublish(ctx, exchange, key, msg)
	defer func() { endPublish(span, err) }()
	cost.Add(ctx, cost.AMQPPublishes, 1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	id := int64(p.ids.Add(1))
	msg.Headers[PublishIDHeader] = id
	pc, err := p.begin(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: %w: %w", ErrNotConfirmed, ErrNotQueued, err)
	}
	dc, err := pc.ch.PublishWithDeferredConfirm(exchange, key, true, false, msg)
	if err != nil {
		// Part or all of the message may have reached the broker.
		pc.end(id)
		return fmt.Errorf("%w: publish: %w", ErrNotConfirmed, err)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		// The confirm may still arrive: the slot stays taken until it
		// does (or the channel closes), so the return buffer stays bounded.
		go func() {
			<-dc.Done()
			pc.end(id)
		}()
		return fmt.Errorf("%w: wait for confirm: %w", ErrNotConfirmed, ctx.Err())
	}
	// A channel that closes settles its outstanding confirms as nacks,
	// after it is marked closed, although the broker may have queued the
	// messages before it went: only a nack on an open channel is the
	// broker's.
	acked, closed := dc.Acked(), pc.ch.IsClosed()
	switch returned := pc.end(id); {
	case returned:
		return fmt.Errorf("%w: %w: returned by broker as unroutable", ErrNotConfirmed, ErrNotQueued)
	case acked:
		return nil
	case closed:
		return fmt.Errorf("%w: channel closed before the confirm", ErrNotConfirmed)
	default:
		// A quorum queue nacks while it has no leader; a channel that
		// published then can go on nacking after a new leader is elected,
		// so the channel takes no new publishes and closes once those in
		// flight on it are settled.
		p.retire(pc)
		return fmt.Errorf("%w: %w: nacked by broker", ErrNotConfirmed, ErrNotQueued)
	}
}

// Close closes the shared channels. Publishes still waiting for a confirm
// end with an unknown outcome.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for i, pc := range p.chans {
		if pc != nil {
			_ = pc.ch.Close()
			p.chans[i] = nil
		}
	}
}

// Outcome is what a consumer handler decided about a delivery.
type Outcome int

const (
	// Ack removes the message: it was handled.
	Ack Outcome = iota
	// Requeue returns the message to the queue for another try; quorum
	// queues count the redelivery towards their delivery limit.
	Requeue
	// Reject dead-letters the message: it can never be handled.
	Reject
)

// Handler handles one delivery. ctx ends when the consumer stops.
type Handler func(ctx context.Context, d amqp.Delivery) Outcome

// ConsumeOptions tune Consume.
type ConsumeOptions struct {
	Queue       string
	Prefetch    int
	Concurrency int
	// Retry bounds the pause between resubscription attempts: each is
	// drawn from [Retry/2, Retry], so the consumers of replicas that lost
	// the broker together do not resubscribe in lockstep (1 s when zero).
	Retry time.Duration
}

// Consume delivers messages from a queue to h with manual acknowledgement,
// at most Prefetch unacknowledged and Concurrency in progress at once. It
// resubscribes after a channel or connection failure and returns when ctx
// ends and every handler in progress has finished. Each delivery is handled
// inside a consumer span continuing the trace context of its headers.
// Acks go together where they can (see settler): a delivery whose handler
// has returned Ack may stay unacknowledged at the broker for up to 20 ms.
func (c *Conn) Consume(ctx context.Context, opts ConsumeOptions, h Handler) error {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.Prefetch < opts.Concurrency {
		opts.Prefetch = opts.Concurrency
	}
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	for {
		err := c.consumeOnce(ctx, opts, h)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("amqp consumer interrupted; resubscribing", "queue", opts.Queue, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff.Jitter(opts.Retry)):
		}
	}
}

func (c *Conn) consumeOnce(ctx context.Context, opts ConsumeOptions, h Handler) error {
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(opts.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqp qos: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, opts.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp consume %s: %w", opts.Queue, err)
	}
	s := newSettler(ch, opts.Prefetch, c.ackHold, &c.settleFrames)
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Go(func() {
			for d := range deliveries {
				o := traced(ctx, opts.Queue, d, h)
				cost.Add(ctx, cost.AMQPSettles, 1)
				s.settle(d.DeliveryTag, o)
			}
		})
	}
	wg.Wait()
	s.close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("delivery channel closed")
}
