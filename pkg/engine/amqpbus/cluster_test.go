package amqpbus_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestClusterNodeLoss runs a publisher and a consumer over a 3-node
// RabbitMQ cluster given as a URL list, with a quorum queue, and SIGKILLs
// the node the consumer is connected to and later the node the publisher
// is connected to, while messages flow. Each client must move to another
// node by itself; every message the broker confirmed must be consumed;
// a message consumed twice must be one published twice (a publish whose
// outcome was unknown, retried as the outbox does) or a redelivery the
// broker flags as such.
func TestClusterNodeLoss(t *testing.T) {
	cluster := testenv.StartRabbitCluster(t, 3)
	prefix := testenv.Prefix(t)
	exchange, queue := prefix+".ex", prefix+".q"
	topo := func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return err
		}
		return ch.QueueBind(queue, "k", exchange, false, nil)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	newConn := func() *amqpbus.Conn {
		c := amqpbus.New(amqpbus.Config{URL: config.Secret(cluster.URLs()), DialTimeout: 2 * time.Second,
			PublishTimeout: 5 * time.Second, PublishChannels: 4}, log, topo)
		if err := c.Check(); err != nil {
			t.Fatalf("rabbitmq cluster: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range cluster.Nodes {
				t.Logf("node %s:\n%s", n.Name, n.LogTail(40))
			}
		}
	})
	pubConn, subConn := newConn(), newConn()
	// The whole run's deadline covers the killed node's restart (up to 3
	// minutes on a busy machine) and the faults and checks around it.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	members, err := cluster.QuorumMembers(ctx, queue)
	if err != nil || len(members) != 3 {
		t.Fatalf("quorum queue members = %v (%v), want one on each of the 3 nodes", members, err)
	}

	var mu sync.Mutex
	consumed := map[string]int{}
	redelivered := map[string]bool{}
	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		_ = subConn.Consume(consumeCtx, amqpbus.ConsumeOptions{Queue: queue, Prefetch: 16, Concurrency: 4, Retry: 200 * time.Millisecond},
			func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
				mu.Lock()
				consumed[d.MessageId]++
				if d.Redelivered {
					redelivered[d.MessageId] = true
				}
				mu.Unlock()
				return amqpbus.Ack
			})
	}()

	pub := amqpbus.NewPublisher(pubConn)
	defer pub.Close()
	retried := map[string]bool{} // ids published more than once
	next := 0
	// publishFor publishes messages one after the other for d, retrying
	// each until the broker confirms it.
	publishFor := func(d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			id := strconv.Itoa(next)
			next++
			for attempt := 0; ; attempt++ {
				if ctx.Err() != nil {
					t.Fatalf("message %s never confirmed", id)
				}
				if attempt > 0 {
					retried[id] = true
					time.Sleep(100 * time.Millisecond)
				}
				err := pub.Publish(ctx, exchange, "k", amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte(id)})
				if err == nil {
					break
				}
				if attempt%50 == 0 {
					t.Logf("publish %s (attempt %d): %v", id, attempt+1, err)
				}
			}
		}
	}
	nodeOf := func(c *amqpbus.Conn, who string) *testenv.RabbitNode {
		var addr string
		for addr == "" && ctx.Err() == nil {
			if addr = c.RemoteAddr(); addr == "" {
				time.Sleep(50 * time.Millisecond)
			}
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		n := cluster.NodeByPort(p)
		if n == nil {
			t.Fatalf("the %s is connected to %q, no node of the cluster", who, addr)
		}
		return n
	}
	// kill SIGKILLs the node c is connected to, publishes on and checks
	// that c has moved to another node.
	kill := func(c *amqpbus.Conn, who string) *testenv.RabbitNode {
		n := nodeOf(c, who)
		t.Logf("kill -9 %s (the %s's node)", n.Name, who)
		n.Kill()
		publishFor(3 * time.Second)
		if got := nodeOf(c, who); got == n {
			t.Fatalf("the %s is still connected to the killed node", who)
		}
		return n
	}

	publishFor(2 * time.Second)
	// The consumer's node comes back and rejoins before the next fault.
	if err := kill(subConn, "consumer").Start(3 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := cluster.AwaitRunning(ctx, 3); err != nil {
		t.Fatal(err)
	}
	publishFor(2 * time.Second)
	kill(pubConn, "publisher") // two of three nodes still hold the quorum
	publishFor(2 * time.Second)

	// Every confirmed message is consumed.
	for {
		mu.Lock()
		missing := 0
		for i := range next {
			if consumed[strconv.Itoa(i)] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d confirmed messages never consumed", missing, next)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopConsume()
	<-consumerDone
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for id, k := range consumed {
		if k > 1 {
			twice++
			if !retried[id] && !redelivered[id] {
				t.Errorf("message %s consumed %d times, published once and never flagged redelivered", id, k)
			}
		}
	}
	t.Logf("%d messages confirmed, each consumed; %d consumed more than once (retried publishes or flagged redeliveries)", next, twice)
	if next < 20 {
		t.Errorf("only %d messages published over the run; the faults hit no traffic", next)
	}
}
