// Package faultreport keeps the latest result of each fault-suite row in
// pkg/testkit/chaos/testdata/latest.json (the suite records its rows there
// when run with ORDERFLOW_CHAOS_RECORD=1) and writes them as the table
// between the generated markers of docs/reliability.md.
package faultreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// RecordEnv asks the fault suite to record its rows into Path.
const RecordEnv = "ORDERFLOW_CHAOS_RECORD"

// Path is the recorded results, relative to the repository root.
const Path = "pkg/testkit/chaos/testdata/latest.json"

// Row is one scenario's accounting in its latest recorded run.
type Row struct {
	Scenario string `json:"scenario"`
	// Suite is the run that recorded it: short (make test), full (make
	// chaos) or partition (make partition).
	Suite         string    `json:"suite"`
	Time          time.Time `json:"time"`
	Commit        string    `json:"commit,omitempty"`
	Passed        bool      `json:"passed"`
	FaultFor      string    `json:"faultFor"`
	Accepted      int       `json:"accepted"`
	Terminal      int       `json:"terminal"`
	Lost          int       `json:"lost"`
	Stuck         int       `json:"stuck"`
	Orphaned      int       `json:"orphaned"`
	OverN         int       `json:"overN"`
	Duplicated    int       `json:"duplicated"`
	PaidAndClosed int       `json:"paidAndClosed"`
	LeftBehind    int       `json:"leftBehind"`
	Early         int       `json:"early"`
	Errors        int       `json:"errors"`
	NoAnswer      int       `json:"noAnswer"`
	SlowestError  string    `json:"slowestError"`
	FirstOK       string    `json:"firstOK"`
	AllTerminal   string    `json:"allTerminal"`
}

// Results are the rows, in the suite's order.
type Results struct {
	Rows []Row `json:"rows"`
}

// Load reads path; a missing file is no rows.
func Load(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Results{}, nil
	}
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Merge replaces the rows of the same scenarios by rows and appends the
// new ones, so runs of different suites add up to one table.
func (r *Results) Merge(rows []Row) {
	for _, row := range rows {
		if i := slices.IndexFunc(r.Rows, func(x Row) bool { return x.Scenario == row.Scenario }); i >= 0 {
			r.Rows[i] = row
		} else {
			r.Rows = append(r.Rows, row)
		}
	}
}

// Save writes r to path.
func (r *Results) Save(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Markers around the generated table in docs/reliability.md.
const (
	Begin = "<!-- BEGIN GENERATED: fault results -->"
	End   = "<!-- END GENERATED: fault results -->"
)

// Markdown renders the rows as the table of docs/reliability.md.
func (r *Results) Markdown() string {
	if len(r.Rows) == 0 {
		return "No run is recorded yet.\n"
	}
	var b strings.Builder
	b.WriteString("| row | suite | run | fault | passed | accepted | terminal | lost | stuck | orphaned | over N | duplicated | paid + closed | left behind | early | errors | no answer | slowest error | first ok after | all terminal after |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, x := range r.Rows {
		run := x.Time.UTC().Format("2006-01-02")
		if x.Commit != "" {
			run += " " + x.Commit
		}
		passed := "yes"
		if !x.Passed {
			passed = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n",
			strings.ReplaceAll(x.Scenario, "|", `\|`), x.Suite, run, x.FaultFor, passed, x.Accepted, x.Terminal, x.Lost, x.Stuck, x.Orphaned,
			x.OverN, x.Duplicated, x.PaidAndClosed, x.LeftBehind, x.Early, x.Errors, x.NoAnswer, x.SlowestError, x.FirstOK, x.AllTerminal)
	}
	return b.String()
}

// Splice returns doc with the text between Begin and End replaced by
// table.
func Splice(doc, table string) (string, error) {
	before, rest, ok := strings.Cut(doc, Begin)
	if !ok {
		return "", fmt.Errorf("no line %q", Begin)
	}
	_, after, ok := strings.Cut(rest, End)
	if !ok {
		return "", fmt.Errorf("no line %q after %q", End, Begin)
	}
	return before + Begin + "\n\n" + table + "\n" + End + after, nil
}

// ErrDrift is returned by Write with check when the page differs.
var ErrDrift = errors.New("the fault results in docs/reliability.md differ from " + Path + ": run make docs")

// Write rewrites the table of doc from the results at jsonPath; with
// check it writes nothing and returns ErrDrift when the table differs.
func Write(jsonPath, doc string, check bool) error {
	res, err := Load(jsonPath)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	updated, err := Splice(string(old), res.Markdown())
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	if updated == string(old) {
		return nil
	}
	if check {
		return ErrDrift
	}
	return os.WriteFile(doc, []byte(updated), 0o644)
}
