package taskstore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/scriptkeys"
)

// TestScriptsDeclareTheirKeys runs the package's tests on a Redis of their
// own under MONITOR and fails for every key a script touched without
// declaring it in KEYS (Redis Cluster routes a script by its KEYS).
// createScript runs on a Redis Cluster only (TestStoreOnRedisCluster); its
// code is createEntriesScript's parts on the same key names, which the
// check vouches for.
func TestScriptsDeclareTheirKeys(t *testing.T) {
	scriptkeys.CheckPackage(t, map[string]*redis.Script{
		"recordDead": recordDeadScript, "forgetDead": forgetDeadScript, "reopen": reopenScript,
		"outboxAdd": outboxAddScript, "claim": claimScript, "savePlan": savePlanScript,
		"recordOutcome": recordOutcomeScript, "inspect": inspectScript, "createEntries": createEntriesScript,
		"rollback": rollbackScript, "finish": finishScript, "holdClaim": holdClaimScript,
		"status": statusScript, "leaseStatus": leaseStatusScript,
	}, "^Test")
}

// TestScriptsNameTheirKeys fails for every key a script addresses by its
// position (KEYS[n]) outside the lines that bind the keys to names.
func TestScriptsNameTheirKeys(t *testing.T) {
	scriptkeys.CheckNames(t)
}
