package benchrec

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the content of bench/latest.json: the run's conditions and
// every figure.
type Report struct {
	Meta    Meta     `json:"meta"`
	Figures []Figure `json:"figures"`
	// Levers give, by "group: name", the measured reason a figure misses
	// its goal and the next lever to pull (bench/levers.json, written by
	// a person); the page lists every goal not met with its lever.
	Levers map[string]Lever `json:"levers,omitempty"`
}

// Lever is why a figure misses its goal, as measured, and what to pull
// next to reach it: a sentence or two each, for one row of a short table.
type Lever struct {
	Reason string `json:"reason"`
	Next   string `json:"next"`
}

// UnmarshalJSON also reads a lever written as one string (reason and next
// lever in one text), as older reports have them.
func (l *Lever) UnmarshalJSON(data []byte) error {
	var text string
	if json.Unmarshal(data, &text) == nil {
		*l = Lever{Reason: text}
		return nil
	}
	type plain Lever
	return json.Unmarshal(data, (*plain)(l))
}

// Meta describes the machine and run the figures come from.
type Meta struct {
	Time      time.Time `json:"time"`
	Commit    string    `json:"commit,omitempty"`
	GoVersion string    `json:"goVersion"`
	CPUs      int       `json:"cpus"`
	CPUModel  string    `json:"cpuModel,omitempty"`
	// LoadAvg is /proc/loadavg's 1, 5 and 15 minute averages when the
	// report was made: a busy machine makes noisy figures.
	LoadAvg string `json:"loadAvg,omitempty"`
	// Pin is the pinned pass's "CLIENT:SERVER" CPU lists, empty when the
	// run had none.
	Pin string `json:"pin,omitempty"`
}

// ReadFigures reads JSON lines written by Record. A later figure with the
// same key replaces an earlier one.
func ReadFigures(r io.Reader) ([]Figure, error) {
	var out []Figure
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var f Figure
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		f.Complete()
		if i, ok := index[f.Key()]; ok {
			out[i] = f
			continue
		}
		index[f.Key()] = len(out)
		out = append(out, f)
	}
	return out, sc.Err()
}

// LoadReport reads a bench/latest.json.
func LoadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Groups returns the figures' groups in order of first appearance, each
// with its figures in recorded order.
func (r *Report) Groups() []Group {
	var out []Group
	for _, f := range r.Figures {
		i := slices.IndexFunc(out, func(g Group) bool { return g.Name == f.Group })
		if i < 0 {
			out = append(out, Group{Name: f.Group})
			i = len(out) - 1
		}
		out[i].Figures = append(out[i].Figures, f)
	}
	return out
}

// Group is the figures of one table section.
type Group struct {
	Name    string
	Figures []Figure
}

// Row is a figure's cells as the printed and README tables show them.
type Row struct {
	Figure, Params, Value, Baseline, Ratio, Goal, Met string
}

// Cells renders f for a table.
func (f Figure) Cells() Row {
	r := Row{Figure: f.Group + ": " + f.Name, Params: f.Params, Value: FormatNumber(f.Value) + " " + f.Unit}
	if f.Pinned {
		if r.Params != "" {
			r.Params += ", "
		}
		r.Params += "pinned"
	}
	if f.Baseline != nil {
		r.Baseline = fmt.Sprintf("%s %s %s", f.Baseline.Name, FormatNumber(f.Baseline.Value), f.Unit)
		r.Ratio = f.RatioText()
	}
	var goals []string
	for _, g := range f.Goals {
		goals = append(goals, g.String(f.Unit))
	}
	r.Goal = strings.Join(goals, ", ")
	if f.Met != nil {
		r.Met = map[bool]string{true: "yes", false: "**no**"}[*f.Met]
	}
	return r
}

// WriteTable prints the figures as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "orderflow benchmarks, %s, %d CPUs, load %s", r.Meta.Time.Format(time.RFC3339), r.Meta.CPUs, r.Meta.LoadAvg)
	if r.Meta.Pin != "" {
		client, server, _ := strings.Cut(r.Meta.Pin, ":")
		fmt.Fprintf(w, "; pinned rows: client on CPU %s, server on CPU %s (taskset)", client, server)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tconditions\tvalue\tbaseline (same run)\tratio\tgoal\tmet")
	for _, f := range r.Figures {
		c := f.Cells()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Figure, c.Params, c.Value, c.Baseline, c.Ratio, c.Goal, strings.Trim(c.Met, "*"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.hasPairs() {
		fmt.Fprintln(w, PairsNote)
	}
	return nil
}

// PairsNote explains a ratio with a bracket; the tables print it when a
// figure has one.
const PairsNote = "A ratio with a bracket is the median of the per-pair ratios of interleaved repeats of the figure and its baseline " +
	"(rounds of alternating order, each pair measured side by side); the bracket is the lowest–highest pair ratio and the count of pairs. " +
	"The value and the baseline of such a row are the medians of their repeats' rates."

func (r *Report) hasPairs() bool {
	return slices.ContainsFunc(r.Figures, func(f Figure) bool { return f.RatioSpread != nil })
}

// Markdown renders the README's benchmark table.
func (r *Report) Markdown() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Run of %s on %d CPUs (%s), load average %s",
		r.Meta.Time.Format("2006-01-02"), r.Meta.CPUs, r.Meta.CPUModel, r.Meta.LoadAvg)
	if r.Meta.Pin != "" {
		client, server, _ := strings.Cut(r.Meta.Pin, ":")
		fmt.Fprintf(&sb, "; rows marked pinned ran the load generator on CPU %s and the server (orderflow or its baseline) on CPU %s", client, server)
	}
	sb.WriteString(".\n\n")
	sb.WriteString("| figure | conditions | value | baseline in the same run | ratio | goal | met |\n")
	sb.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	esc := strings.NewReplacer("|", `\|`)
	for _, f := range r.Figures {
		c := f.Cells()
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s |\n", esc.Replace(c.Figure), esc.Replace(c.Params),
			c.Value, esc.Replace(c.Baseline), c.Ratio, c.Goal, c.Met)
	}
	if r.hasPairs() {
		sb.WriteString("\n" + PairsNote + "\n")
	}
	return sb.String()
}

