package smoke

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// Cleanup deletes what a release with key and queue prefix left in Redis
// and RabbitMQ: every key starting with prefix (or "{"+prefix, hash-tagged),
// and the split-job queues
// and exchanges.
func Cleanup(ctx context.Context, redisAddr, amqpURL, prefix string) error {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("clean up Redis keys %s*: %w", prefix, err)
	}
	testenv.DeletePrefix(ctx, rdb, prefix)
	testenv.DeletePrefix(ctx, rdb, "{"+prefix) // hash-tagged keys

	conn, err := amqp.DialConfig(amqpURL, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		return fmt.Errorf("clean up queues of %s: %w", prefix, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("clean up queues of %s: %w", prefix, err)
	}
	defer ch.Close()
	names := jobqueue.NewNames(prefix)
	var errs []error
	for _, q := range names.Queues() {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
		}
	}
	for _, x := range []string{names.Exchange, names.DLX} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", x, err))
		}
	}
	return errors.Join(errs...)
}
