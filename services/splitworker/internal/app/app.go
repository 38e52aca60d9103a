// Package app wires the split-worker: Redis, RabbitMQ, the task store, the
// fulfilment client, the running pool, the worker and the admin HTTP
// server (/livez, /readyz, /healthz, /metrics, /slots), and runs them until the context
// ends.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/metrics"
	"github.com/orderflow/orderflow/pkg/platform/probe"
	"github.com/orderflow/orderflow/pkg/platform/profiling"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// Config is the split-worker's configuration.
type Config struct {
	Redis redisconn.Config
	AMQP  amqpbus.Config

	Env config.Env `env:"ORDERFLOW_ENV" envDefault:"production"`
	// InternalToken authenticates mutations on the admin HTTP port.
	InternalToken config.Secret `env:"ORDERFLOW_INTERNAL_TOKEN"`
	// JWT verifies admin tokens (role admin) for the admin port's
	// mutations; optional (without it only the internal token works).
	JWT auth.Settings

	RedisPrefix     string        `env:"ORDERFLOW_REDIS_PREFIX" envDefault:"orderflow"`
	AMQPPrefix      string        `env:"ORDERFLOW_AMQP_PREFIX" envDefault:"orderflow"`
	TaskTTL         time.Duration `env:"ORDERFLOW_TASK_TTL" envDefault:"24h"`
	HTTPAddr        string        `env:"ORDERFLOW_SPLITWORKER_HTTP_ADDR" envDefault:"127.0.0.1:9092"`
	FulfilmentURL   string        `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_URL" envDefault:"http://127.0.0.1:8082"`
	FulfilmentCall  time.Duration `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_TIMEOUT" envDefault:"5s"`
	Prefetch        int           `env:"ORDERFLOW_SPLITWORKER_PREFETCH" envDefault:"32"`
	Concurrency     int           `env:"ORDERFLOW_SPLITWORKER_CONCURRENCY" envDefault:"16"`
	DeliveryLimit   int           `env:"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT" envDefault:"5"`
	Lease           time.Duration `env:"ORDERFLOW_SPLITWORKER_LEASE" envDefault:"30s"`
	LeaseWait       time.Duration `env:"ORDERFLOW_SPLITWORKER_LEASE_WAIT" envDefault:"10s"`
	ParcelMaxGrams  int           `env:"ORDERFLOW_SPLITWORKER_PARCEL_MAX_GRAMS" envDefault:"20000"`
	MaxQuantity     int           `env:"ORDERFLOW_SPLITWORKER_MAX_QUANTITY" envDefault:"1000"`
	Pollers         int           `env:"ORDERFLOW_SPLITWORKER_POLLERS" envDefault:"8"`
	PollInitial     time.Duration `env:"ORDERFLOW_SPLITWORKER_POLL_INITIAL" envDefault:"50ms"`
	PollMax         time.Duration `env:"ORDERFLOW_SPLITWORKER_POLL_MAX" envDefault:"1s"`
	ShipmentTimeout time.Duration `env:"ORDERFLOW_SPLITWORKER_SHIPMENT_TIMEOUT" envDefault:"2m"`
	RequeueBackoff  time.Duration `env:"ORDERFLOW_SPLITWORKER_REQUEUE_BACKOFF" envDefault:"500ms"`
	OutageHold      time.Duration `env:"ORDERFLOW_SPLITWORKER_OUTAGE_HOLD" envDefault:"5m"`
	JobMax          time.Duration `env:"ORDERFLOW_SPLITWORKER_JOB_MAX" envDefault:"10m"`
	FulfilmentSlots int           `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS" envDefault:"4"`
	// FulfilmentShards splits the running pool over k hash tags (see
	// slotpool.Sharded); every split-worker and the gateway must use the
	// same value.
	FulfilmentShards int           `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS" envDefault:"1"`
	SlotLease        time.Duration `env:"ORDERFLOW_SPLITWORKER_SLOT_LEASE" envDefault:"15s"`
	// ClockSkew offsets this replica's own clock: a fault-injection knob
	// for tests only (refused in production).
	ClockSkew time.Duration `env:"ORDERFLOW_SPLITWORKER_CLOCK_SKEW" envDefault:"0s"`

	Fairness          string         `env:"ORDERFLOW_SPLITWORKER_FAIRNESS" envDefault:"member"`
	FairnessWeights   map[string]int `env:"ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS" envKeyValSeparator:"="`
	MemberSlots       int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_SLOTS" envDefault:"0"`
	StarveAfter       int            `env:"ORDERFLOW_SPLITWORKER_STARVE_AFTER" envDefault:"4"`
	OrderParallelism  int            `env:"ORDERFLOW_SPLITWORKER_ORDER_PARALLELISM" envDefault:"0"`
	MemberConcurrency int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_CONCURRENCY" envDefault:"4"`
	MemberBacklog     int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_BACKLOG" envDefault:"0"`
}

