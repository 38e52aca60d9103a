package app

import (
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/auth"
)

// TestHighPriorityNeedsThePriorityRole: PRIORITY_HIGH from a member
// without the priority role is 403 naming the field priority and writes
// nothing; with the role, or at normal priority, the order is accepted.
func TestHighPriorityNeedsThePriorityRole(t *testing.T) {
	s := startGateway(t, nil)
	const high = `{"orderCode":"P-1","priority":"PRIORITY_HIGH","items":[{"itemCode":"a","sku":"S","quantity":1}]}`
	st, body := s.do(t, "POST", "/v1/order-splits", s.token(t, "plain"), high)
	if st != 403 || reason(body) != "PERMISSION_DENIED" || field(body) != "priority" {
		t.Fatalf("PRIORITY_HIGH without the role = %d %v, want 403 PERMISSION_DENIED naming priority", st, body)
	}
	if n := s.queued(t); n != 0 {
		t.Errorf("queued jobs after the refusal = %d, want 0", n)
	}
	entitled, err := auth.Issue(auth.Config{Secret: []byte(s.cfg.JWT.Secret.Reveal())}, "entitled", time.Now(), time.Hour, auth.RolePriority)
	if err != nil {
		t.Fatal(err)
	}
	if st, body := s.do(t, "POST", "/v1/order-splits", entitled, high); st != 200 || body["priority"] != "PRIORITY_HIGH" {
		t.Errorf("PRIORITY_HIGH with the priority role = %d %v, want 200 PRIORITY_HIGH", st, body)
	}
	if st, body := s.do(t, "POST", "/v1/order-splits", s.token(t, "plain"), `{"orderCode":"P-2","items":[{"itemCode":"a","sku":"S","quantity":1}]}`); st != 200 {
		t.Errorf("normal priority without the role = %d %v, want 200", st, body)
	}
}
