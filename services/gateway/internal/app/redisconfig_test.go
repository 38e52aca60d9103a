package app

import (
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// TestConfigRefusesSentinelWithoutMaster checks that the gateway validates
// its Redis configuration at start.
func TestConfigRefusesSentinelWithoutMaster(t *testing.T) {
	_, err := config.LoadEnv[Config](map[string]string{
		config.EnvVar:                    string(config.Development),
		"ORDERFLOW_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379",
	})
	if err == nil || !strings.Contains(err.Error(), "ORDERFLOW_REDIS_SENTINEL_MASTER") {
		t.Errorf("LoadEnv(sentinel addrs, no master) = %v, want an error naming ORDERFLOW_REDIS_SENTINEL_MASTER", err)
	}
}
