package eventrate

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
)

// TestScriptsDeclareTheirKeys runs the package's tests on a Redis of their
// own under MONITOR and fails for every key a script touched without
// declaring it in KEYS (Redis Cluster routes a script by its KEYS).
func TestScriptsDeclareTheirKeys(t *testing.T) {
	scriptkeys.CheckPackage(t, map[string]*redis.Script{"add": addScript, "read": readScript, "observe": observeScript}, "^Test")
}

// TestScriptsNameTheirKeys fails for every key a script addresses by its
// position (KEYS[n]) outside the lines that bind the keys to names.
func TestScriptsNameTheirKeys(t *testing.T) {
	scriptkeys.CheckNames(t)
}
