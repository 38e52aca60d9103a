package jobqueue_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestDepthCollectorReportsReadyOverflowAndDeadLetteredMessages(t *testing.T) {
	names := testenv.SplitJobQueues(t, testenv.Prefix(t))
	conn := amqpbus.New(amqpbus.Config{URL: config.Secret(testenv.AMQPURL()), DialTimeout: 2 * time.Second, PublishTimeout: 2 * time.Second}, slog.New(slog.DiscardHandler), names.Topology(3))
	defer conn.Close()
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	for _, id := range []string{"t1", "t2"} {
		if err := pub.Publish(context.Background(), names.Exchange, jobqueue.RoutingKey, jobqueue.Message(context.Background(), "alice", id, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Publish(context.Background(), names.Exchange, jobqueue.OverflowRoutingKey, jobqueue.Message(context.Background(), "alice", "t4", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), names.DLX, jobqueue.RoutingKey, jobqueue.Message(context.Background(), "alice", "t3", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP orderflow_jobqueue_messages Messages ready for delivery in a job queue (split: waiting to be split; overflow: jobs of a member beyond what a worker holds of one member; dead: dead-lettered), cluster-wide: aggregate with max().
# TYPE orderflow_jobqueue_messages gauge
orderflow_jobqueue_messages{queue="dead"} 1
orderflow_jobqueue_messages{queue="overflow"} 1
orderflow_jobqueue_messages{queue="split"} 2
# HELP orderflow_jobqueue_consumers Consumers subscribed to a job queue, cluster-wide: aggregate with max().
# TYPE orderflow_jobqueue_consumers gauge
orderflow_jobqueue_consumers{queue="dead"} 0
orderflow_jobqueue_consumers{queue="overflow"} 0
orderflow_jobqueue_consumers{queue="split"} 0
# HELP orderflow_jobqueue_scrape_ok 1 when the broker answered the depth query of this scrape, else 0.
# TYPE orderflow_jobqueue_scrape_ok gauge
orderflow_jobqueue_scrape_ok 1
`
	c := jobqueue.NewDepthCollector(conn, names)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint = %v, %v; want no problems", problems, err)
	}
}

// TestDeadLetterQueueIsBounded: dead letters beyond the dead-letter queue's
// bound are not let in (RabbitMQ keeps them in the split queue and retries
// them once there is room; with the default at-most-once dead-lettering it
// would let every one in, whatever the bound).
func TestDeadLetterQueueIsBounded(t *testing.T) {
	names := testenv.SplitJobQueues(t, testenv.Prefix(t))
	names.DeadLetterMax = 5
	conn := amqpbus.New(amqpbus.Config{URL: config.Secret(testenv.AMQPURL()), DialTimeout: 2 * time.Second, PublishTimeout: 2 * time.Second}, slog.New(slog.DiscardHandler), names.Topology(3))
	defer conn.Close()
	pub := amqpbus.NewPublisher(conn)
	defer pub.Close()
	const jobs = 60
	for i := range jobs {
		if err := pub.Publish(context.Background(), names.Exchange, jobqueue.RoutingKey, jobqueue.Message(context.Background(), "alice", fmt.Sprint("t", i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for rejected := 0; rejected < jobs; {
		d, ok, err := ch.Get(names.Queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("split queue empty after %d of %d rejected", rejected, jobs)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
		rejected++
	}
	time.Sleep(time.Second)
	q, err := ch.QueueDeclarePassive(names.DLQ, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A quorum queue applies its bound approximately: the dead letters
	// already on their way when it fills still get in (1 to 3 past the
	// bound in the runs seen, depending on timing). Unbounded, all 60
	// would.
	if q.Messages < names.DeadLetterMax || q.Messages > jobs/2 {
		t.Errorf("dead-letter queue holds %d of %d rejected jobs, want its bound %d and at most a few dead letters in flight past it", q.Messages, jobs, names.DeadLetterMax)
	}
}
