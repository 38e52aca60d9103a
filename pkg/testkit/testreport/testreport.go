// Package testreport reads the event stream of `go test -json` and prints
// what a reader of `make test` needs: build errors, the output of failing
// tests, one result line per package, and at the end the slowest
// packages. `make test` saves the stream to .cache/test.json.
package testreport

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Event is one line of `go test -json` (cmd/test2json).
type Event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// Package is one tested package's result.
type Package struct {
	// Name is the package's import path.
	Name string
	// Result is pass, fail or skip.
	Result string
	// Elapsed is the package's test run as go test timed it.
	Elapsed time.Duration
}

// Printer turns events into text as they come (Add) and keeps the
// package results for Slowest.
type Printer struct {
	w io.Writer
	// held is each running top-level test's output, by package and test,
	// printed only when the test fails.
	held     map[string]map[string][]string
	packages []Package
}

// NewPrinter returns a Printer writing to w.
func NewPrinter(w io.Writer) *Printer {
	return &Printer{w: w, held: map[string]map[string][]string{}}
}

// Add prints what e shows a reader: a package's own lines (its result
// line, panics and timeouts), build output, and the held output of a
// top-level test when it fails.
func (p *Printer) Add(e Event) {
	switch {
	case e.Action == "build-output":
		fmt.Fprint(p.w, e.Output)
	case e.Test == "" && e.Action == "output":
		if e.Output != "PASS\n" && e.Output != "FAIL\n" {
			fmt.Fprint(p.w, e.Output)
		}
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		p.packages = append(p.packages, Package{Name: e.Package, Result: e.Action, Elapsed: seconds(e.Elapsed)})
		// Output of tests that never ended (the binary died) is shown
		// with a failed package.
		if e.Action == "fail" {
			for _, lines := range p.held[e.Package] {
				fmt.Fprint(p.w, strings.Join(lines, ""))
			}
		}
		delete(p.held, e.Package)
	case e.Test != "":
		top, _, _ := strings.Cut(e.Test, "/")
		switch {
		case e.Action == "output":
			if p.held[e.Package] == nil {
				p.held[e.Package] = map[string][]string{}
			}
			p.held[e.Package][top] = append(p.held[e.Package][top], e.Output)
		case e.Test == top && e.Action == "fail":
			fmt.Fprint(p.w, strings.Join(p.held[e.Package][top], ""))
			delete(p.held[e.Package], top)
		case e.Test == top && (e.Action == "pass" || e.Action == "skip"):
			delete(p.held[e.Package], top)
		}
	}
}

// Slowest returns the n packages whose tests took longest, slowest first.
func (p *Printer) Slowest(n int) []Package {
	s := slices.Clone(p.packages)
	slices.SortStableFunc(s, func(a, b Package) int { return cmp.Compare(b.Elapsed, a.Elapsed) })
	return s[:min(n, len(s))]
}

// PrintSlowest writes the table of the n slowest packages.
func (p *Printer) PrintSlowest(n int) {
	s := p.Slowest(n)
	if len(s) == 0 {
		return
	}
	fmt.Fprintf(p.w, "slowest %d packages (of %d):\n", len(s), len(p.packages))
	for _, pk := range s {
		fmt.Fprintf(p.w, "  %8.1fs  %-4s  %s\n", pk.Elapsed.Seconds(), pk.Result, pk.Name)
	}
}

// Read feeds every event of the stream r to p; a line that is not an
// event (go test's own messages) is printed as it is.
func (p *Printer) Read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(p.w, sc.Text())
			continue
		}
		p.Add(e)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read go test -json: %w", err)
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
