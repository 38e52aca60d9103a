package chaos_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/testkit/netfault"
	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// full reports whether the suite runs at full length (`make chaos`);
// `make test` runs every scenario in a shorter version.
func full() bool { return isFull }

// span is d in the full suite and short in `make test`.
func span(d, short time.Duration) time.Duration {
	if full() {
		return d
	}
	return short
}

// toxicTo puts a netfault.Toxic in front of a dependency ("redis" or "amqp")
// for the named services ("" for every process of the stack) and returns
// a function that yields it once the scenario runs.
func toxicTo(dep string, services ...string) (func(su *suite, o *stacktest.Options), func() *netfault.Toxic) {
	var tx *netfault.Toxic
	setup := func(su *suite, o *stacktest.Options) {
		var err error
		if tx, err = netfault.NewToxic(su.target(dep == "amqp")); err != nil {
			panic(err)
		}
		su.closers = append(su.closers, tx.Close)
		addr := via(tx.Addr(), dep == "amqp")
		if len(services) == 0 {
			if dep == "amqp" {
				o.AMQPURL = addr
			} else {
				o.RedisAddr = addr
			}
			return
		}
		envVar := map[string]string{"redis": "ORDERFLOW_REDIS_ADDR", "amqp": "ORDERFLOW_AMQP_URL"}[dep]
		for _, name := range services {
			if o.ServiceEnv[name] == nil {
				o.ServiceEnv[name] = map[string]string{}
			}
			o.ServiceEnv[name][envVar] = addr
		}
	}
	return setup, func() *netfault.Toxic { return tx }
}

// mustToxic fails the scenario on a proxy error.
func mustToxic(r *run, err error) {
	if err != nil {
		r.t.Fatalf("toxic proxy: %v", err)
	}
}

// newScenarios are the faults that reach the windows between two writes:
// a submission whose client leaves, confirms slower than the publish
// timeout, long Redis outages, a reconciler dying between storing and
// scheduling, shipments outliving their timeout, a replica losing Redis
// while its jobs outlive the slot lease, rolling restarts during a
// backlog and a Redis that comes back without its last second of writes.
func newScenarios() []scenario {
	return []scenario{clientGivesUp(), slowConfirms(), redisUnreachable(), redisDownWithDeadLetters(),
		reconcilerKilledMidCreate(), shipmentsOutliveTimeout(), redisBlockedPastSlotLease(), rollingRestart(),
		redisLosesLastSecond(), replayAfterResubmit(), pauseAcrossRestarts()}
}

// clientGivesUp sends hundreds of submissions whose clients give up
// after 10-400 ms while the broker's answers are slowed down, so many
// leave while their publish waits for its confirm.
func clientGivesUp() scenario {
	setup, toxic := toxicTo("amqp", stacktest.Gateway)
	return scenario{
		name: "client gives up mid-submit", short: true, setup: setup,
		fault: func(r *run) {
			mustToxic(r, toxic().Latency(300*time.Millisecond))
			n := 300
			if !full() {
				n = 100
			}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 30)
			for range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					c := &http.Client{Timeout: time.Duration(10+rand.IntN(390)) * time.Millisecond}
					r.l.submitVia(c)
				})
			}
			wg.Wait()
			toxic().Heal()
			r.note("%d submissions whose clients gave up after 10-400 ms, broker answers 300 ms late", n)
		},
	}
}

// slowConfirms slows the broker's answers to the gateway past its publish
// timeout for 15 s (5 s in `make test`): confirms arrive after the
// gateway stopped waiting.
func slowConfirms() scenario {
	setup, toxic := toxicTo("amqp", stacktest.Gateway)
	return scenario{
		name: "broker confirm slower than the publish timeout", short: true,
		setup: func(su *suite, o *stacktest.Options) {
			setup(su, o)
			o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_AMQP_PUBLISH_TIMEOUT"] = "1s"
		},
		fault: func(r *run) {
			mustToxic(r, toxic().Latency(1500*time.Millisecond))
			time.Sleep(span(15*time.Second, 5*time.Second))
			toxic().Heal()
		},
	}
}

