package app

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestUnknownCreateOutcomeIsRecoverableByRequestID cuts the gateway off
// Redis right after its create reached Redis (as a failover that kills
// the master after the write reached the promoted replica does): the
// create's answer is lost and the rollback fails, so the task exists
// while the caller gets 503. The answer must say that the task may have
// been created and how to learn its id — submit again with the same
// requestId, which then returns that task, whose job the outbox
// publishes — or, with no requestId, that a retry may start a second
// task.
func TestUnknownCreateOutcomeIsRecoverableByRequestID(t *testing.T) {
	proxy, err := netfault.NewProxy(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	s := startGateway(t, func(c *Config) {
		c.Redis.Addr = proxy.Addr()
		c.OutboxGrace = time.Second
	})
	alice := s.token(t, "alice")
	// The scripts are loaded and the topology declared before the cut.
	if code, body := s.do(t, "POST", "/v1/order-splits", alice, goodOrder); code != http.StatusOK {
		t.Fatalf("POST before the fault = %d %v", code, body)
	}
	s.queuedTaskIDs(t, 1, 5*time.Second)

	tests := []struct {
		name, requestID, wantAdvice string
	}{
		{name: "with a request id", requestID: "req-unknown-1", wantAdvice: "submit again with the same request_id"},
		{name: "without a request id", wantAdvice: "a retry may start a second task"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order := fmt.Sprintf("ORD-UNKNOWN-%d", i)
			req := fmt.Sprintf(`{"orderCode":%q,"requestId":%q,"items":[{"itemCode":"i1","sku":"SKU-1","quantity":1}]}`, order, tt.requestID)
			proxy.CutAfter([]byte(order))
			code, body := s.do(t, "POST", "/v1/order-splits", alice, req)
			proxy.Restore()
			if code != http.StatusServiceUnavailable || reason(body) != apierr.ReasonStoreUnavailable {
				t.Fatalf("POST cut after the create was sent = %d %v, want 503 STORE_UNAVAILABLE", code, body)
			}
			msg, _ := body["message"].(string)
			if !strings.Contains(msg, "may have been created") || !strings.Contains(msg, tt.wantAdvice) {
				t.Errorf("message = %q, want it to say the task may have been created and %q", msg, tt.wantAdvice)
			}
			if got := errorMetadata(body, "outcome"); got != "UNKNOWN" {
				t.Errorf("ErrorInfo metadata outcome = %q, want UNKNOWN", got)
			}
			tasks, _, err := s.store.List(context.Background(), "alice", 100, "")
			if err != nil {
				t.Fatal(err)
			}
			var id string
			for _, tk := range tasks {
				if tk.GetOrderCode() == order {
					id = tk.GetTaskId()
				}
			}
			if id == "" {
				t.Fatalf("no task of order %s in Redis: the cut came before the create ran", order)
			}
			if tt.requestID == "" {
				return
			}
			code, again := s.do(t, "POST", "/v1/order-splits", alice, req)
			if code != http.StatusOK || again["taskId"] != id {
				t.Fatalf("POST again with request id %q = %d %v, want 200 with task %s", tt.requestID, code, again, id)
			}
			var queued []string
			for deadline := time.Now().Add(10 * time.Second); !slices.Contains(queued, id) && time.Now().Before(deadline); {
				queued = append(queued, s.queuedTaskIDs(t, 0, 500*time.Millisecond)...)
			}
			if !slices.Contains(queued, id) {
				t.Errorf("queued jobs = %v, want the outbox to publish task %s", queued, id)
			}
		})
	}
}

// errorMetadata returns the ErrorInfo metadata value of key in an error
// body.
func errorMetadata(body map[string]any, key string) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		if m, ok := d.(map[string]any); ok {
			if md, ok := m["metadata"].(map[string]any); ok {
				if v, ok := md[key].(string); ok {
					return v
				}
			}
		}
	}
	return ""
}
