package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

// A costLine is one count of one order's step, measured and budgeted.
type costLine struct {
	Order  string  `json:"order"`  // "1-item", "20-item", or "read" for one status read
	Step   string  `json:"step"`   // cost.Submit, cost.Split, cost.Status
	Kind   string  `json:"kind"`   // cost.RedisRoundTrips, …, or "http_calls:<peer>"
	Budget float64 `json:"budget"` // what one order may cost (per status read for "read")
	Floor  float64 `json:"floor"`  // what it must cost at least
	Why    string  `json:"why"`    // what the floor is made of
}

// margins are how far over its budget a count fails (an added round
// trip, command or call per order is a whole one; bytes: 10 %) and how far
// under it the budget is stale.
func (l costLine) margins() (over, under float64) {
	if l.Kind == cost.RedisBytes {
		return 0.1 * l.Budget, 0.1 * l.Budget
	}
	return 0.25, 0.75
}

// budgetFile is the committed budget, relative to the repository root.
const budgetFile = "bench/cost-budget.json"

func loadBudget(t testing.TB) []costLine {
	t.Helper()
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, budgetFile))
	if err != nil {
		t.Fatal(err)
	}
	var b struct{ Lines []costLine }
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("%s: %v", budgetFile, err)
	}
	return b.Lines
}

// overBudget compares measured counts (per order, keyed "order/step/kind")
// with the budget. A count is over when it exceeds the budget by a
// quarter or more (an added round trip, command or call per order is a
// whole one); under by three quarters or more, the budget is stale and
// must come down (bytes: by 10 %). Every budgeted count must be measured.
func overBudget(measured map[string]float64, budget []costLine) []string {
	var errs []string
	for _, l := range budget {
		key := l.Order + "/" + l.Step + "/" + l.Kind
		got, ok := measured[key]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: not measured", key))
			continue
		}
		over, under := l.margins()
		switch {
		case got >= l.Budget+over:
			errs = append(errs, fmt.Sprintf("%s = %.2f per order, over the budget of %g (floor %g: %s)", key, got, l.Budget, l.Floor, l.Why))
		case got <= l.Budget-under:
			errs = append(errs, fmt.Sprintf("%s = %.2f per order, well under the budget of %g: lower the budget in %s", key, got, l.Budget, budgetFile))
		}
	}
	return errs
}

func TestOverBudgetCatchesAnAddedRoundTrip(t *testing.T) {
	budget := []costLine{
		{Order: "1-item", Step: cost.Split, Kind: cost.RedisRoundTrips, Budget: 4, Floor: 3},
		{Order: "1-item", Step: cost.Split, Kind: cost.RedisBytes, Budget: 1000, Floor: 500},
	}
	for _, tc := range []struct {
		name     string
		trips    float64
		bytes    float64
		problems int
	}{
		{"as budgeted", 4, 1000, 0},
		{"a round trip added", 5, 1000, 1},
		{"a round trip added to one order in four", 4.25, 1000, 1},
		{"a round trip cut, the budget not lowered", 3, 1000, 1},
		{"bytes grown by a fifth", 4, 1200, 1},
		{"bytes a little different", 4, 1050, 0},
	} {
		got := overBudget(map[string]float64{"1-item/split/redis_round_trips": tc.trips, "1-item/split/redis_bytes_sent": tc.bytes}, budget)
		if len(got) != tc.problems {
			t.Errorf("%s: %v, want %d problem(s)", tc.name, got, tc.problems)
		}
	}
	if got := overBudget(map[string]float64{}, budget[:1]); len(got) != 1 || !strings.Contains(got[0], "not measured") {
		t.Errorf("a budgeted count not measured: %v", got)
	}
}

// TestBudgetFloorsAreAnalysed checks that every budgeted count names its
// floor: above nothing, at most the budget, and said what it is made of.
func TestBudgetFloorsAreAnalysed(t *testing.T) {
	for _, l := range loadBudget(t) {
		key := l.Order + "/" + l.Step + "/" + l.Kind
		if l.Floor <= 0 || l.Floor > l.Budget {
			t.Errorf("%s: floor %g, want above 0 and at most the budget %g", key, l.Floor, l.Budget)
		}
		if l.Why == "" {
			t.Errorf("%s: no word on what the floor is made of", key)
		}
	}
}

// stepCounts reads a service's orderflow_step_* counters, keyed
// "step/kind" (HTTP calls "step/http_calls:peer").
func stepCounts(t testing.TB, s *stacktest.Stack, service string) map[string]float64 {
	t.Helper()
	resp, err := s.GetMetrics(service)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "orderflow_step_")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		labels, value, _ := strings.Cut(rest, "} ")
		kind := strings.TrimSuffix(name, "_total")
		var step string
		for _, l := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "step":
				step = v
			case "peer":
				kind += ":" + v
			}
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		m[step+"/"+kind] += n
	}
	return m
}

