package delayq

import (
	"bytes"
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestTraceContextTravelsWithThePayload(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	sampled := trace.ContextWithSpanContext(context.Background(), sc)
	unsampled := trace.ContextWithSpanContext(context.Background(), sc.WithTraceFlags(0))
	tests := []struct {
		name    string
		ctx     context.Context
		payload []byte
		wantTP  string
	}{
		{"sampled", sampled, []byte("a:b\nc"), "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"},
		{"sampled, empty payload", sampled, nil, "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"},
		{"unsampled", unsampled, []byte("p"), ""},
		{"no span", context.Background(), []byte("p"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stored := wrapTrace(tc.ctx, tc.payload)
			if tc.wantTP == "" && !bytes.Equal(stored, tc.payload) {
				t.Errorf("wrapTrace = %q, want the payload unchanged", stored)
			}
			payload, tp := unwrapTrace(stored)
			if !bytes.Equal(payload, tc.payload) || tp != tc.wantTP {
				t.Errorf("unwrapTrace(wrapTrace(%q)) = %q, %q; want %q, %q", tc.payload, payload, tp, tc.payload, tc.wantTP)
			}
		})
	}
}