// redisUnreachable blackholes Redis for every process: packets vanish,
// connections hang until their timeouts.
func redisUnreachable() scenario {
	setup, toxic := toxicTo("redis")
	return scenario{
		name: "redis unreachable", short: true, setup: setup,
		fault: func(r *run) {
			d := span(60*time.Second, 10*time.Second)
			mustToxic(r, toxic().Blackhole())
			time.Sleep(d)
			toxic().Heal()
			r.note("redis blackholed for %s", d)
		},
		check: func(r *run, res *result) {
			noneFailed10009(r, res, "a Redis outage must not fail healthy orders")
		},
	}
}

// redisDownWithDeadLetters blackholes Redis for the split-worker for 30 s
// (12 s in `make test`) and, while it is away, puts copies of the jobs of
// tasks still PROCESSING into the dead-letter queue (as jobs that ran out
// of deliveries would be); the dead-letter consumer must not drop them (a
// task left PROCESSING shows as stuck) and must not loop.
func redisDownWithDeadLetters() scenario {
	setup, toxic := toxicTo("redis", stacktest.SplitWorker)
	return scenario{
		name: "redis unreachable while the DLQ holds jobs", short: true, setup: setup,
		fault: func(r *run) {
			mustToxic(r, toxic().Blackhole())
			time.Sleep(span(5*time.Second, 3*time.Second))
			n := deadLetterProcessing(r, 50)
			peak := 0
			for range int(span(25*time.Second, 9*time.Second) / time.Second) {
				time.Sleep(time.Second)
				peak = max(peak, deadLettered(r))
			}
			toxic().Heal()
			r.note("%d jobs of PROCESSING tasks put in the dead-letter queue; it held up to %d during the outage", n, peak)
		},
	}
}

// deadLetterProcessing publishes to the dead-letter exchange the stored
// jobs of up to max tasks that are PROCESSING, read from Redis directly.
func deadLetterProcessing(r *run, limit int) int {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: r.su.redis.Addr})
	defer rdb.Close()
	conn, err := amqp.Dial(r.su.rabbit.URL())
	if err != nil {
		r.t.Fatalf("dial rabbitmq: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		r.t.Fatalf("channel: %v", err)
	}
	names := jobqueue.NewNames(r.s.Prefix())
	n := 0
	iter := rdb.Scan(ctx, 0, r.s.Prefix()+":{m:*}:task:*", 500).Iterator()
	for iter.Next(ctx) && n < limit {
		key := iter.Val()
		v, err := rdb.HMGet(ctx, key, "s", "j").Result()
		if err != nil || v[0] != "1" || v[1] == nil {
			continue
		}
		// <prefix>:{m:<member>}:task:<id>
		rest := strings.TrimPrefix(key, r.s.Prefix()+":{m:")
		member, id, ok := strings.Cut(rest, "}:task:")
		if !ok {
			continue
		}
		msg := jobqueue.Message(ctx, member, id, []byte(v[1].(string)))
		if err := ch.PublishWithContext(ctx, names.DLX, jobqueue.RoutingKey, false, false, msg); err != nil {
			r.t.Fatalf("publish to the dead-letter exchange: %v", err)
		}
		n++
	}
	return n
}

// deadLettered is the number of jobs in the stack's dead-letter queue.
func deadLettered(r *run) int {
	conn, err := amqp.Dial(r.su.rabbit.URL())
	if err != nil {
		return 0
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0
	}
	q, err := ch.QueueDeclarePassive(jobqueue.NewNames(r.s.Prefix()).DLQ, true, false, false, false, nil)
	if err != nil {
		return 0
	}
	return q.Messages
}

