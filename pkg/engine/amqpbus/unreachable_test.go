package amqpbus_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// blackhole returns the AMQP URL of a netfault.Silent listener: a node
// behind a partition that drops packets, as a client whose handshake has
// started sees it.
func blackhole(t *testing.T) string {
	t.Helper()
	s, err := netfault.NewSilent()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return "amqp://guest:guest@" + s.Addr() + "/"
}

// TestUnreachableNodesFailPublishesWithinThePublishTimeout publishes, many
// at once and then again, to a cluster whose every node accepts
// connections and answers nothing: each publish must end within its own
// timeout (not wait on the dial timeouts of every node, queued behind the
// other publishes' dials) and say the message was not queued; once every
// node failed a dial, publishes fail at once.
func TestUnreachableNodesFailPublishesWithinThePublishTimeout(t *testing.T) {
	const publishTimeout = time.Second
	conn := amqpbus.New(amqpbus.Config{
		URL:         config.Secret(blackhole(t) + "," + blackhole(t)),
		DialTimeout: 2 * time.Second, PublishTimeout: publishTimeout, PublishChannels: 2, PublishInFlight: 16,
	}, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil)
	defer conn.Close()
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()

	// The bound leaves a second for a loaded machine; the dials of both
	// nodes alone take four.
	const bound = publishTimeout + time.Second
	wave := func(name string) {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				err := pub.Publish(context.Background(), "ex", "k", amqp.Publishing{Body: []byte("x")})
				if took := time.Since(start); took > bound {
					t.Errorf("%s publish %d took %v, want an answer within %v", name, i, took.Round(10*time.Millisecond), bound)
				}
				if !errors.Is(err, amqpbus.ErrNotQueued) {
					t.Errorf("%s publish %d = %v, want ErrNotQueued (nothing was sent)", name, i, err)
				}
			}()
		}
		wg.Wait()
	}
	wave("first")
	// Let the background dial of both nodes fail.
	time.Sleep(5 * time.Second)
	wave("second")
	if err := conn.Check(); !errors.Is(err, amqpbus.ErrUnreachable) {
		t.Errorf("Check() = %v, want ErrUnreachable", err)
	}
}

// TestSilentNodeIsLeftForTheNext black-holes the node a publisher is
// connected to (the connection stays open; nothing comes back): publishes
// must go on answering within their timeout, and once the heartbeats are
// missed the connection is dropped and publishes are confirmed through the
// next node.
func TestSilentNodeIsLeftForTheNext(t *testing.T) {
	broker := strings.TrimSuffix(strings.TrimPrefix(testenv.AMQPURL(), "amqp://guest:guest@"), "/")
	var toxics []*netfault.Toxic
	var urls []string
	for range 2 {
		tx, err := netfault.NewToxic(broker)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		toxics = append(toxics, tx)
		urls = append(urls, "amqp://guest:guest@"+tx.Addr()+"/")
	}
	exchange, queue, topo := testTopology(t)
	const publishTimeout = 500 * time.Millisecond
	conn := amqpbus.New(amqpbus.Config{
		URL:         config.Secret(strings.Join(urls, ",")),
		DialTimeout: time.Second, PublishTimeout: publishTimeout, Heartbeat: time.Second,
		PublishChannels: 2, PublishInFlight: 16,
	}, slog.New(slog.NewJSONHandler(io.Discard, nil)), topo)
	defer conn.Close()
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatalf("Publish before the fault = %v", err)
	}
	silent := -1
	for i, tx := range toxics {
		if conn.RemoteAddr() == tx.Addr() {
			silent = i
		}
	}
	if silent < 0 {
		t.Fatalf("connected to %q, none of the proxies %v", conn.RemoteAddr(), urls)
	}
	if err := toxics[silent].Blackhole(); err != nil {
		t.Fatal(err)
	}
	// Three missed heartbeats of a second, a dial, and room for a loaded
	// machine; the old heartbeat of 10 s would take 30.
	deadline := time.Now().Add(15 * time.Second)
	const bound = publishTimeout + time.Second
	for {
		start := time.Now()
		err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{Body: []byte("x")})
		if took := time.Since(start); took > bound {
			t.Errorf("publish during the fault took %v, want an answer within %v", took.Round(10*time.Millisecond), bound)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no publish confirmed within 15 s of node %d going silent; last: %v", silent+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := conn.RemoteAddr(); got == toxics[silent].Addr() {
		t.Errorf("connected to %s, the silent node, after a confirmed publish", got)
	}
	ch, err := conn.Channel()
	if err == nil {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = ch.Close()
	}
}
