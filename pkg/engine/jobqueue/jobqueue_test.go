package jobqueue_test

import (
	"context"
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
)

func sampleJob() *jobv1.SplitJob {
	return &jobv1.SplitJob{
		SchemaVersion: jobqueue.SchemaVersion, TaskId: "t1", MemberId: "alice", OrderCode: "O-1",
		Items:      []*taskv1.OrderItem{{ItemCode: "a", Sku: "S", Quantity: 2}},
		SubmitTime: timestamppb.Now(),
	}
}

func TestEncodeDecodeRoundTripCarriesTraceContext(t *testing.T) {
	traceID, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	spanID, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	job := sampleJob()
	msg, err := jobqueue.Encode(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if msg.MessageId != "t1" || msg.DeliveryMode != amqp.Persistent || msg.Type != jobqueue.MessageType {
		t.Errorf("message = id %q mode %d type %q, want task id, persistent, %s", msg.MessageId, msg.DeliveryMode, msg.Type, jobqueue.MessageType)
	}
	gotCtx, got, err := jobqueue.Decode(context.Background(), amqp.Delivery{Headers: msg.Headers, Type: msg.Type, Body: msg.Body})
	if err != nil {
		t.Fatalf("Decode() = %v", err)
	}
	if !proto.Equal(got, job) {
		t.Errorf("Decode() = %v, want %v", got, job)
	}
	if sc := trace.SpanContextFromContext(gotCtx); sc.TraceID() != traceID {
		t.Errorf("trace id after Decode = %v, want %v", sc.TraceID(), traceID)
	}
}

func TestDecodeRejectsMalformedMessages(t *testing.T) {
	good, _ := proto.Marshal(sampleJob())
	v2 := sampleJob()
	v2.SchemaVersion = 2
	future, _ := proto.Marshal(v2)
	noTask := sampleJob()
	noTask.TaskId = ""
	missing, _ := proto.Marshal(noTask)
	tests := []struct {
		name string
		d    amqp.Delivery
	}{
		{"garbage body", amqp.Delivery{Body: []byte{0xff, 0xff, 0xff}}},
		{"wrong type", amqp.Delivery{Type: "something.Else", Body: good}},
		{"unknown schema version", amqp.Delivery{Body: future}},
		{"no task id", amqp.Delivery{Body: missing}},
		{"empty body", amqp.Delivery{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := jobqueue.Decode(context.Background(), tt.d); !errors.Is(err, jobqueue.ErrMalformed) {
				t.Errorf("Decode() = %v, want ErrMalformed", err)
			}
		})
	}
}

// TestPublisherSetsWhatTheDeadLetterConsumerNeeds: a job encoded by the
// publisher names its member, task and schema version both in its body and
// outside it, so a consumer that cannot decode the body still knows the
// task.
func TestPublisherSetsWhatTheDeadLetterConsumerNeeds(t *testing.T) {
	job := sampleJob()
	job.SchemaVersion = 0 // the publisher stamps it
	msg, err := jobqueue.Encode(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Headers[jobqueue.SchemaHeader]; got != int32(jobqueue.SchemaVersion) {
		t.Errorf("header %s = %v, want %d", jobqueue.SchemaHeader, got, jobqueue.SchemaVersion)
	}
	if got := msg.Headers[jobqueue.MemberHeader]; got != "alice" {
		t.Errorf("header %s = %v, want %q", jobqueue.MemberHeader, got, "alice")
	}
	tests := []struct {
		name string
		d    amqp.Delivery
	}{
		{"as published", amqp.Delivery{MessageId: msg.MessageId, Headers: msg.Headers, Type: msg.Type, Body: msg.Body}},
		{"body lost", amqp.Delivery{MessageId: msg.MessageId, Headers: msg.Headers, Type: msg.Type, Body: []byte{0xff}}},
		{"republished from the outbox", func() amqp.Delivery {
			m := jobqueue.Message(context.Background(), "alice", "t1", msg.Body)
			return amqp.Delivery{MessageId: m.MessageId, Headers: m.Headers, Type: m.Type, Body: m.Body}
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, decoded, err := jobqueue.Decode(context.Background(), tt.d)
			if err == nil && decoded.GetSchemaVersion() != jobqueue.SchemaVersion {
				t.Errorf("Decode() schema version = %d, want %d", decoded.GetSchemaVersion(), jobqueue.SchemaVersion)
			}
			member, id := jobqueue.Identify(tt.d, decoded)
			if member != "alice" || id != "t1" {
				t.Errorf("Identify() = %q, %q; want alice, t1", member, id)
			}
		})
	}
}

func TestIdentifyWithoutHeaders(t *testing.T) {
	member, id := jobqueue.Identify(amqp.Delivery{Body: []byte{0xff}}, nil)
	if member != "" || id != "" {
		t.Errorf("Identify(bare garbage) = %q, %q; want both empty", member, id)
	}
}

// FuzzDecode feeds arbitrary bodies and headers to Decode: it must never
// panic, and whatever it accepts is a complete job of the current schema.
func FuzzDecode(f *testing.F) {
	good, _ := proto.Marshal(sampleJob())
	f.Add(good, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add([]byte{}, "")
	f.Add([]byte{0x08, 0x02, 0x12, 0x01, 'x'}, "garbage")
	f.Fuzz(func(t *testing.T, body []byte, traceparent string) {
		d := amqp.Delivery{Body: body, Headers: amqp.Table{"traceparent": traceparent}}
		_, job, err := jobqueue.Decode(context.Background(), d)
		if err != nil {
			if !errors.Is(err, jobqueue.ErrMalformed) {
				t.Fatalf("Decode() error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if job.GetSchemaVersion() != jobqueue.SchemaVersion || job.GetTaskId() == "" || job.GetMemberId() == "" {
			t.Fatalf("Decode() accepted an incomplete job %v", job)
		}
	})
}
