// Package amqpbus talks to RabbitMQ: a connection that is redialled after
// it drops, to the next node of a cluster when several are configured
// (with topology declared again on every new connection),
// publishing with publisher confirms and the mandatory flag, and a consumer
// loop with manual acknowledgements and bounded prefetch that resubscribes
// by itself.
package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// Config is the RabbitMQ part of a service's configuration.
type Config struct {
	// URL is one node's AMQP URL, or a comma-separated list of the URLs of
	// a cluster's nodes: a connection goes to one of them and, when it
	// drops or cannot be made, to the next.
	URL             config.Secret `env:"ORDERFLOW_AMQP_URL" envDefault:"amqp://guest:guest@127.0.0.1:5672/"`
	DialTimeout     time.Duration `env:"ORDERFLOW_AMQP_DIAL_TIMEOUT" envDefault:"3s"`
	PublishTimeout  time.Duration `env:"ORDERFLOW_AMQP_PUBLISH_TIMEOUT" envDefault:"5s"`
	PublishChannels int           `env:"ORDERFLOW_AMQP_PUBLISH_CHANNELS" envDefault:"128"`
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
)

// Topology declares exchanges, queues and bindings on a fresh channel. It is
// run on every new connection, so it must be idempotent.
type Topology func(ch *amqp.Channel) error

// Conn is a RabbitMQ connection that is dialled again, on demand, after it
// drops. With several node URLs it starts at a random node (so replicas
// spread over the cluster) and each new dial starts at the node after the
// one last connected to, trying every node once before it gives up.
type Conn struct {
	cfg  Config
	log  *slog.Logger
	topo Topology
	urls []string

	mu   sync.Mutex
	conn *amqp.Connection
	next int // index in urls the next dial starts at
}

// New returns a Conn; it does not dial until first used.
func New(cfg Config, log *slog.Logger, topo Topology) *Conn {
	urls := cfg.urls()
	next := 0
	if len(urls) > 1 {
		next = rand.IntN(len(urls))
	}
	return &Conn{cfg: cfg, log: log, topo: topo, urls: urls, next: next}
}

