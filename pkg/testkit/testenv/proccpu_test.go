package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestGroupCPU starts a shell of a process group of its own whose child
// spins, and checks that GroupCPU counts the child's CPU time (the
// shell itself only waits), that it refuses process group 0,
// and that ProcessCPU reads this process's own CPU time.
func TestGroupCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sh -c 'while :; do :; done' & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	killed := false
	kill := func() {
		if !killed {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			_ = cmd.Wait()
			killed = true
		}
	}
	defer kill()
	first, err := GroupCPU(pgid)
	if err != nil {
		t.Fatalf("GroupCPU(%d): %v", pgid, err)
	}
	// The spinning child gets some CPU even on a busy machine; wait
	// until 0.2 s more have been counted (bounded, not a speed check).
	deadline := time.Now().Add(time.Minute)
	for {
		now, err := GroupCPU(pgid)
		if err != nil {
			t.Fatalf("GroupCPU(%d): %v", pgid, err)
		}
		if now-first >= 0.2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GroupCPU(%d) went from %.2f to %.2f in a minute of a spinning child, want +0.2 s", pgid, first, now)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if self, err := ProcessCPU(os.Getpid()); err != nil || self <= 0 {
		t.Errorf("ProcessCPU(self) = %.2f, %v; want > 0", self, err)
	}
	if v, err := GroupCPU(0); err == nil {
		t.Errorf("GroupCPU(0) = %.2f, want an error", v)
	}
}
