package paystore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
)

// TestScriptsDeclareTheirKeys runs the package's tests on a Redis of their
// own under MONITOR and fails for every key a script touched without
// declaring it in KEYS (Redis Cluster routes a script by its KEYS) and for
// every script the tests never ran.
func TestScriptsDeclareTheirKeys(t *testing.T) {
	scriptkeys.CheckPackage(t, map[string]*redis.Script{
		"create": createScript, "step": stepScript, "paid": paidScript, "closed": closedScript,
		"untrack": untrackScript, "next": nextScript, "claimCreating": claimCreatingScript,
	}, "^Test")
}

// TestScriptsNameTheirKeys fails for every key a script addresses by its
// position (KEYS[n]) outside the lines that bind the keys to names.
func TestScriptsNameTheirKeys(t *testing.T) {
	scriptkeys.CheckNames(t)
}
