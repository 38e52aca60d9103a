package amqpbus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// setup declares a direct exchange and a queue of the test's own and
// returns a Conn whose topology declares them.
func setup(t *testing.T, channels int) (*amqpbus.Conn, string, string) {
	t.Helper()
	return setupVia(t, channels, testenv.AMQPURL(), 5*time.Second)
}

// testTopology names a direct exchange and a queue of the test's own and
// returns a topology that declares them, bound by key "k".
func testTopology(t *testing.T) (exchange, queue string, topo amqpbus.Topology) {
	t.Helper()
	prefix := testenv.Prefix(t)
	exchange, queue = prefix+".ex", prefix+".q"
	return exchange, queue, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(queue, "k", exchange, false, nil)
	}
}

// setupVia is setup with the broker reached at url and a publish timeout.
func setupVia(t *testing.T, channels int, url string, publishTimeout time.Duration) (*amqpbus.Conn, string, string) {
	t.Helper()
	exchange, queue, topo := testTopology(t)
	conn := amqpbus.New(amqpbus.Config{URL: config.Secret(url), DialTimeout: 3 * time.Second,
		PublishTimeout: publishTimeout, PublishChannels: channels, PublishInFlight: 64}, slog.New(slog.NewJSONHandler(io.Discard, nil)), topo)
	if err := conn.Check(); err != nil {
		t.Fatalf("rabbitmq: %v", err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.ExchangeDelete(exchange, false, false)
		}
		_ = conn.Close()
	})
	return conn, exchange, queue
}