// reconcilerKilledMidCreate slows the reconciler's Redis round trips and
// kills it again and again while payments are created, so some die
// between storing a payment and scheduling its first check.
func reconcilerKilledMidCreate() scenario {
	setup, toxic := toxicTo("redis", stacktest.Reconciler)
	return scenario{
		name: "reconciler killed between storing and scheduling", short: true,
		setup: func(su *suite, o *stacktest.Options) {
			setup(su, o)
			o.ServiceEnv[stacktest.Reconciler]["ORDERFLOW_RECONCILE_REPAIR_GRACE"] = "3s"
		},
		fault: func(r *run) {
			// Round trips 60 ms slower widen the window between the store
			// and the schedule without misleading the reconciler's
			// estimate of Redis time by more than a millisecond or two.
			mustToxic(r, toxic().Latency(60*time.Millisecond))
			kills := 8
			if !full() {
				kills = 4
			}
			for range kills {
				time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
				r.s.Kill(stacktest.Reconciler)
				r.s.Start(stacktest.Reconciler)
			}
			toxic().Heal()
		},
		check: func(r *run, res *result) {
			r.note("payments whose check a repair scheduled: %d",
				countLines(r.s.LogPath(stacktest.Reconciler), r.faultStart, "whose creation stopped before scheduling"))
		},
	}
}

// shipmentsOutliveTimeout makes the fulfilment system's jobs run longer
// than the split-worker's shipment timeout for 10 s (4 s in `make test`):
// the slot of a shipment still running must not be handed out again.
func shipmentsOutliveTimeout() scenario {
	return scenario{
		name: "fulfilment jobs outlive the shipment timeout", short: true,
		setup: func(_ *suite, o *stacktest.Options) {
			o.ServiceEnv[stacktest.SplitWorker]["ORDERFLOW_SPLITWORKER_SHIPMENT_TIMEOUT"] = "1s"
		},
		fault: func(r *run) {
			slow := map[string]string{"ORDERFLOW_FULFILMENT_JOB_MIN": "1500ms", "ORDERFLOW_FULFILMENT_JOB_MAX": "2500ms"}
			restartWith(r, stacktest.Fulfilment, slow)
			time.Sleep(span(10*time.Second, 4*time.Second))
			restartWith(r, stacktest.Fulfilment, map[string]string{"ORDERFLOW_FULFILMENT_JOB_MIN": "200ms", "ORDERFLOW_FULFILMENT_JOB_MAX": "800ms"})
		},
	}
}

// redisBlockedPastSlotLease runs two split-workers, makes the fulfilment
// system's jobs run 12-14 s (longer than the 5 s slot lease) and then
// blackholes the first replica's Redis for 30 s (16 s in `make test`)
// while its jobs run; the other replica keeps Redis and waits for slots.
// The first replica's leases expire while its jobs go on at the
// fulfilment system: their slots must stay counted against N until those
// jobs may have ended, so the fulfilment system never sees more than N.
func redisBlockedPastSlotLease() scenario {
	setup, toxic := toxicTo("redis", stacktest.SplitWorker)
	return scenario{
		name: "splitworker's redis blocked past the slot lease mid-job", short: true,
		setup: func(su *suite, o *stacktest.Options) {
			o.Replicas = map[string]int{stacktest.SplitWorker: 2}
			setup(su, o)
			o.ServiceEnv[stacktest.SplitWorker]["ORDERFLOW_SPLITWORKER_JOB_MAX"] = "16s" // its jobs run up to 14 s
			o.ServiceEnv[stacktest.SplitWorker+"-2"] = map[string]string{"ORDERFLOW_REDIS_ADDR": su.redis.Addr}
		},
		fault: func(r *run) {
			restartWith(r, stacktest.Fulfilment, map[string]string{"ORDERFLOW_FULFILMENT_JOB_MIN": "12s", "ORDERFLOW_FULFILMENT_JOB_MAX": "14s"})
			time.Sleep(3 * time.Second) // both replicas start long jobs
			d := span(30*time.Second, 16*time.Second)
			mustToxic(r, toxic().Blackhole())
			time.Sleep(d)
			toxic().Heal()
			restartWith(r, stacktest.Fulfilment, map[string]string{"ORDERFLOW_FULFILMENT_JOB_MIN": "50ms", "ORDERFLOW_FULFILMENT_JOB_MAX": "200ms"})
			r.note("first replica's redis blackholed for %s (slot lease 5s, jobs 12-14s)", d)
		},
	}
}

// restartWith stops a service and starts it again with env changed.
func restartWith(r *run, name string, env map[string]string) {
	r.s.Stop(name)
	for k, v := range env {
		r.s.SetEnv(name, k, v)
	}
	r.s.Start(name)
}

