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

// A port handed out lies below the kernel's ephemeral range: an outgoing
// connection (a Redis or RabbitMQ client of any test) takes its source
// port from that range, and one that took a port between FreePort and the
// service's bind made the service exit with "address already in use".
func TestFreePortIsNoOutgoingConnectionsPort(t *testing.T) {
	low := testenv.EphemeralLow()
	for range 200 {
		if p := testenv.FreePort(t); p >= low || p < 1024 {
			t.Fatalf("FreePort() = %d, want a port from 1024 below the ephemeral range (from %d)", p, low)
		}
	}
}
