package app

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestOpsAuditsOnlyValidatedRequestsAndBoundsThem: an admin request
// refused as invalid (400) stores no audit event, however large it is; an
// accepted one stores its target, detail and result cut to 256, 4096 and
// 1024 bytes.
func TestOpsAuditsOnlyValidatedRequestsAndBoundsThem(t *testing.T) {
	s := startGateway(t, nil)
	admin := s.adminToken(t, "root")
	big := strings.Repeat("x", 60<<10)
	bad := []struct{ method, path, body string }{
		{"POST", "/v1/ops/slot-pool/holders/" + strings.Repeat("t", 4000) + ":release", fmt.Sprintf(`{"reason":%q}`, big)},
		{"POST", "/v1/ops/slot-pool/holders/tok:release", fmt.Sprintf(`{"reason":%q}`, big)},
		{"PUT", "/v1/ops/slot-pool/capacity", `{"capacity":-1}`},
		{"POST", "/v1/ops/members/alice/tasks/AAAAAAAAAAAAAAAAAAAAAA:fail", fmt.Sprintf(`{"errorCode":10005,"errorMsg":%q}`, big)},
		{"POST", "/v1/ops/members/alice/tasks/" + strings.Repeat("A", 3000) + ":cancel", "{}"},
		{"POST", "/v1/ops/dead-letters:replay", fmt.Sprintf(`{"limit":5000,"reason":%q}`, big)},
		{"POST", "/v1/ops/payments/" + strings.Repeat("P", 3000) + ":runCheck", "{}"},
		{"POST", "/v1/ops/members/alice/payments/" + strings.Repeat("P", 3000) + ":cancelTracking", "{}"},
	}
	for _, r := range bad {
		if code, body := s.do(t, r.method, r.path, admin, r.body); code != http.StatusBadRequest {
			t.Errorf("%s %.60s… = %d %v, want 400", r.method, r.path, code, body)
		}
	}
	code, body := s.do(t, "GET", "/v1/ops/audit", admin, "")
	if events, _ := body["events"].([]any); code != http.StatusOK || len(events) != 0 {
		t.Fatalf("audit after refused requests = %d, %d events, want none", code, len(events))
	}

	if code, body := s.do(t, "POST", "/v1/ops/dead-letters:replay", admin, fmt.Sprintf(`{"reason":%q}`, big)); code != http.StatusOK {
		t.Fatalf("replay all with a long reason filter = %d %v, want 200", code, body)
	}
	_, body = s.do(t, "GET", "/v1/ops/audit", admin, "")
	events, _ := body["events"].([]any)
	if len(events) != 1 {
		t.Fatalf("audit after one accepted request = %d events, want 1", len(events))
	}
	e, _ := events[0].(map[string]any)
	for field, limit := range map[string]int{"target": 256, "detail": 4096, "result": 1024} {
		v, _ := e[field].(string)
		if v == "" || len(v) > limit {
			t.Errorf("audit event %s: %d bytes, want 1 to %d", field, len(v), limit)
		}
	}
}
