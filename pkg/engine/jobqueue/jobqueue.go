// Package jobqueue is the RabbitMQ contract between the gateway and the
// split-worker: the topology (a direct exchange, a durable quorum queue with
// a delivery limit and a dead-letter queue) and the encoding of SplitJob
// messages. The publisher (Encode, Message) sets everything a consumer
// needs, including the dead-letter consumer faced with a body it cannot
// decode: the schema version (in the body and a header), the task id (the
// message id and the body), the member (a header and the body) and the
// trace context (headers).
package jobqueue

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
)

// SchemaVersion is the SplitJob schema this code writes and reads.
const SchemaVersion = 1

// ContentType marks a protobuf body.
const ContentType = "application/x-protobuf"

// MessageType names the body's protobuf message.
const MessageType = "orderflow.job.v1.SplitJob"

// Header names of a split-job message.
const (
	// SchemaHeader carries SchemaVersion.
	SchemaHeader = "schema_version"
	// MemberHeader names the task's member, so that a job whose body
	// cannot be decoded can still fail its task.
	MemberHeader = "member_id"
)

// ErrMalformed means a message can never be handled: wrong type, bad body
// or an unknown schema version. Such messages are dead-lettered at once.
var ErrMalformed = errors.New("malformed job message")

// Names are the RabbitMQ objects of the split-job queue.
type Names struct {
	Exchange string
	Queue    string
	// Overflow holds the jobs of members who sent more than a worker
	// holds of one member at once, so that they do not stand in front of
	// other members' jobs in Queue (see OverflowRoutingKey).
	Overflow string
	DLX      string
	DLQ      string
	// DeadLetterMax bounds the dead-letter queue (0: DeadLetterLimit).
	DeadLetterMax int
}

// Queues lists the queues, for declaring, measuring and deleting them.
func (n Names) Queues() []string { return []string{n.Queue, n.Overflow, n.DLQ} }

// DeadLetterLimit is the default bound of the dead-letter queue. Every dead
// letter fails its task as soon as Redis answers, so the queue only fills
// while the split-workers cannot reach Redis; past the bound RabbitMQ keeps
// further dead letters in the split queue (see Topology) instead of
// dropping them.
const DeadLetterLimit = 100_000

// NewNames derives the object names from a prefix ("orderflow" in
// production, a unique prefix per test).
func NewNames(prefix string) Names {
	return Names{
		Exchange: prefix + ".jobs",
		Queue:    prefix + ".split",
		Overflow: prefix + ".split.overflow",
		DLX:      prefix + ".jobs.dlx",
		DLQ:      prefix + ".split.dlq",
	}
}

// RoutingKey routes split jobs from Exchange to Queue.
const RoutingKey = "split"

// OverflowRoutingKey routes split jobs from Exchange to Overflow.
const OverflowRoutingKey = "split.overflow"

