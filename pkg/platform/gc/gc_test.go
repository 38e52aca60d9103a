package gc

import (
	"runtime/debug"
	"testing"
)

// TestTuneLeavesTheOperatorsGOGC: without GOGC the collector's target is
// Percent; with GOGC set it is left as the runtime read it.
func TestTuneLeavesTheOperatorsGOGC(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })

	t.Setenv("GOGC", "")
	if got := Tune(); got != Percent {
		t.Errorf("Tune() without GOGC = %d, want %d", got, Percent)
	}
	if cur := debug.SetGCPercent(Percent); cur != Percent {
		t.Errorf("GOGC after Tune() = %d, want %d", cur, Percent)
	}

	t.Setenv("GOGC", "50")
	debug.SetGCPercent(50) // as the runtime set it at start
	if got := Tune(); got != 50 {
		t.Errorf("Tune() with GOGC=50 = %d, want 50", got)
	}
	if cur := debug.SetGCPercent(50); cur != 50 {
		t.Errorf("GOGC after Tune() with GOGC=50 = %d, want 50", cur)
	}
}
