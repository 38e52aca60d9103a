package testenv_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// The ports of one stack are picked one after another before any service
// binds them; none may be handed out twice.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p := testenv.FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
