package inflight

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
)

// TestScriptsDeclareTheirKeys checks that each script touches only the
// keys it declares (see scriptkeys).
func TestScriptsDeclareTheirKeys(t *testing.T) {
	scriptkeys.CheckPackage(t, map[string]*redis.Script{"report": reportScript, "read": readScript}, "^Test")
}

// TestScriptsNameTheirKeys fails for every key a script addresses by its
// position (KEYS[n]) outside the lines that bind the keys to names.
func TestScriptsNameTheirKeys(t *testing.T) {
	scriptkeys.CheckNames(t)
}
