package chartcheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	rulesFile     = "../orderflow/files/alerts.rules.yaml"
	rulesTest     = "../rulestest/alerts.test.yaml"
	dashboardFile = "../orderflow/files/dashboard.json"
)

// wantAlerts are the alerts the chart must ship.
var wantAlerts = []string{
	"OrderflowTasksStuck", "OrderflowDeadLettersGrowing", "OrderflowSlotPoolSaturated",
	"OrderflowDelayQueueOverdue", "OrderflowReconciliationUncertain", "OrderflowErrorCodesSpiking",
}

func readRules(t *testing.T) RuleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf RuleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

// TestAlertRulesPassPromtool runs `promtool test rules` on the chart's rule
// file: every alert has a case that fires and one that does not.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		var err error
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Fatal("promtool not found: install the Debian package prometheus (make test-deps does) or set PROMTOOL")
		}
	}
	if out, err := exec.CommandContext(ctx(t), promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx(t), promtool, "test", "rules", rulesTest).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	// Each alert is tested both ways.
	b, err := os.ReadFile(rulesTest)
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &suite); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
		}
	}
	if diff := cmp.Diff(wantAlerts, alerts); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: a case that fires = %v, a case that does not = %v; want both", a, fires[a], quiet[a])
		}
	}
}

// TestPrometheusRuleAndDashboard checks that the opt-in PrometheusRule
// carries exactly the tested rule file and that the dashboard ConfigMap
// holds valid dashboard JSON under the sidecar's label.
func TestPrometheusRuleAndDashboard(t *testing.T) {
	if _, ok := render(t, nil).Get("PrometheusRule", "of-orderflow"); ok {
		t.Error("PrometheusRule rendered by default, want opt-in")
	}
	m := render(t, []string{allOn})
	o, ok := m.Get("PrometheusRule", "of-orderflow")
	if !ok {
		t.Fatal("no PrometheusRule of-orderflow")
	}
	pr := o.Value.(*PrometheusRule)
	if diff := cmp.Diff(readRules(t), pr.Spec); diff != "" {
		t.Errorf("PrometheusRule spec differs from %s (-want +got):\n%s", rulesFile, diff)
	}
	if pr.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels = %v, want release=prometheus from values", pr.Labels)
	}

	o, ok = m.Get("ConfigMap", "of-orderflow-dashboard")
	if !ok {
		t.Fatal("no ConfigMap of-orderflow-dashboard")
	}
	cm := o.Value.(*corev1.ConfigMap)
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "orderflow" {
		t.Errorf("dashboard ConfigMap labels %v annotations %v, want grafana_dashboard=1 and the folder annotation", cm.Labels, cm.Annotations)
	}
	file, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(cm.Data["orderflow.json"]) != strings.TrimSpace(string(file)) {
		t.Error("dashboard ConfigMap does not hold files/dashboard.json")
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(file, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var rows []string
	metricName := regexp.MustCompile(`\b(orderflow_[a-z_]+)`)
	for _, p := range dash.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !metricName.MatchString(tg.Expr) {
				t.Errorf("panel %q query %q uses no orderflow metric", p.Title, tg.Expr)
			}
		}
	}
	for _, want := range []string{"Job queue", "Tasks", "Slot pool", "Delay queue", "Payments"} {
		if !slices.Contains(rows, want) {
			t.Errorf("dashboard rows %v, want a %q row", rows, want)
		}
	}
}

// clusterWide are the gauges every replica reads from Redis or RabbitMQ
// and reports identically, without a replica label: a sum over replicas
// would multiply them by the replica count, so they are aggregated with
// max() wherever a query uses them.
var clusterWide = []string{
	"orderflow_jobqueue_messages", "orderflow_jobqueue_consumers",
	"orderflow_slotpool_capacity", "orderflow_slotpool_in_use", "orderflow_slotpool_waiting",
	"orderflow_delayq_pending_jobs",
}

// TestClusterWideGaugesAggregatedWithMax checks every dashboard query and
// alert expression: each use of a cluster-wide gauge sits directly inside
// max() or max by (...)().
func TestClusterWideGaugesAggregatedWithMax(t *testing.T) {
	var exprs []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	file, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(file, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	used := map[string]bool{}
	for _, name := range clusterWide {
		use := regexp.MustCompile(`\b` + name + `\b`)
		inMax := regexp.MustCompile(`\bmax(\s+by\s*\([^)]*\))?\s*\(\s*` + name + `(\{[^}]*\})?(\s+offset\s+\w+)?\s*\)`)
		for _, e := range exprs {
			n := len(use.FindAllString(e, -1))
			if n == 0 {
				continue
			}
			used[name] = true
			if m := len(inMax.FindAllString(e, -1)); m != n {
				t.Errorf("%s used %d times in %q, %d of them directly inside max(); want all", name, n, e, m)
			}
		}
	}
	for _, name := range clusterWide {
		if !used[name] {
			t.Errorf("the dashboard and the alerts never show %s", name)
		}
	}
}

// runbookFile is the operators' page with one runbook entry per alert.
const runbookFile = "../../../docs/operations.md"

// runbookGaps returns, for each alert, what its runbook entry in doc lacks:
// a "### <alert>" heading, and under it the parts "**Means:**", "**Check"
// and "**Do" (what it means, what to check, what to do).
func runbookGaps(alerts []string, doc string) []string {
	sections := map[string]string{}
	var name string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "#") {
			name = ""
			if h, ok := strings.CutPrefix(line, "### "); ok {
				name, _, _ = strings.Cut(h, " ")
			}
			continue
		}
		if name != "" {
			sections[name] += line + "\n"
		}
	}
	var gaps []string
	for _, a := range alerts {
		body, ok := sections[a]
		if !ok {
			gaps = append(gaps, a+": no \"### "+a+"\" entry")
			continue
		}
		for _, part := range []string{"**Means:**", "**Check", "**Do"} {
			if !strings.Contains(body, part) {
				gaps = append(gaps, a+": no "+part+" part")
			}
		}
	}
	return gaps
}

// TestEveryAlertHasARunbookEntry: every alert the chart ships has an entry
// in docs/operations.md saying what it means, what to check and what to do.
func TestEveryAlertHasARunbookEntry(t *testing.T) {
	doc, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	if gaps := runbookGaps(alerts, string(doc)); len(gaps) > 0 {
		t.Errorf("%s lacks runbook entries:\n%s", runbookFile, strings.Join(gaps, "\n"))
	}
}

func TestRunbookGaps(t *testing.T) {
	full := "## Runbook\n### A (critical)\n**Means:** x\n**Check:** y\n**Do:** z\n"
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"complete", full, nil},
		{"no entry", "## Runbook\n### B\n**Means:** x\n**Check:** y\n**Do:** z\n", []string{`A: no "### A" entry`}},
		{"no do", "### A\n**Means:** x\n**Check:** y\n", []string{"A: no **Do part"}},
		{"parts under the next heading do not count", "### A\n**Means:** x\n### B\n**Check:** y\n**Do:** z\n", []string{"A: no **Check part", "A: no **Do part"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, runbookGaps([]string{"A"}, tc.doc)); diff != "" {
				t.Errorf("gaps (-want +got):\n%s", diff)
			}
		})
	}
}
