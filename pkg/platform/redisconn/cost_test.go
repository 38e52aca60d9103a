package redisconn_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestRedisCountsOnlyUnderAStep(t *testing.T) {
	_, prefix := testenv.Redis(t)
	cfg, err := config.LoadEnv[redisconn.Config](map[string]string{"ORDERFLOW_REDIS_ADDR": testenv.RedisAddr()})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redisconn.New(cfg)
	defer rdb.Close()
	step := prefix
	ctx := cost.WithStep(context.Background(), step)
	script := redis.NewScript("-- " + prefix + "\nreturn redis.call('SET', KEYS[1], ARGV[1])")

	got := cost.During(step, func() {
		if err := rdb.Set(ctx, prefix+":a", "12345", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// A pipeline is one round trip of three commands; a transaction's
		// MULTI and EXEC are not commands of their own.
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, prefix+":a")
			p.Incr(ctx, prefix+":n")
			p.Expire(ctx, prefix+":n", 0)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, prefix+":n")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// The script's first run is EVALSHA, refused NOSCRIPT, then EVAL
		// (the prefix makes it a script Redis has not seen).
		if err := script.Run(ctx, rdb, []string{prefix + ":s"}, "v").Err(); err != nil {
			t.Fatal(err)
		}
		// Work under a context without a step is not counted.
		if err := rdb.Set(context.Background(), prefix+":b", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if got[cost.RedisRoundTrips] != 5 || got[cost.RedisCommands] != 7 || got[cost.RedisScripts] != 2 {
		t.Errorf("counts = %v, want 5 round trips, 7 commands, 2 script calls", got)
	}
	if min := int64(len("set") + len(prefix+":a") + len("12345")); got[cost.RedisBytes] < min {
		t.Errorf("bytes sent = %d, want at least the SET's %d", got[cost.RedisBytes], min)
	}
}
