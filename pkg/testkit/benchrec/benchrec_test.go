package benchrec

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestRecordAppendsCompletedFigures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "figures.jsonl")
	t.Setenv(EnvOut, path)
	Record(t, Figure{Group: "status", Name: "REST GET", Params: "clients=16", Value: 900, Unit: "ops/s",
		Baseline: &Baseline{Name: "net/http floor", Value: 1000}, Goals: []Goal{AtLeast("ratio", 0.8)}, Pinned: true})
	Record(t, Figure{Group: "pickup", Name: "p99", Value: 7, Unit: "ms", Better: Lower,
		Baseline: &Baseline{Name: "bare", Value: 5}, Goals: []Goal{Below("value", 5), AtMost("ratio", 1.2)}})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	figs, err := ReadFigures(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 2 {
		t.Fatalf("read %d figures, want 2", len(figs))
	}
	s := figs[0]
	if s.Ratio != 0.9 || s.Met == nil || !*s.Met || !s.Pinned || s.Bench != t.Name() || s.Time.IsZero() {
		t.Errorf("status figure = %+v, want ratio 0.9, met, pinned, bench and time set", s)
	}
	p := figs[1]
	if p.Ratio != 1.4 || p.Met == nil || *p.Met {
		t.Errorf("pickup figure ratio %v met %v, want 1.4 and not met", p.Ratio, p.Met)
	}
	if p.Key() != "pickup / p99" || s.Key() != "status / REST GET [clients=16] (pinned)" {
		t.Errorf("keys %q %q", p.Key(), s.Key())
	}
}

func TestReadFiguresKeepsTheLastOfAKey(t *testing.T) {
	in := `{"group":"g","name":"n","value":1,"unit":"ms"}
{"group":"g","name":"n","value":2,"unit":"ms"}
{"group":"g","name":"n","value":3,"unit":"ms","pinned":true}
`
	figs, err := ReadFigures(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 2 || figs[0].Value != 2 || figs[1].Value != 3 {
		t.Fatalf("figures = %+v, want the second unpinned and the pinned one", figs)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		f    Figure
		want string
	}{
		{Figure{Name: "n", Unit: "ms"}, "group"},
		{Figure{Group: "g", Unit: "ms"}, "name"},
		{Figure{Group: "g", Name: "n"}, "unit"},
		{Figure{Group: "g", Name: "n", Unit: "ms", Goals: []Goal{AtLeast("ratio", 1)}}, "baseline"},
		{Figure{Group: "g", Name: "n", Unit: "ms", Goals: []Goal{{Of: "speed", Op: ">=", Target: 1}}}, "goal of"},
		{Figure{Group: "g", Name: "n", Unit: "ms", Better: "up"}, "better"},
	} {
		err := c.f.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", c.f, err, c.want)
		}
	}
	if _, err := ReadFigures(strings.NewReader(`{"group":"g","value":1,"unit":"ms"}`)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("ReadFigures of a figure without a name = %v, want an error at line 1", err)
	}
}

func TestMeasureCountsOpsErrorsAndSlices(t *testing.T) {
	n := 0
	r := Measure(1, 400*time.Millisecond, func(int) error {
		n++
		time.Sleep(time.Millisecond)
		if n%10 == 0 {
			return errors.New("every tenth fails")
		}
		return nil
	})
	if r.Ops == 0 || r.Errors == 0 || r.FirstError == nil {
		t.Fatalf("result %+v: want ops, errors and the first error", r)
	}
	if int64(len(r.Latencies)) != r.Ops {
		t.Errorf("%d latencies for %d ops", len(r.Latencies), r.Ops)
	}
	if len(r.SliceRates) != Slices {
		t.Fatalf("%d slice rates, want %d", len(r.SliceRates), Slices)
	}
	var sum float64
	for _, s := range r.SliceRates {
		sum += s * (400 * time.Millisecond / Slices).Seconds()
	}
	if int64(sum+0.5) != r.Ops {
		t.Errorf("slices add up to %v ops, want %d", sum, r.Ops)
	}
	if r.Quantile(0.5) < time.Millisecond {
		t.Errorf("median latency %v, want at least the 1 ms sleep", r.Quantile(0.5))
	}
}

