// Command benchreport turns the figures `make bench` recorded into
// bench/latest.json, a self-contained HTML report and the printed table;
// it also writes docs/benchmarks.md from the JSON and compares two runs.
//
//	benchreport build   -in bench/figures.jsonl -dir bench [-pin 0:1]
//	benchreport docs    -json bench/latest.json [-levers bench/levers.json] -out docs/benchmarks.md [-check]
//	benchreport compare OLD.json NEW.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: benchreport build, docs or compare")
	}
	switch args[0] {
	case "build":
		return build(args[1:], stdout)
	case "docs":
		return docs(args[1:], stdout)
	case "compare":
		return compare(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q: want build, docs or compare", args[0])
}

// build reads the recorded figures and writes latest.json and report.html
// into dir, then prints the table.
func build(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	in := fs.String("in", "bench/figures.jsonl", "figures recorded by the benchmarks (JSON lines)")
	dir := fs.String("dir", "bench", "where latest.json and report.html go")
	pin := fs.String("pin", os.Getenv(benchrec.EnvPin), "the pinned pass's CLIENT:SERVER CPU lists")
	leversPath := fs.String("levers", "", "a JSON object of the reasons and next levers of goals not met, by \"group: name\"")
	if err := fs.Parse(args); err != nil {
		return err
	}
	levers, err := readLevers(*leversPath)
	if err != nil {
		return err
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	figs, err := benchrec.ReadFigures(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	if len(figs) == 0 {
		return fmt.Errorf("%s: no figures recorded", *in)
	}
	rep := &benchrec.Report{Meta: meta(*pin), Figures: figs, Levers: levers}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "latest.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	html, err := renderHTML(rep)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, "report.html"), html, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", filepath.Join(*dir, "latest.json"), filepath.Join(*dir, "report.html"))
	return nil
}

// readLevers reads bench/levers.json (none for an empty path).
func readLevers(path string) (map[string]benchrec.Lever, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var levers map[string]benchrec.Lever
	if err := json.Unmarshal(data, &levers); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return levers, nil
}

// meta describes this machine and run.
func meta(pin string) benchrec.Meta {
	m := benchrec.Meta{Time: time.Now().UTC().Truncate(time.Second), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Pin: pin}
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			m.Commit += "-dirty"
		}
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// docs writes (or, with -check, checks) docs/benchmarks.md from the
// JSON.
func docs(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("docs", flag.ContinueOnError)
	jsonPath := fs.String("json", "bench/latest.json", "the run's figures")
	out := fs.String("out", "docs/benchmarks.md", "the page written")
	check := fs.Bool("check", false, "fail when the page differs from the JSON instead of writing it")
	leversPath := fs.String("levers", "", "the reasons and next levers of goals not met (bench/levers.json), in place of the run's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rep, err := benchrec.LoadReport(*jsonPath)
	if err != nil {
		return err
	}
	if *leversPath != "" {
		if rep.Levers, err = readLevers(*leversPath); err != nil {
			return err
		}
	}
	page := rep.Page()
	old, err := os.ReadFile(*out)
	if err == nil && string(old) == page {
		fmt.Fprintf(stdout, "%s matches %s\n", *out, *jsonPath)
		return nil
	}
	if *check {
		return fmt.Errorf("%s differs from %s: run make docs", *out, *jsonPath)
	}
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s written from %s\n", *out, *jsonPath)
	return nil
}
