package benchrec

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// EnvChild names the role a test binary was started for by StartChild.
const EnvChild = "ORDERFLOW_BENCH_CHILD"

// childPrefix starts the line a child prints its answer on.
const childPrefix = "benchrec-child: "

// ChildRole is the role StartChild started this process for; empty in a
// normal run. A test that serves a role skips unless ChildRole names it.
func ChildRole() string { return os.Getenv(EnvChild) }

// ChildArgs decodes the arguments StartChild passed to this process into
// v.
func ChildArgs(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal([]byte(os.Getenv(EnvChild+"_ARGS")), v); err != nil {
		tb.Fatalf("child arguments: %v", err)
	}
}

// Answer prints the child's answer (JSON) for StartChild to read.
func Answer(tb testing.TB, v any) {
	tb.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Printf("\n%s%s\n", childPrefix, data)
}

// EnvProfile, when set to a directory, makes a serving child (Serve)
// write a CPU profile (cpu-<role>.pprof) and a block profile
// (block-<role>.pprof) of its whole life there, e.g. the gateway of a
// pinned benchmark: a -cpuprofile of the test binary profiles only the
// load generator.
const EnvProfile = "ORDERFLOW_BENCH_PROFILE"

// Serve prints the child's answer and blocks until the parent is done with
// it (its standard input closes).
func Serve(tb testing.TB, answer any) {
	tb.Helper()
	stop := profile(tb)
	Answer(tb, answer)
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
}

// profile starts the CPU and block profiles EnvProfile asks for; the
// returned func writes them.
func profile(tb testing.TB) (stop func()) {
	dir := os.Getenv(EnvProfile)
	if dir == "" {
		return func() {}
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu-"+ChildRole()+".pprof"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		tb.Fatal(err)
	}
	runtime.SetBlockProfileRate(10_000) // one sample per 10 µs blocked
	return func() {
		pprof.StopCPUProfile()
		_ = cpu.Close()
		f, err := os.Create(filepath.Join(dir, "block-"+ChildRole()+".pprof"))
		if err != nil {
			tb.Error(err)
			return
		}
		defer f.Close()
		if err := pprof.Lookup("block").WriteTo(f, 0); err != nil {
			tb.Error(err)
		}
	}
}

// Child is a copy of this test binary started by StartChild.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	Pid   int
}

// StartChild runs this test binary's test named test as a separate
// process for role, with args (JSON) readable by ChildArgs, on cpus (a
// taskset CPU list; all CPUs when empty). It waits for the child's Answer,
// decodes it into answer, and stops the child when tb ends. Figures are
// recorded by the parent only.
func StartChild(tb testing.TB, test, role string, cpus string, args, answer any) *Child {
	tb.Helper()
	argData, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmdArgs := []string{exe, "-test.run", "^" + test + "$", "-test.count=1", "-test.v=false", "-test.timeout=0"}
	if cpus != "" {
		cmdArgs = append([]string{"taskset", "-c", cpus}, cmdArgs...)
	}
	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Env = append(os.Environ(), EnvChild+"="+role, EnvChild+"_ARGS="+string(argData), EnvOut+"=")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s child: %v", role, err)
	}
	c := &Child{cmd: cmd, stdin: stdin, Pid: cmd.Process.Pid}
	tb.Cleanup(c.stop)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), childPrefix); ok {
				lines <- rest
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			c.stop()
			tb.Fatalf("%s child exited without an answer: %v", role, cmd.ProcessState)
		}
		if err := json.Unmarshal([]byte(line), answer); err != nil {
			tb.Fatalf("%s child answer %q: %v", role, line, err)
		}
	case <-time.After(2 * time.Minute):
		c.stop()
		tb.Fatalf("%s child gave no answer in 2 minutes", role)
	}
	return c
}

// stop closes the child's standard input and waits for it to exit,
// killing it after 20 s.
func (c *Child) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}
