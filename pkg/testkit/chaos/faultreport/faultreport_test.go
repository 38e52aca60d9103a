package faultreport_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/chaos/faultreport"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

func TestRecordAndWrite(t *testing.T) {
	dir := t.TempDir()
	jsonPath, doc := filepath.Join(dir, "latest.json"), filepath.Join(dir, "reliability.md")
	at := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	res, err := faultreport.Load(jsonPath)
	if err != nil || len(res.Rows) != 0 {
		t.Fatalf("Load(missing) = %v, %v; want no rows", res, err)
	}
	res.Merge([]faultreport.Row{
		{Scenario: "kill -9 gateway", Suite: "short", Time: at, Passed: true, FaultFor: "2s", Accepted: 10, Terminal: 10, SlowestError: "0s", FirstOK: "1.2s", AllTerminal: "3s"},
		{Scenario: "redis kill -9", Suite: "short", Time: at, Passed: true, Accepted: 5, Terminal: 5},
	})
	// A later partition run replaces its own row and keeps the others.
	res.Merge([]faultreport.Row{{Scenario: "redis kill -9", Suite: "full", Time: at, Passed: false, Accepted: 7, Terminal: 6, Stuck: 1, Commit: "abc"}})
	if err := res.Save(jsonPath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("# R\n\n"+faultreport.Begin+"\nstale\n"+faultreport.End+"\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := faultreport.Write(jsonPath, doc, true); err != faultreport.ErrDrift {
		t.Fatalf("Write(check) of a stale table = %v, want ErrDrift", err)
	}
	if err := faultreport.Write(jsonPath, doc, false); err != nil {
		t.Fatal(err)
	}
	if err := faultreport.Write(jsonPath, doc, true); err != nil {
		t.Fatalf("Write(check) after writing = %v", err)
	}
	got, _ := os.ReadFile(doc)
	for _, want := range []string{
		"| kill -9 gateway | short | 2026-12-05 | 2s | yes | 10 | 10 | 0 |",
		"| redis kill -9 | full | 2026-12-05 abc |  | **no** | 7 | 6 | 0 | 1 |",
		"\n\nafter\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("page lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "stale") || strings.Count(string(got), "| redis kill -9 |") != 1 {
		t.Errorf("page after Write:\n%s", got)
	}
}

// TestPageMatchesRecordedResults: the table in docs/reliability.md is the
// one `make docs` writes from the committed results.
func TestPageMatchesRecordedResults(t *testing.T) {
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := faultreport.Write(filepath.Join(root, faultreport.Path), filepath.Join(root, "docs", "reliability.md"), true); err != nil {
		t.Fatal(err)
	}
}
