package jobqueue_test

import (
	"context"
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
