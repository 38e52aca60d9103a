package reconcile_test

import (
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
)

// TestScriptsDeclareTheirKeys runs the package's tests on a Redis of their
// own under MONITOR and fails for every key a script touched without
// declaring it in KEYS (Redis Cluster routes a script by its KEYS): the
// payment store's scripts and the delay queue's, as the reconciler runs
// them.
func TestScriptsDeclareTheirKeys(t *testing.T) {
	scriptkeys.CheckPackage[scriptkeys.Function](t, nil, "^Test")
}