func TestPublishConfirmsAndConsumeRoundTrip(t *testing.T) {
	conn, exchange, queue := setup(t, 4)
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")}); err != nil {
				t.Errorf("Publish(%d) = %v, want confirmed", i, err)
			}
		}()
	}
	wg.Wait()
	// An unroutable message is returned by the broker: not confirmed.
	err := pub.Publish(context.Background(), exchange, "nowhere", amqp.Publishing{Body: []byte("x")})
	if !errors.Is(err, amqpbus.ErrNotConfirmed) || !errors.Is(err, amqpbus.ErrNotQueued) {
		t.Errorf("Publish(unroutable) = %v, want ErrNotConfirmed and ErrNotQueued", err)
	}
	// A good publish after the returned one still works (the channel was
	// not poisoned by the return).
	if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{MessageId: "last", Body: []byte("x")}); err != nil {
		t.Errorf("Publish after a return = %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var got sync.Map
	var count atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- conn.Consume(ctx, amqpbus.ConsumeOptions{Queue: queue, Prefetch: 8, Concurrency: 4}, func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
			if _, dup := got.LoadOrStore(d.MessageId, true); !dup {
				count.Add(1)
			}
			return amqpbus.Ack
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for count.Load() < n+1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Consume() = %v, want nil after cancel", err)
	}
	if c := count.Load(); c != n+1 {
		t.Errorf("consumed %d distinct messages, want %d", c, n+1)
	}
}

func TestConsumerResubscribesAfterConnectionLoss(t *testing.T) {
	conn, exchange, queue := setup(t, 2)
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	consumer, _, _ := setup(t, 1) // a second connection, to be cut
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var count atomic.Int64
	go func() {
		_ = consumer.Consume(ctx, amqpbus.ConsumeOptions{Queue: queue, Prefetch: 1, Concurrency: 1, Retry: 100 * time.Millisecond},
			func(context.Context, amqp.Delivery) amqpbus.Outcome { count.Add(1); return amqpbus.Ack })
	}()
	publish := func(id string) {
		if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{MessageId: id, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	waitCount := func(want int64) {
		deadline := time.Now().Add(10 * time.Second)
		for count.Load() < want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if c := count.Load(); c != want {
			t.Fatalf("consumed %d, want %d", c, want)
		}
	}
	publish("before")
	waitCount(1)
	// Cut the consumer's connection as a broker restart would.
	if err := consumer.Close(); err != nil {
		t.Fatal(err)
	}
	publish("after")
	waitCount(2)
}

// TestPublishOutcomeDoesNotDependOnTheCaller publishes for a caller that
// has already gone away (the message must still be published and
// confirmed), and with confirms slower than the publish timeout (the error
// must not claim the message was not queued: it was).
func TestPublishOutcomeDoesNotDependOnTheCaller(t *testing.T) {
	toxic, err := netfault.NewToxic(strings.TrimSuffix(strings.TrimPrefix(testenv.AMQPURL(), "amqp://guest:guest@"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer toxic.Close()
	conn, exchange, queue := setupVia(t, 1, "amqp://guest:guest@"+toxic.Addr()+"/", 300*time.Millisecond)
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pub.Publish(gone, exchange, "k", amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Errorf("Publish(cancelled ctx) = %v, want confirmed (the caller's ctx must not cut the publish short)", err)
	}

	if err := toxic.Latency(time.Second); err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(context.Background(), exchange, "k", amqp.Publishing{Body: []byte("x")})
	if !errors.Is(err, amqpbus.ErrNotConfirmed) || errors.Is(err, amqpbus.ErrNotQueued) {
		t.Errorf("Publish(late confirm) = %v, want ErrNotConfirmed without ErrNotQueued", err)
	}
	toxic.Heal()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued messages = %d, want 2 (both publishes reached the queue)", q.Messages)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// queued waits until queue holds want messages, or fails with how many
// it holds.
func queued(t *testing.T, conn *amqpbus.Conn, queue string, want int) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued messages = %d, want %d", q.Messages, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestManyPublishesInFlightOnOneChannel publishes concurrently over one
// shared channel, a fifth of the messages unroutable: each publish gets
// its own outcome (the returned ones, and only they, are not queued), and
// the publishes wait for their confirms together, not one after another.
func TestManyPublishesInFlightOnOneChannel(t *testing.T) {
	toxic, err := netfault.NewToxic(strings.TrimSuffix(strings.TrimPrefix(testenv.AMQPURL(), "amqp://guest:guest@"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer toxic.Close()
	conn, exchange, queue := setupVia(t, 1, "amqp://guest:guest@"+toxic.Addr()+"/", 30*time.Second)
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	// Every confirm takes at least a second; one publish at a time would
	// need n seconds.
	if err := toxic.Latency(time.Second); err != nil {
		t.Fatal(err)
	}
	const n = 60
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			key := "k"
			if i%5 == 0 {
				key = "nowhere"
			}
			errs[i] = pub.Publish(context.Background(), exchange, key, amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")})
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if i%5 == 0 {
			if !errors.Is(err, amqpbus.ErrNotConfirmed) || !errors.Is(err, amqpbus.ErrNotQueued) {
				t.Errorf("Publish(%d, unroutable) = %v, want ErrNotConfirmed and ErrNotQueued", i, err)
			}
		} else if err != nil {
			t.Errorf("Publish(%d) = %v, want confirmed", i, err)
		}
	}
	if took > n*time.Second/3 {
		t.Errorf("%d publishes on one channel took %v with 1 s per confirm; want them in flight together", n, took)
	}
	toxic.Heal()
	queued(t, conn, queue, n-n/5)
}

// TestChannelLossWithConfirmsOutstanding drops the connection while
// publishes wait for their confirms: every one of them ends unconfirmed
// but not "not queued" (the broker may have taken them), none as
// confirmed.
func TestChannelLossWithConfirmsOutstanding(t *testing.T) {
	toxic, err := netfault.NewToxic(strings.TrimSuffix(strings.TrimPrefix(testenv.AMQPURL(), "amqp://guest:guest@"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer toxic.Close()
	conn, exchange, _ := setupVia(t, 1, "amqp://guest:guest@"+toxic.Addr()+"/", 30*time.Second)
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	// Opens the one shared channel, so the publishes below are sent at once.
	if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{Body: []byte("warm")}); err != nil {
		t.Fatalf("Publish before the fault = %v", err)
	}
	if err := toxic.Latency(4 * time.Second); err != nil {
		t.Fatal(err)
	}
	const n = 40
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs <- pub.Publish(context.Background(), exchange, "k", amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")})
		})
	}
	time.Sleep(500 * time.Millisecond) // sent, confirms 4 s away
	toxic.Cut()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, amqpbus.ErrNotConfirmed) || errors.Is(err, amqpbus.ErrNotQueued) {
			t.Errorf("Publish(connection lost before the confirm) = %v, want ErrNotConfirmed without ErrNotQueued", err)
		}
	}
}

// TestChannelClosedByBrokerNeverFalselyConfirms publishes on one shared
// channel while another publish on it makes the broker close the channel
// (an exchange that does not exist): every publish confirmed before the
// close is in the queue, the others end unconfirmed but not "not queued",
// and later publishes go out on a new channel.
func TestChannelClosedByBrokerNeverFalselyConfirms(t *testing.T) {
	conn, exchange, queue := setup(t, 1)
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ex := exchange
			if i == n/2 {
				ex = exchange + ".missing"
			}
			errs[i] = pub.Publish(context.Background(), ex, "k", amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")})
		})
	}
	wg.Wait()
	confirmed := 0
	for i, err := range errs {
		switch {
		case err == nil:
			confirmed++
		case !errors.Is(err, amqpbus.ErrNotConfirmed) || errors.Is(err, amqpbus.ErrNotQueued):
			t.Errorf("Publish(%d) = %v, want confirmed, or ErrNotConfirmed without ErrNotQueued", i, err)
		}
	}
	if errs[n/2] == nil {
		t.Errorf("Publish(missing exchange) = nil, want an error")
	}
	if q := ready(t, conn, queue); q < confirmed {
		t.Errorf("queued messages = %d, want at least the %d confirmed", q, confirmed)
	}
	if err := pub.Publish(context.Background(), exchange, "k", amqp.Publishing{Body: []byte("after")}); err != nil {
		t.Errorf("Publish after the channel closed = %v, want confirmed on a new channel", err)
	}
}
