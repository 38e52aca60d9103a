package chaos_test

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// minReplicas is min-replicas-to-write of the Sentinel group's servers:
// every replica (2). With 1, a SENTINEL FAILOVER loses the writes the old
// primary acknowledges while the replica not promoted still follows it
// (ORDERFLOW_CHAOS_MIN_REPLICAS=1 shows them).
var minReplicas = envOr("ORDERFLOW_CHAOS_MIN_REPLICAS", "2")

// multiNodeScenarios run the stack on replicated engines: Redis behind
// Sentinel (a primary, two replicas, three Sentinels).
func multiNodeScenarios() []scenario {
	return []scenario{
		sentinelFailover("redis sentinel failover", true, func(ctx context.Context, r *run, g *testenv.SentinelGroup) {
			now, err := g.Failover(ctx)
			if err != nil {
				r.t.Fatal(err)
			}
			r.note("SENTINEL FAILOVER: primary now %s", now)
		}),
		sentinelFailover("redis primary kill -9 (sentinel promotes)", false, func(ctx context.Context, r *run, g *testenv.SentinelGroup) {
			old, err := g.Primary(ctx)
			if err != nil {
				r.t.Fatal(err)
			}
			srv := g.Server(old)
			srv.Kill(r.t)
			now, err := g.AwaitPrimaryOtherThan(ctx, old)
			if err != nil {
				r.t.Fatal(err)
			}
			r.note("primary %s killed; sentinels promoted %s", old, now)
			srv.Start(r.t) // it rejoins as a replica of the new primary
		}),
	}
}

// sentinelFailover runs the stack with ORDERFLOW_REDIS_SENTINEL_ADDRS and
// _MASTER set, against a Sentinel group of the scenario's own, and moves
// the primary under load with fault. Writes the old primary acknowledged
// but never replicated are lost with it; the repair sweeper (grace 20 s)
// republishes or fails the tasks they belonged to.
func sentinelFailover(name string, short bool, fault func(ctx context.Context, r *run, g *testenv.SentinelGroup)) scenario {
	var g *testenv.SentinelGroup
	return scenario{
		name: name, short: short,
		setup: func(su *suite, o *stacktest.Options) {
			g = testenv.StartSentinelGroup(su.current, "orderflow", 2, 3, "--min-replicas-to-write", minReplicas)
			o.Env["ORDERFLOW_REDIS_SENTINEL_ADDRS"] = strings.Join(g.Sentinels, ",")
			o.Env["ORDERFLOW_REDIS_SENTINEL_MASTER"] = g.Master
			o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_GATEWAY_REPAIR_GRACE"] = "20s"
			su.primary = func() string {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				addr, err := g.Primary(ctx)
				if err != nil {
					su.current.Logf("sentinel: %v", err)
				}
				return addr
			}
		},
		fault: func(r *run) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			fault(ctx, r, g)
		},
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
