package configdoc_test

import (
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/config/configdoc"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

func TestRender(t *testing.T) {
	services := []configdoc.Service{
		{Name: "gateway", Fields: []config.Field{
			{Name: "ORDERFLOW_REDIS_ADDR", Type: "string", Default: "127.0.0.1:6379", Desc: "Redis address."},
			{Name: "ORDERFLOW_GATEWAY_MAX_ITEMS", Type: "integer", Default: "200", Desc: "Most items.", Range: "≥ 1"},
			{Name: "ORDERFLOW_GATEWAY_CLOCK_SKEW", Type: "duration", Default: "0s", Desc: "Clock offset.", TestOnly: true},
			{Name: "ORDERFLOW_PAY_APIV3_KEY", Type: "secret", Desc: "Decrypts notifications.", Prod: "32 bytes, not the development key"},
			{Name: "ORDERFLOW_LOG_LEVEL"},
		}},
		{Name: "paysim", Fields: []config.Field{
			{Name: "ORDERFLOW_PAY_APIV3_KEY", Type: "secret", Default: "dev-key", Desc: "Encrypts notifications."},
		}},
		{Name: "splitworker", Fields: []config.Field{
			{Name: "ORDERFLOW_REDIS_ADDR", Type: "string", Default: "127.0.0.1:6379", Desc: "Redis address."},
		}},
	}
	page, err := configdoc.Render(services)
	if err != nil {
		t.Fatalf("Render() = %v", err)
	}
	for _, want := range []string{
		"## Read by several services",
		"| `ORDERFLOW_REDIS_ADDR` | string | `127.0.0.1:6379` |  | gateway, splitworker |  | Redis address. |",
		"| `ORDERFLOW_PAY_APIV3_KEY` | secret | gateway: –<br>paysim: `dev-key` |  | gateway, paysim | gateway: 32 bytes, not the development key<br>paysim: – | gateway: Decrypts notifications.<br>paysim: Encrypts notifications. |",
		"## gateway",
		"## Test-suite variables",
		"| `ORDERFLOW_CHAOS_RECORD` |",
		"| `ORDERFLOW_GATEWAY_MAX_ITEMS` | integer | `200` | ≥ 1 | gateway |  | Most items. |",
		"| `ORDERFLOW_LOG_LEVEL` | string | `info` |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("Render() has no line %q:\n%s", want, page)
		}
	}
	_, testOnly, _ := strings.Cut(page, "## Test-only settings")
	if !strings.Contains(testOnly, "`ORDERFLOW_GATEWAY_CLOCK_SKEW`") {
		t.Errorf("ORDERFLOW_GATEWAY_CLOCK_SKEW is not listed under the test-only settings:\n%s", page)
	}
	if strings.Count(page, "`ORDERFLOW_GATEWAY_CLOCK_SKEW`") != 1 {
		t.Errorf("ORDERFLOW_GATEWAY_CLOCK_SKEW is listed more than once:\n%s", page)
	}
}

func TestRenderRefusesUndescribedSettings(t *testing.T) {
	services := []configdoc.Service{
		{Name: "gateway", Fields: []config.Field{
			{Name: "ORDERFLOW_GATEWAY_MAX_ITEMS", Type: "integer", Default: "200"},
			{Name: "ORDERFLOW_NOT_KNOWN"},
		}},
	}
	_, err := configdoc.Render(services)
	if err == nil || !strings.Contains(err.Error(), "ORDERFLOW_GATEWAY_MAX_ITEMS (gateway)") || !strings.Contains(err.Error(), "ORDERFLOW_NOT_KNOWN") {
		t.Errorf("Render() = %v, want an error naming ORDERFLOW_GATEWAY_MAX_ITEMS (gateway) and ORDERFLOW_NOT_KNOWN", err)
	}
}

// TestPageMatchesConfigStructs fails when docs/configuration.md is not
// what the services' config structs generate (every setting described).
func TestPageMatchesConfigStructs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every service")
	}
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := configdoc.Write(t.Context(), root, true); err != nil {
		t.Fatal(err)
	}
}
