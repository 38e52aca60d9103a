package jobqueue

import (
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ChannelOpener opens a channel on the broker (amqpbus.Conn does).
type ChannelOpener interface {
	Channel() (*amqp.Channel, error)
}

// DepthCollector exports the depth and consumer count of the split queue,
// the overflow queue and the dead-letter queue, read from the broker at
// every scrape. The
// values are the cluster's (every replica that exports them reports the
// same numbers): aggregate them with max(), not sum().
type DepthCollector struct {
	conn     ChannelOpener
	names    Names
	messages *prometheus.Desc
	consumer *prometheus.Desc
	up       *prometheus.Desc
}

// NewDepthCollector returns a collector for the queues of names.
func NewDepthCollector(conn ChannelOpener, names Names) *DepthCollector {
	return &DepthCollector{
		conn:  conn,
		names: names,
		messages: prometheus.NewDesc("orderflow_jobqueue_messages",
			"Messages ready for delivery in a job queue (split: waiting to be split; overflow: jobs of a member beyond what a worker holds of one member; dead: dead-lettered), cluster-wide: aggregate with max().",
			[]string{"queue"}, nil),
		consumer: prometheus.NewDesc("orderflow_jobqueue_consumers",
			"Consumers subscribed to a job queue, cluster-wide: aggregate with max().",
			[]string{"queue"}, nil),
		up: prometheus.NewDesc("orderflow_jobqueue_scrape_ok",
			"1 when the broker answered the depth query of this scrape, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *DepthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.consumer
	ch <- c.up
}

// Collect implements prometheus.Collector: one passive declare per queue.
func (c *DepthCollector) Collect(ch chan<- prometheus.Metric) {
	amqpCh, err := c.conn.Channel()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	defer amqpCh.Close()
	ok := 1.0
	for label, name := range map[string]string{"split": c.names.Queue, "overflow": c.names.Overflow, "dead": c.names.DLQ} {
		q, err := amqpCh.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			// A failed passive declare closes the channel: stop here.
			ok = 0
			break
		}
		ch <- prometheus.MustNewConstMetric(c.messages, prometheus.GaugeValue, float64(q.Messages), label)
		ch <- prometheus.MustNewConstMetric(c.consumer, prometheus.GaugeValue, float64(q.Consumers), label)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok)
}