// Validate checks the configuration; ORDERFLOW_ENV decides whether an
// unset internal token gets the development value or refuses the start.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Env.Secret("ORDERFLOW_INTERNAL_TOKEN", &c.InternalToken, auth.MinSecretLen, auth.DevInternalToken); err != nil {
		errs = append(errs, err)
	}
	if err := c.JWT.CheckOptional(c.Env); err != nil {
		errs = append(errs, err)
	}
	if err := c.Redis.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.AMQP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Env.TestOnly("ORDERFLOW_SPLITWORKER_CLOCK_SKEW", c.ClockSkew != 0); err != nil {
		errs = append(errs, err)
	}
	positive := map[string]int{
		"ORDERFLOW_SPLITWORKER_PREFETCH": c.Prefetch, "ORDERFLOW_SPLITWORKER_CONCURRENCY": c.Concurrency,
		"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT": c.DeliveryLimit, "ORDERFLOW_SPLITWORKER_PARCEL_MAX_GRAMS": c.ParcelMaxGrams,
		"ORDERFLOW_SPLITWORKER_MAX_QUANTITY": c.MaxQuantity, "ORDERFLOW_SPLITWORKER_POLLERS": c.Pollers,
		"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS": c.FulfilmentSlots,
	}
	for name, v := range positive {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", name))
		}
	}
	if c.FulfilmentShards < 1 || c.FulfilmentShards > slotpool.MaxShards {
		errs = append(errs, fmt.Errorf("ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS must be from 1 to %d", slotpool.MaxShards))
	} else if c.FulfilmentSlots > 0 && c.FulfilmentSlots < c.FulfilmentShards {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS must be at least ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS (every shard needs a slot)"))
	}
	if c.Fairness != string(worker.FairnessMember) && c.Fairness != string(worker.FairnessNone) {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_FAIRNESS must be member or none"))
	}
	for g, w := range c.FairnessWeights {
		if w < 1 || w > slotpool.MaxWeight || g == "" {
			errs = append(errs, fmt.Errorf("ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS: %q=%d: want member=weight with weight 1..%d", g, w, slotpool.MaxWeight))
		}
	}
	if c.MemberBacklog < -1 {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_MEMBER_BACKLOG must be -1 (never move), 0 (the default) or positive"))
	}
	if c.MemberSlots < 0 || c.OrderParallelism < 0 || c.MemberConcurrency < 0 {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_MEMBER_SLOTS, _ORDER_PARALLELISM and _MEMBER_CONCURRENCY must not be negative"))
	}
	if c.OutageHold <= 0 || c.OutageHold > 25*time.Minute {
		// RabbitMQ closes a channel whose delivery stays unacknowledged
		// past its consumer timeout (30 minutes by default).
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_OUTAGE_HOLD must be above 0 and at most 25m"))
	}
	if c.JobMax < c.ShipmentTimeout {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_JOB_MAX must be at least ORDERFLOW_SPLITWORKER_SHIPMENT_TIMEOUT"))
	}
	if c.StarveAfter < 1 {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_STARVE_AFTER must be at least 1"))
	}
	if c.SlotLease < time.Second {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_SLOT_LEASE must be at least 1s"))
	}
	if c.Lease < time.Second {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_LEASE must be at least 1s"))
	}
	// A replica killed while holding a lease keeps it for up to Lease; the
	// redeliveries of its job must not run out before then.
	if c.LeaseWait*time.Duration(c.DeliveryLimit) <= c.Lease {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_LEASE_WAIT × ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT must exceed ORDERFLOW_SPLITWORKER_LEASE"))
	}
	if c.TaskTTL < time.Minute {
		errs = append(errs, errors.New("ORDERFLOW_TASK_TTL must be at least 1m"))
	}
	if c.PollInitial <= 0 || c.PollMax < c.PollInitial {
		errs = append(errs, errors.New("need 0 < ORDERFLOW_SPLITWORKER_POLL_INITIAL <= ORDERFLOW_SPLITWORKER_POLL_MAX"))
	}
	return errors.Join(errs...)
}

