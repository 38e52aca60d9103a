package amqpbus_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestTLS starts a RabbitMQ node with a TLS listener that requires a
// client certificate (certificates made by the test), publishes and
// consumes over amqps:// with the ORDERFLOW_AMQP_TLS_* files, and checks
// that a client without the CA or without a certificate is refused.
func TestTLS(t *testing.T) {
	certs := testenv.NewCerts(t)
	node, port, err := testenv.StartRabbitTLS(t.TempDir(), certs, 3*time.Minute)
	if err != nil {
		t.Fatalf("start rabbitmq node with TLS: %v", err)
	}
	t.Cleanup(node.Kill)
	url := fmt.Sprintf("amqps://guest:guest@localhost:%d/", port)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	queue := testenv.Prefix(t) + ".q"
	topo := func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(queue, false, true, false, false, nil)
		return err
	}
	cfg := amqpbus.Config{URL: config.Secret(url), DialTimeout: 3 * time.Second, PublishTimeout: 5 * time.Second,
		PublishChannels: 1, PublishInFlight: 4, TLSCAFile: certs.CA, TLSCertFile: certs.ClientCert, TLSKeyFile: certs.ClientKey}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	conn := amqpbus.New(cfg, log, topo)
	defer conn.Close()
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	if err := pub.Publish(context.Background(), "", queue, amqp.Publishing{MessageId: "over-tls", Body: []byte("x")}); err != nil {
		t.Fatalf("Publish over TLS = %v, want confirmed", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan string, 1)
	go func() {
		_ = conn.Consume(ctx, amqpbus.ConsumeOptions{Queue: queue}, func(_ context.Context, d amqp.Delivery) amqpbus.Outcome {
			select {
			case got <- d.MessageId:
			default:
			}
			return amqpbus.Ack
		})
	}()
	select {
	case id := <-got:
		if id != "over-tls" {
			t.Errorf("consumed %q, want over-tls", id)
		}
	case <-ctx.Done():
		t.Fatal("nothing consumed over TLS")
	}

	for name, c := range map[string]amqpbus.Config{
		"no client certificate": {URL: config.Secret(url), DialTimeout: 3 * time.Second, TLSCAFile: certs.CA},
		"node's CA unknown":     {URL: config.Secret(url), DialTimeout: 3 * time.Second, TLSCertFile: certs.ClientCert, TLSKeyFile: certs.ClientKey},
	} {
		bad := amqpbus.New(c, log, nil)
		if err := bad.Check(); err == nil {
			t.Errorf("dial with %s = nil, want refused", name)
		}
		_ = bad.Close()
	}
}
