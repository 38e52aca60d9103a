package slotpool

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// envHolderPool names the pool TestHolderProcess joins when the test
// binary is re-executed as a holder process.
const envHolderPool = "ORDERFLOW_SLOTPOOL_TEST_HOLDER_POOL"

// TestHolderProcess is not a test of its own: TestKilledHolderIsReclaimed
// re-executes the test binary to run it as a separate worker process that
// acquires a slot, keeps it alive and waits to be killed.
func TestHolderProcess(t *testing.T) {
	name := os.Getenv(envHolderPool)
	if name == "" {
		t.Skip("runs only as the holder process of TestKilledHolderIsReclaimed")
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	p := New(rdb, Options{Name: name, Capacity: 1, Lease: time.Second})
	s, err := p.Acquire(context.Background(), "killed-job")
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	fmt.Println("HELD", s.Token)
	s.KeepAlive(context.Background(), func() { os.Exit(3) })
}

// startProcess re-executes the test binary to run test in a process of
// its own that joins pool (named in the variable env), and returns it with
// the first line it prints; the process is killed when t ends.
func startProcess(ctx context.Context, t *testing.T, test, env, pool string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+pool)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s process: %v (said %q)", test, err, line)
	}
	return cmd, line
}

func TestKilledHolderIsReclaimed(t *testing.T) {
	const lease = time.Second
	pools := replicas(t, 1, Options{Capacity: 1, Lease: lease, CheckInterval: 200 * time.Millisecond})
	p := pools[0]

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, line := startProcess(ctx, t, "TestHolderProcess", envHolderPool, p.Name())
	if !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("holder process said %q; want HELD <token>", line)
	}
	token := strings.TrimSpace(strings.TrimPrefix(line, "HELD "))

	runJanitors(t, p)
	// The live holder keeps its slot past its lease.
	time.Sleep(2 * lease)
	s := mustSnapshot(t, p)
	if len(s.Holders) != 1 || s.Holders[0].Token != token || s.Holders[0].JobID != "killed-job" {
		t.Fatalf("Snapshot() with a live holder process = %+v, want killed-job holding %s", s.Holders, token)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	// The job stays recorded while its lease runs out.
	if s := mustSnapshot(t, p); len(s.Holders) != 1 || s.Holders[0].JobID != "killed-job" {
		t.Errorf("Snapshot() right after the kill = %+v, want killed-job still recorded", s.Holders)
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, lease+5*time.Second)
	defer cancelWait()
	next, err := p.Acquire(waitCtx, "next")
	if err != nil {
		t.Fatalf("Acquire after the holder process was killed = %v", err)
	}
	t.Logf("slot of the killed holder granted %v after SIGKILL (lease %v)", time.Since(killed).Round(time.Millisecond), lease)
	assertReclaimed(t, p, "killed-job")
	if err := next.Release(ctx, Completed, ""); err != nil {
		t.Fatal(err)
	}
}