// Run runs the split-worker until ctx ends: the job consumer, the running
// pool's upkeep and the admin HTTP server. ready, when not nil, is called
// with the HTTP address once it listens.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready serve.Ready) error {
	log.Info("starting", "config", cfg) // config.Secret fields marshal masked

	rdb := redisconn.New(cfg.Redis)
	defer rdb.Close()
	names := jobqueue.NewNames(cfg.AMQPPrefix)
	conn := amqpbus.New(cfg.AMQP, log, names.Topology(cfg.DeliveryLimit))
	defer conn.Close()
	reg := metrics.NewRegistry()
	// Job queue depths: the cluster's numbers, exported by every replica (max()).
	reg.MustRegister(jobqueue.NewDepthCollector(conn, names))
	replica := replicaName()
	store := taskstore.New(rdb, taskstore.Options{Prefix: cfg.RedisPrefix, TTL: cfg.TaskTTL, Replica: replica})
	fc := fulfilment.NewClient(cfg.FulfilmentURL, fulfilment.NewHTTPClient(cfg.FulfilmentCall))
	// The running pool caps the fulfilment system's concurrent jobs at N
	// across every replica; N is stored in Redis, this value seeds it.
	// Split over k shards, each holds N ÷ k slots under a hash tag of its own.
	pool := slotpool.NewSharded(rdb, slotpool.Options{
		Name: cfg.RedisPrefix + ":fulfilment", Capacity: cfg.FulfilmentSlots, Lease: cfg.SlotLease,
		GroupCap: cfg.MemberSlots, StarveAfter: cfg.StarveAfter, Registerer: reg, Logger: log,
		Replica: replica,
	}, cfg.FulfilmentShards)
	if err := pool.SetCapacity(ctx, cfg.FulfilmentSlots); err != nil {
		log.Warn("could not set the fulfilment pool's capacity; keeping the stored one", "err", err)
	}
	if err := pool.SetFairness(ctx, cfg.MemberSlots, cfg.StarveAfter); err != nil {
		log.Warn("could not set the fulfilment pool's fairness limits; keeping the stored ones", "err", err)
	}
	for member, weight := range cfg.FairnessWeights {
		if err := pool.SetWeight(ctx, member, weight); err != nil {
			log.Warn("could not set a member's fairness weight", "member", member, "err", err)
		}
	}
	if cfg.OrderParallelism == 0 {
		cfg.OrderParallelism = cfg.FulfilmentSlots
	}
	if cfg.ClockSkew != 0 {
		log.Warn("this replica's clock is skewed on purpose (ORDERFLOW_SPLITWORKER_CLOCK_SKEW is for tests only)", "skew", cfg.ClockSkew)
	}
	w := worker.New(store, fc, worker.PoolSlots{Pool: pool}, log, reg, worker.Options{
		Clock:            clock.SkewedBy(cfg.ClockSkew),
		Lease:            cfg.Lease,
		LeaseWait:        cfg.LeaseWait,
		Plan:             plan.Options{ParcelMaxGrams: cfg.ParcelMaxGrams, MaxQuantity: cfg.MaxQuantity},
		PollInitial:      cfg.PollInitial,
		PollMax:          cfg.PollMax,
		Pollers:          cfg.Pollers,
		ShipmentTimeout:  cfg.ShipmentTimeout,
		RequeueBackoff:   cfg.RequeueBackoff,
		OutageHold:       cfg.OutageHold,
		JobMax:           cfg.JobMax,
		Fairness:         worker.Fairness(cfg.Fairness),
		OrderParallelism: cfg.OrderParallelism,
		Events:           eventrate.New(rdb, cfg.RedisPrefix),
		InFlight:         inflight.New(rdb, cfg.RedisPrefix),
		Replica:          replica,
	})

	mux := http.NewServeMux()
	// Liveness never looks at Redis or RabbitMQ (an outage must not restart
	// every replica); readiness does, and fails once shutdown begins.
	probes := probe.New(map[string]probe.Check{
		"redis":    func(ctx context.Context) error { return redisconn.Ping(ctx, rdb) },
		"rabbitmq": func(context.Context) error { return conn.Check() },
	}, nil)
	defer probes.DrainOnDone(ctx)()
	probes.Register(mux)
	mux.Handle("GET /metrics", metrics.Handler(reg))
	mux.Handle("GET /slots", pool.Handler())
	// Mutations need an admin token.
	adminJWT, err := cfg.JWT.OptionalVerifier(ctx)
	if err != nil {
		return err
	}
	admin := func(h http.Handler) http.Handler { return auth.AdminOnly(h, adminJWT) }
	mux.Handle("PUT /slots/capacity", admin(pool.CapacityHandler()))
	mux.Handle("PUT /slots/weights", admin(pool.WeightHandler()))
	mux.Handle("PUT /slots/fairness", admin(pool.FairnessHandler()))
	profiling.Register(mux, admin)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve.ListenHTTP(ctx, log, cfg.HTTPAddr, mux, ready) })
	g.Go(func() error { return pool.Run(ctx) })
	g.Go(func() error {
		return w.Run(ctx, conn, worker.ConsumeOptions{Names: names, Prefetch: cfg.Prefetch,
			Concurrency: cfg.Concurrency, MemberConcurrency: cfg.MemberConcurrency, MemberBacklog: cfg.MemberBacklog})
	})
	return g.Wait()
}

// replicaName names this process to operators: the host (the pod's name
// in Kubernetes) and the process id, which tells apart replicas sharing a
// host.
func replicaName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s.%d", host, os.Getpid())
}
