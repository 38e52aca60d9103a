// Command benchreport turns the figures `make bench` recorded into
// bench/latest.json, a self-contained HTML report and the printed table;
// it also rewrites the README's benchmark table from the JSON and
// compares two runs.
//
//	benchreport build   -in bench/figures.jsonl -dir bench [-pin 0:1]
//	benchreport readme  -json bench/latest.json -readme README.md [-check]
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
		return errors.New("usage: benchreport build, readme or compare")
	}
	switch args[0] {
	case "build":
		return build(args[1:], stdout)
	case "readme":
		return readme(args[1:], stdout)
	case "compare":
		return compare(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q: want build, readme or compare", args[0])
}

// build reads the recorded figures and writes latest.json and report.html
// into dir, then prints the table.
func build(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	in := fs.String("in", "bench/figures.jsonl", "figures recorded by the benchmarks (JSON lines)")
	dir := fs.String("dir", "bench", "where latest.json and report.html go")
	pin := fs.String("pin", os.Getenv(benchrec.EnvPin), "the pinned pass's CLIENT:SERVER CPU lists")
	if err := fs.Parse(args); err != nil {
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
	rep := &benchrec.Report{Meta: meta(*pin), Figures: figs}
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

// readme rewrites (or, with -check, checks) the README's benchmark table
// from the JSON.
func readme(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("readme", flag.ContinueOnError)
	jsonPath := fs.String("json", "bench/latest.json", "the run's figures")
	readmePath := fs.String("readme", "README.md", "the README whose table is rewritten")
	check := fs.Bool("check", false, "fail when the README's table differs from the JSON instead of rewriting it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rep, err := benchrec.LoadReport(*jsonPath)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(*readmePath)
	if err != nil {
		return err
	}
	updated, err := benchrec.ReplaceTable(string(old), rep.Markdown())
	if err != nil {
		return fmt.Errorf("%s: %w", *readmePath, err)
	}
	if updated == string(old) {
		fmt.Fprintf(stdout, "%s: benchmark table matches %s\n", *readmePath, *jsonPath)
		return nil
	}
	if *check {
		return fmt.Errorf("%s: the benchmark table differs from %s; run `make bench-readme`", *readmePath, *jsonPath)
	}
	if err := os.WriteFile(*readmePath, []byte(updated), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: benchmark table rewritten from %s\n", *readmePath, *jsonPath)
	return nil
}
