package redisconn_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestConfigSentinel(t *testing.T) {
	cfg, err := config.LoadEnv[redisconn.Config](map[string]string{
		"ORDERFLOW_REDIS_SENTINEL_ADDRS":    "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379",
		"ORDERFLOW_REDIS_SENTINEL_MASTER":   "orderflow",
		"ORDERFLOW_REDIS_SENTINEL_PASSWORD": "sentinel-secret",
		"ORDERFLOW_REDIS_USERNAME":          "orderflow-app",
	})
	if err != nil {
		t.Fatalf("LoadEnv(sentinel) = %v", err)
	}
	want := []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"}
	if !slices.Equal(cfg.SentinelAddrs, want) || cfg.SentinelMaster != "orderflow" ||
		cfg.SentinelPassword.Reveal() != "sentinel-secret" || cfg.Username != "orderflow-app" {
		t.Errorf("LoadEnv(sentinel) = %+v, want addrs %v, master orderflow, the password and user", cfg, want)
	}
	if got := cfg.SentinelPassword.String(); strings.Contains(got, "sentinel-secret") {
		t.Errorf("SentinelPassword prints %q, want it masked", got)
	}
}

func TestConfigRefusesIncompleteSentinel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		names string // the variable the error must name
	}{
		{"addrs without master", map[string]string{"ORDERFLOW_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379"}, "ORDERFLOW_REDIS_SENTINEL_MASTER"},
		{"master without addrs", map[string]string{"ORDERFLOW_REDIS_SENTINEL_MASTER": "orderflow"}, "ORDERFLOW_REDIS_SENTINEL_ADDRS"},
		{"empty entry", map[string]string{"ORDERFLOW_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379,,127.0.0.1:26380", "ORDERFLOW_REDIS_SENTINEL_MASTER": "orderflow"}, "ORDERFLOW_REDIS_SENTINEL_ADDRS"},
		{"with cluster flag", map[string]string{"ORDERFLOW_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379", "ORDERFLOW_REDIS_SENTINEL_MASTER": "orderflow", "ORDERFLOW_REDIS_CLUSTER": "true"}, "ORDERFLOW_REDIS_CLUSTER"},
		{"with cluster seeds", map[string]string{"ORDERFLOW_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379", "ORDERFLOW_REDIS_SENTINEL_MASTER": "orderflow", "ORDERFLOW_REDIS_ADDR": "127.0.0.1:7000,127.0.0.1:7001"}, "ORDERFLOW_REDIS_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.LoadEnv[redisconn.Config](tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.names) {
				t.Errorf("LoadEnv(%v) = %v, want an error naming %s", tc.env, err, tc.names)
			}
		})
	}
	if _, err := config.LoadEnv[redisconn.Config](nil); err != nil {
		t.Errorf("LoadEnv(defaults) = %v, want a single-server configuration", err)
	}
}

// TestRefusedConnectionFailsFast: a Redis that refuses connections (a
// killed primary before Sentinel names another) fails a command within
// the client's retries and their backoff, not after five dials per retry.
func TestRefusedConnectionFailsFast(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // nothing listens
	cfg, err := config.LoadEnv[redisconn.Config](map[string]string{"ORDERFLOW_REDIS_ADDR": addr})
	if err != nil {
		t.Fatal(err)
	}
	c := redisconn.New(cfg)
	defer c.Close()
	start := time.Now()
	err = c.Set(context.Background(), "k", "v", 0).Err()
	if d := time.Since(start); err == nil || d > time.Second {
		t.Errorf("SET with the connection refused = %v after %s, want an error within 1s", err, d.Round(time.Millisecond))
	}
}

// TestIsCluster: the mode IsCluster reports is the one New builds a
// client for (a *redis.ClusterClient exactly when it is true).
func TestIsCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  redisconn.Config
		want bool
	}{
		{"one address", redisconn.Config{Addr: "127.0.0.1:6379"}, false},
		{"one address, trailing comma", redisconn.Config{Addr: "127.0.0.1:6379, "}, false},
		{"Cluster set", redisconn.Config{Addr: "127.0.0.1:7000", Cluster: true}, true},
		{"several addresses", redisconn.Config{Addr: "127.0.0.1:7000,127.0.0.1:7001"}, true},
		{"Sentinel", redisconn.Config{SentinelAddrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.IsCluster(); got != tc.want {
				t.Errorf("IsCluster() = %v, want %v", got, tc.want)
			}
			c := redisconn.New(tc.cfg)
			defer c.Close()
			if _, ok := c.(*redis.ClusterClient); ok != tc.want {
				t.Errorf("New() is a %T, want a cluster client: %v", c, tc.want)
			}
		})
	}
}