// PageHeader opens docs/benchmarks.md.
const PageHeader = "# Benchmarks\n\n<!-- generated from bench/latest.json by `make bench-docs` (or `make docs`); do not edit -->\n"

// Page renders the whole of docs/benchmarks.md: the current table, the
// goals and the baselines.
func (r *Report) Page() string {
	var sb strings.Builder
	sb.WriteString(PageHeader)
	sb.WriteString("\n`make bench` measures every figure beside a baseline measured in the same run on the same machine " +
		"and writes bench/latest.json, bench/report.html (charts) and this page; `make bench-long` adds the long sweeps. " +
		"A repeated cell shows the median of its rounds (5 in `make bench`), its ratio the median of the rounds' ratios " +
		"with their lowest–highest range and count. Tests never assert speed: " +
		"a goal not met is a row marked **no**, listed under Goals not met with its measured reason and next lever " +
		"(bench/levers.json), and `make bench-compare` states whether two runs differ beyond their noise.\n")
	sb.WriteString("\n## Current run\n\n")
	sb.WriteString(r.Markdown())

	var goals []Figure
	met := 0
	for _, f := range r.Figures {
		if len(f.Goals) > 0 {
			goals = append(goals, f)
			if f.Met != nil && *f.Met {
				met++
			}
		}
	}
	if len(goals) > 0 {
		fmt.Fprintf(&sb, "\n## Goals\n\n%d of the %d figures with a goal met it in this run.\n\n", met, len(goals))
		sb.WriteString("| figure | conditions | goal | value | ratio | met |\n| --- | --- | --- | --- | --- | --- |\n")
		for _, f := range goals {
			c := f.Cells()
			fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |\n", mdEscape(c.Figure), mdEscape(c.Params), c.Goal, c.Value, c.Ratio, c.Met)
		}
		sb.WriteString(r.missed(goals))
	}

	var names []string
	used := map[string][]string{}
	for _, f := range r.Figures {
		if f.Baseline == nil {
			continue
		}
		n := f.Baseline.Name
		if _, ok := used[n]; !ok {
			names = append(names, n)
		}
		if row := f.Group + ": " + f.Name; !slices.Contains(used[n], row) {
			used[n] = append(used[n], row)
		}
	}
	if len(names) > 0 {
		sb.WriteString("\n## Baselines\n\nEach baseline runs in the same process and run as the figures it is compared with.\n\n")
		sb.WriteString("| baseline | compared with |\n| --- | --- |\n")
		for _, n := range names {
			fmt.Fprintf(&sb, "| %s | %s |\n", mdEscape(n), mdEscape(strings.Join(used[n], "; ")))
		}
	}
	return sb.String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// missed renders the goals not met, one row for each figure (its cells
// that miss their goal side by side, each named by what sets it apart
// from the figure's other cells), with its measured reason and next lever
// ("not analysed" for a figure bench/levers.json has no entry for).
func (r *Report) missed(goals []Figure) string {
	var order []string
	all := map[string][]Row{}  // every cell with a goal, by figure
	miss := map[string][]Row{} // the cells that miss it
	for _, f := range goals {
		key := f.Group + ": " + f.Name
		all[key] = append(all[key], f.Cells())
		if f.Met == nil || *f.Met {
			continue
		}
		if _, ok := miss[key]; !ok {
			order = append(order, key)
		}
		miss[key] = append(miss[key], f.Cells())
	}
	if len(order) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\n## Goals not met\n\n| figure | goal | in this run | measured reason | next lever |\n| --- | --- | --- | --- | --- |\n")
	for _, key := range order {
		lever, ok := r.Levers[key]
		if !ok {
			lever = Lever{Reason: "not analysed"}
		}
		var run, goal []string
		for _, c := range miss[key] {
			if !slices.Contains(goal, c.Goal) {
				goal = append(goal, c.Goal)
			}
			v := c.Value
			if c.Ratio != "" {
				v += ", ratio " + c.Ratio
			}
			if own := distinctParams(c.Params, all[key]); own != "" {
				v = own + ": " + v
			}
			run = append(run, v)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s |\n", mdEscape(key), strings.Join(goal, "; "), mdEscape(strings.Join(run, "; ")),
			mdEscape(lever.Reason), mdEscape(lever.Next))
	}
	return sb.String()
}

// distinctParams returns the parts of params (comma-separated) that not
// every cell of cells shares: what sets a cell apart from its figure's
// others ("" for a figure of one cell).
func distinctParams(params string, cells []Row) string {
	var own []string
	for part := range strings.SplitSeq(params, ", ") {
		for _, c := range cells {
			if !slices.Contains(strings.Split(c.Params, ", "), part) {
				own = append(own, part)
				break
			}
		}
	}
	return strings.Join(own, ", ")
}
