package amqpbus_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// publishInOrder publishes n messages with ids "0" to n-1, one after the
// other, so that they are delivered in that order.
func publishInOrder(t *testing.T, conn *amqpbus.Conn, exchange string, n int) {
	t.Helper()
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	for i := range n {
		if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{MessageId: strconv.Itoa(i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
}

// ready returns the messages ready in queue (unacknowledged ones count
// once their consumer's channel is closed).
func ready(t *testing.T, conn *amqpbus.Conn, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, what, cond)
}

// consume runs conn.Consume with h until the returned stop is called.
func consume(t *testing.T, conn *amqpbus.Conn, opts amqpbus.ConsumeOptions, h amqpbus.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- conn.Consume(ctx, opts, h) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume() = %v", err)
		}
	}
}

// Deliveries handled out of order are acked together once the lowest of
// them ends: one frame for ten acks, and the broker has none of them
// left.
func TestAcksGoTogetherOnceTheLowestEnds(t *testing.T) {
	conn, exchange, queue := setup(t, 1)
	conn.SetAckHold(time.Minute) // only the lowest delivery's end sends them
	const n = 10
	publishInOrder(t, conn, exchange, n)
	var others atomic.Int64
	stop := consume(t, conn, amqpbus.ConsumeOptions{Queue: queue, Prefetch: 4 * n, Concurrency: n},
		func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
			if d.MessageId == "0" {
				for others.Load() < n-1 {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(200 * time.Millisecond) // the others' acks are held by now
				return amqpbus.Ack
			}
			others.Add(1)
			return amqpbus.Ack
		})
	waitFor(t, "the acks", func() bool { return conn.SettleFrames() > 0 })
	time.Sleep(50 * time.Millisecond)
	if f := conn.SettleFrames(); f != 1 {
		t.Errorf("ack frames = %d, want 1 for %d deliveries", f, n)
	}
	stop()
	if r := ready(t, conn, queue); r != 0 {
		t.Errorf("%d messages back in the queue, want 0: every one was acked", r)
	}
}

// While a lower delivery is still being handled, the acks above it are
// not held longer than the hold time: they go on their own, and the
// broker settles them although the lower one never is.
func TestHeldAcksGoAloneAfterTheHoldTime(t *testing.T) {
	conn, exchange, queue := setup(t, 1)
	conn.SetAckHold(20 * time.Millisecond)
	const n = 10
	publishInOrder(t, conn, exchange, n)
	release := make(chan struct{})
	stop := consume(t, conn, amqpbus.ConsumeOptions{Queue: queue, Prefetch: 4 * n, Concurrency: n},
		func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
			if d.MessageId == "0" && !d.Redelivered {
				<-release
				return amqpbus.Requeue
			}
			return amqpbus.Ack
		})
	waitFor(t, "the held acks to go", func() bool { return conn.SettleFrames() == n-1 })
	close(release)
	// The requeued message comes back to the same consumer, which now
	// acks it.
	waitFor(t, "the requeue and the redelivery's ack", func() bool { return conn.SettleFrames() == n+1 })
	stop()
	if r := ready(t, conn, queue); r != 0 {
		t.Errorf("%d messages back in the queue, want 0", r)
	}
}

// No more than a quarter of the prefetch is held: past that, held acks
// go on their own at once, so the broker keeps the handlers fed.
func TestHeldAcksAreBoundedByThePrefetch(t *testing.T) {
	conn, exchange, queue := setup(t, 1)
	conn.SetAckHold(time.Minute)
	const n = 8 // prefetch 8: at most 2 held
	publishInOrder(t, conn, exchange, n)
	release := make(chan struct{})
	var handled atomic.Int64
	stop := consume(t, conn, amqpbus.ConsumeOptions{Queue: queue, Prefetch: n, Concurrency: n},
		func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
			if d.MessageId == "0" {
				<-release
				return amqpbus.Reject
			}
			handled.Add(1)
			return amqpbus.Ack
		})
	waitFor(t, "the other deliveries", func() bool { return handled.Load() == n-1 })
	// Seven acks held behind delivery 1: sent three at a time when a third
	// would be held, the last one stays held.
	waitFor(t, "the acks beyond the bound", func() bool { return conn.SettleFrames() == 6 })
	time.Sleep(50 * time.Millisecond)
	if f := conn.SettleFrames(); f != 6 {
		t.Fatalf("settle frames = %d while delivery 1 runs, want 6 (one ack held)", f)
	}
	close(release)
	// The reject, then the held ack as one frame with everything below.
	waitFor(t, "the reject and the last ack", func() bool { return conn.SettleFrames() == 8 })
	stop()
	if r := ready(t, conn, queue); r != 0 {
		t.Errorf("%d messages back in the queue, want 0 (one rejected, the rest acked)", r)
	}
}

// Acks held back are lost with their channel: a consumer whose connection
// drops while it holds them gets those deliveries again, as it would for
// acks lost on their way (handlers tolerate a second delivery).
func TestHeldAcksAreLostWithTheChannel(t *testing.T) {
	conn, exchange, queue := setup(t, 1)
	consumer, _, _ := setup(t, 1) // a second connection, to be cut
	consumer.SetAckHold(time.Minute)
	const n = 5
	publishInOrder(t, conn, exchange, n)
	release := make(chan struct{})
	var first, again atomic.Int64
	stop := consume(t, consumer, amqpbus.ConsumeOptions{Queue: queue, Prefetch: 4 * n, Concurrency: n, Retry: 50 * time.Millisecond},
		func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
			switch {
			case d.Redelivered:
				again.Add(1)
			case d.MessageId == "0":
				<-release
			default:
				first.Add(1)
			}
			return amqpbus.Ack
		})
	waitFor(t, "the first deliveries", func() bool { return first.Load() == n-1 })
	if f := consumer.SettleFrames(); f != 0 {
		t.Fatalf("settle frames = %d, want 0: every ack is held behind delivery 1", f)
	}
	if err := consumer.Close(); err != nil { // as a broker restart would
		t.Fatal(err)
	}
	close(release)
	waitFor(t, "every message delivered again", func() bool { return again.Load() == n })
	stop()
	if r := ready(t, conn, queue); r != 0 {
		t.Errorf("%d messages back in the queue, want 0", r)
	}
}
