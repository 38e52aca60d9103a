package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond (a test's observation) every 5 ms until it holds,
// and fails t when within does not see it hold.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
