package app

import (
	"net/http"
	"testing"
)

// TestSlotPoolResetToConfiguration: an admin's reset writes the
// split-workers' configured N over an operator's and records who asked;
// the slot pool's counts name each setting's origin; a gateway not told
// the configured pool refuses the reset (400 SLOT_POOL_NOT_CONFIGURED)
// and audits nothing.
func TestSlotPoolResetToConfiguration(t *testing.T) {
	t.Run("configured", func(t *testing.T) {
		s := startGateway(t, func(c *Config) { c.FulfilmentSlots, c.FairnessWeights = 4, map[string]int{"m-1": 3} })
		admin := s.adminToken(t, "root")
		origin := func(body map[string]any, setting string) (source, actor string) {
			stats, _ := body["stats"].(map[string]any)
			o, _ := stats[setting+"Origin"].(map[string]any)
			source, _ = o["source"].(string)
			actor, _ = o["actor"].(string)
			return source, actor
		}
		code, body := s.do(t, "PUT", "/v1/ops/slot-pool/capacity", admin, `{"capacity":0}`)
		if src, actor := origin(body, "capacity"); code != http.StatusOK || src != "operator" || actor != "root" {
			t.Fatalf("PUT capacity 0 = %d, capacity origin %q/%q, want 200 operator/root", code, src, actor)
		}
		code, body = s.do(t, "POST", "/v1/ops/slot-pool:resetToConfiguration", admin, "{}")
		if code != http.StatusOK {
			t.Fatalf("reset = %d %v, want 200", code, body)
		}
		stats, _ := body["stats"].(map[string]any)
		if stats["capacity"] != float64(4) {
			t.Errorf("capacity after reset = %v, want the configured 4", stats["capacity"])
		}
		for _, setting := range []string{"capacity", "fairness", "weights"} {
			if src, actor := origin(body, setting); src != "configuration" || actor != "root" {
				t.Errorf("%s origin after reset = %q/%q, want configuration/root", setting, src, actor)
			}
		}
		_, body = s.do(t, "GET", "/v1/ops/slot-pool", admin, "")
		groups, _ := body["stats"].(map[string]any)["groups"].([]any)
		if len(groups) != 1 || groups[0].(map[string]any)["weight"] != float64(3) {
			t.Errorf("groups after reset = %v, want m-1 with the configured weight 3", groups)
		}
		_, audit := s.do(t, "GET", "/v1/ops/audit", admin, "")
		events, _ := audit["events"].([]any)
		if len(events) != 2 || events[0].(map[string]any)["action"] != "ResetSlotPoolToConfiguration" || events[0].(map[string]any)["result"] != "ok" {
			t.Errorf("audit = %v, want the reset (ok) after the capacity change", events)
		}
	})
	t.Run("not configured", func(t *testing.T) {
		s := startGateway(t, nil)
		admin := s.adminToken(t, "root")
		if code, body := s.do(t, "POST", "/v1/ops/slot-pool:resetToConfiguration", admin, "{}"); code != http.StatusBadRequest || reason(body) != "SLOT_POOL_NOT_CONFIGURED" {
			t.Errorf("reset without the configured pool = %d %v, want 400 SLOT_POOL_NOT_CONFIGURED", code, body)
		}
		_, audit := s.do(t, "GET", "/v1/ops/audit", admin, "")
		if events, _ := audit["events"].([]any); len(events) != 0 {
			t.Errorf("audit after the refused reset = %v, want none", events)
		}
	})
}
