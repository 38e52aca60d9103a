package redisconn_test

import (
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/otlptest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestCommandsAreTraced: under a sampled span every command and pipeline
// gets a client span, a child of the caller's, named after the command
// (a pipeline after its distinct commands) with the server's address; a
// failed command's span is failed, a missing key's is not; under an
// unsampled span nothing is recorded.
func TestCommandsAreTraced(t *testing.T) {
	rec := otlptest.Record(t)
	// One connection for commands and one for pipelines, dialled by the
	// Ping and the pipeline below outside any trace: only the calls under
	// test are recorded.
	c := redisconn.New(redisconn.Config{Addr: testenv.RedisAddr(), PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	key := testenv.Prefix(t) + ":traced"
	t.Cleanup(func() { c.Del(context.Background(), key) })

	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	parentID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	under := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(context.Background(),
			trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: parentID, TraceFlags: flags, Remote: true}))
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pipelined(context.Background(), func(p redis.Pipeliner) error { return p.Ping(context.Background()).Err() }); err != nil {
		t.Fatal(err)
	}

	ctx := under(trace.FlagsSampled)
	rec.Reset()
	if err := c.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key+":missing").Err(); err != redis.Nil {
		t.Fatalf("GET of a missing key = %v, want redis.Nil", err)
	}
	pipe := c.Pipeline()
	pipe.Get(ctx, key)
	pipe.Set(ctx, key, "w", 0)
	pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.LPush(ctx, key, "x").Err(); err == nil {
		t.Fatal("LPUSH on a string succeeded")
	}
	host, port, _ := net.SplitHostPort(testenv.RedisAddr())
	want := []struct {
		name   string
		failed bool
	}{{"set", false}, {"get", false}, {"redis.pipeline get set", false}, {"lpush", true}}
	ended := rec.Ended()
	if len(ended) != len(want) {
		for _, s := range ended {
			t.Logf("recorded: %s %v", s.Name(), s.Status())
		}
		t.Fatalf("%d spans recorded, want %d", len(ended), len(want))
	}
	for i, s := range ended {
		attrs := otlptest.SpanAttrs(s)
		if s.Name() != want[i].name || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parentID {
			t.Errorf("span %d: %q kind %v parent %s; want %q, client, %s", i, s.Name(), s.SpanKind(), s.Parent().SpanID(), want[i].name, parentID)
		}
		if (s.Status().Code == otelcodes.Error) != want[i].failed {
			t.Errorf("span %q: status %v, want failed: %v", s.Name(), s.Status(), want[i].failed)
		}
		if attrs["db.system.name"] != "redis" || attrs["server.address"] != host || attrs["server.port"] != port {
			t.Errorf("span %q: attributes %v, want db.system.name redis, server %s:%s", s.Name(), attrs, host, port)
		}
	}
	if got := otlptest.SpanAttrs(ended[2])["db.operation.batch.size"]; got != "3" {
		t.Errorf("pipeline span: db.operation.batch.size %q, want 3", got)
	}

	rec.Reset()
	ctx = under(0)
	if err := c.Get(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	pipe = c.Pipeline()
	pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("unsampled: %d spans recorded, want none", n)
	}
}