// TestOrderCost counts, over real processes, what one order costs end to
// end — Redis round trips, commands, script calls and bytes sent,
// RabbitMQ publishes and settlements, fulfilment calls — for a 1-item and
// a 20-item order and one status read, and compares the counts with the
// committed budget. Orders go one at a time, and the writes orders share
// on a timer are counted apart (cost.Batched), so no count depends on
// timing; the fulfilment jobs take no time (the create answers them
// done), and the split-worker's copy of the catalogue, read by the
// warm-up order, stays fresh for the whole test (the share of a read per
// order under load is one per ORDERFLOW_SPLITWORKER_CATALOGUE_MAX_AGE
// per replica).
func TestOrderCost(t *testing.T) {
	s := stacktest.Start(t, stacktest.Options{
		Services: []string{stacktest.Fulfilment, stacktest.PaySim, stacktest.Reconciler, stacktest.SplitWorker, stacktest.Gateway},
		ServiceEnv: map[string]map[string]string{
			stacktest.Fulfilment:  {"ORDERFLOW_FULFILMENT_JOB_MIN": "0s", "ORDERFLOW_FULFILMENT_JOB_MAX": "0s"},
			stacktest.SplitWorker: {"ORDERFLOW_SPLITWORKER_POLL_INITIAL": "20ms", "ORDERFLOW_SPLITWORKER_CATALOGUE_MAX_AGE": "1h"},
		}})
	gw := s.URL(stacktest.Gateway)
	skus := stockCatalogue(t, s)
	tok := s.DevToken(t, "cost")
	itemsOf := func(n int) []map[string]any {
		var items []map[string]any
		for i := range n {
			items = append(items, map[string]any{"itemCode": fmt.Sprintf("I%02d", i), "sku": skus[i%len(skus)]["sku"], "quantity": 1})
		}
		return items
	}
	seq := 0
	reads := 0
	// order submits one order and waits until it is terminal.
	order := func(items int) {
		seq++
		st, task := call(t, "POST", gw+"/v1/order-splits", tok, map[string]any{"orderCode": fmt.Sprintf("COST-%06d", seq), "items": itemsOf(items)})
		if st != 200 {
			t.Fatalf("submit = %d %v", st, task)
		}
		id := task["taskId"].(string)
		until(t, "the order to finish", 20*time.Second, func() bool {
			_, task = call(t, "GET", gw+"/v1/tasks/"+id, tok, nil)
			reads++
			return task["status"] != "TASK_STATUS_PROCESSING"
		})
		if task["status"] != "TASK_STATUS_SUCCEEDED" {
			t.Fatalf("order %d = %v, want SUCCEEDED", seq, task)
		}
	}
	counts := func() map[string]float64 {
		m := stepCounts(t, s, stacktest.Gateway)
		for k, v := range stepCounts(t, s, stacktest.SplitWorker) {
			m[k] += v
		}
		return m
	}
	// settled waits until the worker settled every delivery so far.
	settled := func(base map[string]float64, want int) map[string]float64 {
		var now map[string]float64
		until(t, "the worker to settle every delivery", 10*time.Second, func() bool {
			now = counts()
			return now["split/"+cost.AMQPSettles]-base["split/"+cost.AMQPSettles] >= float64(want)
		})
		return now
	}

	measured := map[string]float64{}
	// A warm-up order of each size loads the scripts and fills the pools.
	order(1)
	order(20)
	base := settled(map[string]float64{}, 2)
	for _, size := range []struct {
		name   string
		items  int
		orders int
	}{{"1-item", 1, 10}, {"20-item", 20, 5}} {
		reads = 0
		for range size.orders {
			order(size.items)
		}
		now := settled(base, size.orders)
		for k, v := range now {
			step, _, _ := strings.Cut(k, "/")
			d := v - base[k]
			switch step {
			case cost.Submit, cost.Split:
				measured[size.name+"/"+k] = d / float64(size.orders)
			case cost.Status:
				measured["read/"+k] += d / float64(reads) / 2 // the mean of both sizes' reads
			case cost.Batched:
				// Flushed on timers and shared by the orders of a flush:
				// shown, not budgeted (their share depends on the pace).
				t.Logf("%s: %s %.0f over %d orders (%.2f per order one at a time; about none under load)", size.name, k, d, size.orders, d/float64(size.orders))
			}
		}
		base = now
	}
	budget := loadBudget(t)
	for _, k := range slices.Sorted(maps.Keys(measured)) {
		measured[k] = math.Round(measured[k]*100) / 100
		t.Logf("%-45s %8.2f", k, measured[k])
		if os.Getenv(benchrec.EnvOut) != "" {
			recordCost(t, k, measured[k], budget)
		}
	}
	if os.Getenv("ORDERFLOW_COST_PRINT") != "" {
		raw, _ := json.MarshalIndent(measured, "", "  ")
		t.Logf("measured:\n%s", raw)
	}
	for _, e := range overBudget(measured, budget) {
		t.Error(e)
	}
}

// recordCost writes one measured count to make bench's figures, with its
// budget as the goal and its floor in the note.
func recordCost(t *testing.T, key string, v float64, budget []costLine) {
	order, rest, _ := strings.Cut(key, "/")
	per := order + " order"
	if order == "read" {
		per = "status read"
	}
	f := benchrec.Figure{Group: "cost of an order", Name: rest + " per " + per,
		Params: "real processes, one order at a time", Value: v, Unit: "count", Better: benchrec.Lower}
	for _, l := range budget {
		if l.Order+"/"+l.Step+"/"+l.Kind == key {
			over, _ := l.margins()
			f.Goals = []benchrec.Goal{benchrec.Below("value", l.Budget+over)}
			f.Note = fmt.Sprintf("budget %g, floor %g: %s", l.Budget, l.Floor, l.Why)
		}
	}
	benchrec.Record(t, f)
}

// costTable renders the budget as docs/architecture.md shows it.
func costTable(budget []costLine) string {
	var b strings.Builder
	b.WriteString("| order | step | count | budget | floor | the floor is made of |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, l := range budget {
		fmt.Fprintf(&b, "| %s | %s | %s | %g | %g | %s |\n", l.Order, l.Step, l.Kind, l.Budget, l.Floor, l.Why)
	}
	return b.String()
}

func TestCostTableInDocs(t *testing.T) {
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "TestCostTableInDocs checks it -->\n")
	doc, _, ok2 := strings.Cut(rest, "<!-- end of cost table -->")
	want := costTable(loadBudget(t))
	if !ok || !ok2 || doc != want {
		t.Errorf("docs/architecture.md's cost table differs from %s; put this between its markers:\n%s", budgetFile, want)
	}
}