// rollingRestart stops both split-workers until a backlog builds (8 s;
// 4 s in `make test`), starts them, and restarts them one after the
// other three times (once) while the backlog drains; shutdowns must not
// spend the jobs' delivery attempts.
func rollingRestart() scenario {
	workers := []string{stacktest.SplitWorker, stacktest.SplitWorker + "-2"}
	return scenario{
		name: "rolling restart of all split-workers during a backlog", short: true,
		setup: func(_ *suite, o *stacktest.Options) {
			o.Replicas = map[string]int{stacktest.SplitWorker: 2}
		},
		fault: func(r *run) {
			for _, w := range workers {
				r.s.Stop(w)
			}
			time.Sleep(span(8*time.Second, 4*time.Second))
			for _, w := range workers {
				r.s.Start(w)
			}
			rounds := 3
			if !full() {
				rounds = 1
			}
			for range rounds {
				for _, w := range workers {
					r.s.Stop(w)
					r.s.Start(w)
				}
			}
		},
	}
}

// redisLosesLastSecond is the failover of a replicated Redis run as the
// README requires (ORDERFLOW_REDIS_MIN_REPLICA_ACKS=1): the services reach
// the primary through a proxy, a replica follows it through another. The
// replication link stalls for a second under load (the replica falls a
// second behind), the primary is killed, the replica promoted and the
// services' proxy pointed at it: the primary's last second of writes is
// lost, and none of it was acknowledged to anyone.
func redisLosesLastSecond() scenario {
	var front, link *netfault.Toxic
	var replica *testenv.RedisServer
	return scenario{
		name: "redis failover losing the last second of writes", short: true,
		setup: func(su *suite, o *stacktest.Options) {
			var err error
			if front, err = netfault.NewToxic(su.redis.Addr); err != nil {
				panic(err)
			}
			if link, err = netfault.NewToxic(su.redis.Addr); err != nil {
				panic(err)
			}
			su.closers = append(su.closers, front.Close, link.Close)
			host, port, _ := strings.Cut(link.Addr(), ":")
			replica = testenv.StartRedis(su.current, false, "--replicaof", host, port)
			waitReplicaInSync(su.current, replica.Addr)
			o.RedisAddr = front.Addr()
			su.primary = front.Addr
			o.Env["ORDERFLOW_REDIS_MIN_REPLICA_ACKS"] = "1"
			o.ServiceEnv[stacktest.Gateway]["ORDERFLOW_GATEWAY_REPAIR_GRACE"] = "20s"
		},
		fault: func(r *run) {
			ctx := context.Background()
			mustToxic(r, link.Blackhole())
			time.Sleep(time.Second)
			r.su.redis.Kill(r.t)
			promoted := redis.NewClient(&redis.Options{Addr: replica.Addr})
			defer promoted.Close()
			if err := promoted.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
				r.t.Fatalf("promote the replica: %v", err)
			}
			mustToxic(r, front.Retarget(replica.Addr))
			// The old primary comes back as the new primary's replica (as
			// Sentinel reconfigures it); writes wait for it meanwhile.
			r.su.redis.Start(r.t)
			old := redis.NewClient(&redis.Options{Addr: r.su.redis.Addr})
			defer old.Close()
			host, port, _ := strings.Cut(replica.Addr, ":")
			if err := old.ReplicaOf(ctx, host, port).Err(); err != nil {
				r.t.Fatalf("make the old primary a replica: %v", err)
			}
			waitReplicaInSync(r.t, r.su.redis.Addr)
			r.note("replication stalled 1s, primary killed, replica promoted, old primary back as its replica")
		},
		check: func(r *run, _ *result) {
			// The suite's Redis is the primary of the scenarios after
			// this one again.
			rdb := redis.NewClient(&redis.Options{Addr: r.su.redis.Addr})
			defer rdb.Close()
			if err := rdb.ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
				r.t.Fatalf("promote the suite's redis again: %v", err)
			}
		},
	}
}

// waitReplicaInSync waits until the replica at addr has its primary's data
// and a live link.
func waitReplicaInSync(t testing.TB, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		info, err := rdb.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			return
		}
	}
	t.Fatalf("replica %s not in sync", addr)
}