// connection returns the live connection, dialling a node (and declaring
// the topology there) when there is none.
func (c *Conn) connection() (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	if len(c.urls) == 0 {
		return nil, errors.New("amqp dial: ORDERFLOW_AMQP_URL is empty")
	}
	var errs []error
	for range c.urls {
		i := c.next
		c.next = (c.next + 1) % len(c.urls)
		conn, err := c.dial(c.urls[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d of %d: %w", i+1, len(c.urls), err))
			continue
		}
		c.log.Info("amqp connected", "node", i+1, "addr", conn.RemoteAddr().String())
		c.conn = conn
		return conn, nil
	}
	return nil, errors.Join(errs...)
}

// dial connects to one node and declares the topology on it.
func (c *Conn) dial(url string) (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:  10 * time.Second,
		Dial:       amqp.DefaultDial(c.cfg.DialTimeout),
		Properties: amqp.Table{"connection_name": "orderflow"},
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

// Channel opens a channel on the live connection.
func (c *Conn) Channel() (*amqp.Channel, error) {
	conn, err := c.connection()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp open channel: %w", err)
	}
	return ch, nil
}

// Check reports whether RabbitMQ can be reached (dialling if needed).
func (c *Conn) Check() error {
	_, err := c.connection()
	return err
}

// Close closes the connection.
func (c *Conn) Close() error {
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

// Publisher publishes with confirms over a bounded pool of confirm-mode
// channels, one publish in flight per channel, so a returned (unroutable)
// message is always matched to its own publish. When every channel is busy
// a publish waits for one rather than opening and closing extra channels.
type Publisher struct {
	conn    *Conn
	timeout time.Duration
	slots   chan struct{}    // one token per channel that may exist
	idle    chan *pubChannel // open channels not in use
}

type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// NewPublisher returns a publisher on conn.
func NewPublisher(conn *Conn) *Publisher {
	n := conn.cfg.PublishChannels
	if n <= 0 {
		n = 1
	}
	return &Publisher{conn: conn, timeout: conn.cfg.PublishTimeout,
		slots: make(chan struct{}, n), idle: make(chan *pubChannel, n)}
}

// get takes a channel slot (waiting while all are busy) and returns an open
// channel for it. The caller must hand the slot back with put or drop.
func (p *Publisher) get(ctx context.Context) (*pubChannel, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		select {
		case pc := <-p.idle:
			if pc.ch.IsClosed() {
				continue
			}
			return pc, nil
		default:
		}
		ch, err := p.conn.Channel()
		if err != nil {
			<-p.slots
			return nil, err
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			<-p.slots
			return nil, fmt.Errorf("amqp confirm mode: %w", err)
		}
		// The broker sends basic.return before the basic.ack of the same
		// message, and the client delivers both in order from one reader, so
		// a buffered channel holds the return by the time the confirm is seen.
		returns := ch.NotifyReturn(make(chan amqp.Return, 1))
		return &pubChannel{ch: ch, returns: returns}, nil
	}
}

// put returns a healthy channel to the pool.
func (p *Publisher) put(pc *pubChannel) {
	p.idle <- pc
	<-p.slots
}

// drop closes a channel that cannot be reused and frees its slot.
func (p *Publisher) drop(pc *pubChannel) {
	_ = pc.ch.Close()
	<-p.slots
}

// Publish sends msg with the mandatory flag and waits until the broker has
// confirmed it. It returns nil only when the message was routed to a queue
// and confirmed; otherwise an error wrapping ErrNotConfirmed, which also
// wraps ErrNotQueued when the broker certainly did not queue the message.
//
// The wait does not depend on ctx (only its values are used): a caller
// that goes away must not turn a message the broker took into one the
// publisher reports as lost. The publisher's own timeout bounds the wait.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (err error) {
	ctx, span, msg := startPublish(ctx, exchange, key, msg)
	defer func() { endPublish(span, err) }()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	pc, err := p.get(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w: %w", ErrNotConfirmed, ErrNotQueued, err)
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		// Part or all of the message may have reached the broker.
		p.drop(pc)
		return fmt.Errorf("%w: publish: %w", ErrNotConfirmed, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		// The confirm may still arrive; the channel cannot be reused safely.
		p.drop(pc)
		return fmt.Errorf("%w: wait for confirm: %w", ErrNotConfirmed, err)
	}
	if !acked && pc.ch.IsClosed() {
		// A channel that closes settles its pending confirms as nacks,
		// although the broker may have queued the message before it went.
		p.drop(pc)
		return fmt.Errorf("%w: channel closed before the confirm", ErrNotConfirmed)
	}
	select {
	case r := <-pc.returns:
		p.put(pc)
		return fmt.Errorf("%w: %w: returned by broker: %d %s", ErrNotConfirmed, ErrNotQueued, r.ReplyCode, r.ReplyText)
	default:
	}
	if !acked {
		// A quorum queue nacks while it has no leader; a channel that
		// published then can go on nacking after a new leader is elected,
		// so the next publish gets a fresh channel.
		p.drop(pc)
		return fmt.Errorf("%w: %w: nacked by broker", ErrNotConfirmed, ErrNotQueued)
	}
	p.put(pc)
	return nil
}

// Close closes the idle pooled channels.
func (p *Publisher) Close() {
	for {
		select {
		case pc := <-p.idle:
			_ = pc.ch.Close()
		default:
			return
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
	// Retry is the pause between resubscription attempts.
	Retry time.Duration
}

// Consume delivers messages from a queue to h with manual acknowledgement,
// at most Prefetch unacknowledged and Concurrency in progress at once. It
// resubscribes after a channel or connection failure and returns when ctx
// ends and every handler in progress has finished. Each delivery is handled
// inside a consumer span continuing the trace context of its headers.
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
		case <-time.After(opts.Retry):
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
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				settle(d, traced(ctx, opts.Queue, d, h))
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("delivery channel closed")
}

func settle(d amqp.Delivery, o Outcome) {
	// Settling fails only when the channel is gone; the broker then
	// redelivers the message, which handlers tolerate.
	switch o {
	case Ack:
		_ = d.Ack(false)
	case Requeue:
		_ = d.Nack(false, true)
	case Reject:
		_ = d.Reject(false)
	}
}