// Topology declares the objects: jobs published to Exchange reach the quorum
// queue Queue (or, with OverflowRoutingKey, Overflow); a message of either
// redelivered more than deliveryLimit times, or rejected, is dead-lettered
// through DLX to DLQ.
//
// The dead-letter queue is bounded (DeadLetterMax, reject-publish) and the
// split and overflow queues dead-letter at least once (RabbitMQ's
// at-least-once strategy, which needs reject-publish on the source queue;
// they have no length limit, so they refuse no publish): a dead letter the
// full dead-letter queue refuses stays in its source queue, not delivered,
// and RabbitMQ retries it until the dead-letter queue has room. Nothing is
// dropped. (With the default at-most-once strategy RabbitMQ does not apply
// the bound to dead letters at all.) Queues declared by an earlier version
// without these arguments make the declaration fail with
// PRECONDITION_FAILED naming the argument; see docs/deploying.md, "Upgrade
// and rollback".
func (n Names) Topology(deliveryLimit int) func(ch *amqp.Channel) error {
	dlqMax := n.DeadLetterMax
	if dlqMax <= 0 {
		dlqMax = DeadLetterLimit
	}
	return func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(n.Exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", n.Exchange, err)
		}
		if err := ch.ExchangeDeclare(n.DLX, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", n.DLX, err)
		}
		if _, err := ch.QueueDeclare(n.DLQ, true, false, false, false, amqp.Table{
			amqp.QueueTypeArg:     amqp.QueueTypeQuorum,
			amqp.QueueMaxLenArg:   int64(dlqMax),
			amqp.QueueOverflowArg: amqp.QueueOverflowRejectPublish,
		}); err != nil {
			return fmt.Errorf("declare queue %s: %w", n.DLQ, err)
		}
		if err := ch.QueueBind(n.DLQ, RoutingKey, n.DLX, false, nil); err != nil {
			return fmt.Errorf("bind %s: %w", n.DLQ, err)
		}
		for _, q := range []struct{ name, key string }{{n.Queue, RoutingKey}, {n.Overflow, OverflowRoutingKey}} {
			if _, err := ch.QueueDeclare(q.name, true, false, false, false, amqp.Table{
				amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
				"x-delivery-limit":          int32(deliveryLimit),
				"x-dead-letter-exchange":    n.DLX,
				"x-dead-letter-routing-key": RoutingKey,
				"x-dead-letter-strategy":    "at-least-once",
				amqp.QueueOverflowArg:       amqp.QueueOverflowRejectPublish,
			}); err != nil {
				return fmt.Errorf("declare queue %s: %w", q.name, err)
			}
			if err := ch.QueueBind(q.name, q.key, n.Exchange, false, nil); err != nil {
				return fmt.Errorf("bind %s: %w", q.name, err)
			}
		}
		return nil
	}
}

var propagator = propagation.TraceContext{}

// Encode builds the persistent message for job: it stamps the job with
// SchemaVersion and sets the headers of Message.
func Encode(ctx context.Context, job *jobv1.SplitJob) (amqp.Publishing, error) {
	job.SchemaVersion = SchemaVersion
	body, err := proto.Marshal(job)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("marshal split job %s: %w", job.GetTaskId(), err)
	}
	return Message(ctx, job.GetMemberId(), job.GetTaskId(), body), nil
}

// Message wraps an already encoded SplitJob body (of the current schema
// version, as Encode makes it) of member's task taskID for publishing: the
// task id is the message id; the schema version, the member and ctx's
// trace context are headers.
func Message(ctx context.Context, member, taskID string, body []byte) amqp.Publishing {
	headers := amqp.Table{SchemaHeader: int32(SchemaVersion), MemberHeader: member}
	propagator.Inject(ctx, amqpbus.HeaderCarrier(headers))
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  ContentType,
		Type:         MessageType,
		DeliveryMode: amqp.Persistent,
		MessageId:    taskID,
		Body:         body,
	}
}

// Identify returns the member and task id of a delivery: from job when
// Decode got that far, else from the message id and MemberHeader. Either
// is empty when the message does not say.
func Identify(d amqp.Delivery, job *jobv1.SplitJob) (member, taskID string) {
	member, taskID = job.GetMemberId(), job.GetTaskId()
	if taskID == "" {
		taskID = d.MessageId
	}
	if member == "" {
		member, _ = d.Headers[MemberHeader].(string)
	}
	return member, taskID
}

// Decode parses a delivery into its job and returns ctx extended with the
// trace context from the headers, unless ctx already carries a span (the
// consumer's, which continues that context). Errors wrap ErrMalformed.
func Decode(ctx context.Context, d amqp.Delivery) (context.Context, *jobv1.SplitJob, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = propagator.Extract(ctx, amqpbus.HeaderCarrier(d.Headers))
	}
	if d.Type != "" && d.Type != MessageType {
		return ctx, nil, fmt.Errorf("%w: type %q", ErrMalformed, d.Type)
	}
	var job jobv1.SplitJob
	if err := proto.Unmarshal(d.Body, &job); err != nil {
		return ctx, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if job.GetSchemaVersion() != SchemaVersion {
		return ctx, &job, fmt.Errorf("%w: schema version %d", ErrMalformed, job.GetSchemaVersion())
	}
	if job.GetTaskId() == "" || job.GetMemberId() == "" {
		return ctx, &job, fmt.Errorf("%w: missing task or member id", ErrMalformed)
	}
	return ctx, &job, nil
}