func TestDist(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := Dist(ds, "ms")
	if len(d) != len(DistQuantiles) || d[0].V != 1 || d[len(d)-1].V != 100 || d[3].Q != 0.5 || d[3].V != 51 {
		t.Fatalf("Dist = %v", d)
	}
}

func TestPinning(t *testing.T) {
	t.Setenv(EnvPin, "")
	if _, ok := Pinning(); ok {
		t.Error("pinning without ORDERFLOW_BENCH_PIN")
	}
	t.Setenv(EnvPin, "0:1")
	if p, ok := Pinning(); !ok || p.Client != "0" || p.Server != "1" {
		t.Errorf("Pinning() = %+v %v, want client 0 server 1", p, ok)
	}
	t.Setenv(EnvPin, "0")
	if _, ok := Pinning(); ok {
		t.Error("pinning from a value without a server list")
	}
}

func TestPinProcessPinsEveryThread(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	cpu := "0"
	if runtime.NumCPU() > 1 {
		cpu = "1"
	}
	if err := PinProcess(cmd.Process.Pid, cpu); err != nil {
		t.Fatal(err)
	}
	got, err := Affinity(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != cpu {
		t.Errorf("affinity after PinProcess(%s) = %q", cpu, got)
	}
	if err := PinProcess(cmd.Process.Pid, "not-a-cpu"); err == nil {
		t.Error("PinProcess accepted a bad CPU list")
	}
}

func TestMarkdownAndPage(t *testing.T) {
	met := true
	rep := &Report{Meta: Meta{Time: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), CPUs: 2, CPUModel: "cpu", LoadAvg: "1 2 3", Pin: "0:1"},
		Figures: []Figure{{Group: "status", Name: "REST | GET", Params: "clients=1", Value: 1234.6, Unit: "ops/s", Pinned: true,
			Baseline: &Baseline{Name: "floor", Value: 1500}, Ratio: 0.823, Goals: []Goal{AtLeast("ratio", 0.8)}, Met: &met}}}
	md := rep.Markdown()
	for _, want := range []string{"CPU 0", "CPU 1", `status: REST \| GET`, "clients=1, pinned", "1,235 ops/s", "floor 1,500 ops/s", "0.82", "ratio ≥ 0.8", "| yes |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	page := rep.Page()
	for _, want := range []string{PageHeader, "## Current run", md, "## Goals", "1 of the 1 figures with a goal met it",
		"| status: REST \\| GET | clients=1, pinned | ratio ≥ 0.8 | 1,235 ops/s | 0.82 | yes |",
		"## Baselines", "| floor | status: REST \\| GET |"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "client on CPU 0, server on CPU 1 (taskset)") || !strings.Contains(buf.String(), "1,235 ops/s") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1234567: "1,234,567", -4321: "-4,321", 512: "512", 12.34: "12.3", 1.234: "1.23", 0.01234: "0.0123"} {
		if got := FormatNumber(v); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestStartChildRunsTheRoleOnItsCPUs(t *testing.T) {
	if ChildRole() == "echo" {
		var args struct{ N int }
		ChildArgs(t, &args)
		cpus, err := Affinity(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		Serve(t, map[string]any{"double": 2 * args.N, "cpus": cpus, "out": os.Getenv(EnvOut)})
		return
	}
	if ChildRole() != "" {
		t.Skip("another role")
	}
	t.Setenv(EnvOut, filepath.Join(t.TempDir(), "figures.jsonl"))
	var ans struct {
		Double int
		CPUs   string
		Out    string
	}
	c := StartChild(t, "TestStartChildRunsTheRoleOnItsCPUs", "echo", "0", map[string]int{"n": 21}, &ans)
	if ans.Double != 42 || ans.CPUs != "0" || ans.Out != "" {
		t.Errorf("child answered %+v, want double 42 on CPU 0 and no figures file", ans)
	}
	c.stop()
	if c.cmd.ProcessState == nil || !c.cmd.ProcessState.Exited() {
		t.Errorf("child still running after stop: %v", c.cmd.ProcessState)
	}
}

func TestRoundsReadsTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
	}{{"", 5}, {"1", 1}, {"7", 7}, {"0", 5}, {"-2", 5}, {"x", 5}} {
		t.Setenv(EnvRounds, c.env)
		if got := Rounds(5); got != c.want {
			t.Errorf("Rounds(5) with %s=%q = %d, want %d", EnvRounds, c.env, got, c.want)
		}
	}
}
