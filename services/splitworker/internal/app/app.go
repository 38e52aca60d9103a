// Package app wires the split-worker: Redis, RabbitMQ, the task store, the
// fulfilment client, the running pool, the worker and the admin HTTP
// server (/livez, /readyz, /healthz, /metrics, /slots), and runs them
// until the context ends.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
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
	"github.com/orderflow/orderflow/pkg/platform/cost"
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

	Env config.Env `env:"ORDERFLOW_ENV" envDefault:"production" desc:"Deployment environment: production applies the production rules and refuses test-only settings; development fills unset secrets with the published development ones."`
	// JWT verifies admin tokens (role admin) for the admin port's
	// mutations and reads; optional (without it nobody is admin).
	JWT auth.Settings
	// Metrics is the scrape token that reads /metrics.
	Metrics auth.ScrapeSettings

	RedisPrefix     string        `env:"ORDERFLOW_REDIS_PREFIX" envDefault:"orderflow" desc:"Prefix of every Redis key the services write; the services of one deployment must share it."`
	AMQPPrefix      string        `env:"ORDERFLOW_AMQP_PREFIX" envDefault:"orderflow" desc:"Prefix of the RabbitMQ exchange and queue names; the gateway and the split-workers must share it."`
	TaskTTL         time.Duration `env:"ORDERFLOW_TASK_TTL" envDefault:"24h" desc:"How long a task record is kept after its submission." range:"≥ 1m"`
	HTTPAddr        string        `env:"ORDERFLOW_SPLITWORKER_HTTP_ADDR" envDefault:"127.0.0.1:9092" desc:"Listen address of the split-worker's admin HTTP server (health, metrics, profiles, pool operations)."`
	FulfilmentURL   string        `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_URL" envDefault:"http://127.0.0.1:8082" desc:"Base URL of the fulfilment system."`
	FulfilmentCall  time.Duration `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_TIMEOUT" envDefault:"5s" desc:"Bound of one HTTP call to the fulfilment system."`
	CatalogueAge    time.Duration `env:"ORDERFLOW_SPLITWORKER_CATALOGUE_MAX_AGE" envDefault:"1s" desc:"How old the fulfilment catalogue a replica checks orders against may be; the fulfilment system checks stock again at each shipment. 0: read for every order." range:"≥ 0"`
	Prefetch        int           `env:"ORDERFLOW_SPLITWORKER_PREFETCH" envDefault:"32" desc:"Jobs one replica takes from RabbitMQ and holds at its admission gate; keep it above (members flooding at once) × MEMBER_BACKLOG." range:"≥ 1"`
	Concurrency     int           `env:"ORDERFLOW_SPLITWORKER_CONCURRENCY" envDefault:"16" desc:"Jobs one replica runs at once." range:"≥ 1"`
	DeliveryLimit   int           `env:"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT" envDefault:"5" desc:"Deliveries of one split job before it is dead-lettered and its task fails with 10009; the gateway declares the queue with it." range:"≥ 1"`
	Lease           time.Duration `env:"ORDERFLOW_SPLITWORKER_LEASE" envDefault:"30s" desc:"TTL of a task's lease, renewed while a replica works on it; a crashed replica's task is taken over after it." range:"≥ 1s"`
	LeaseWait       time.Duration `env:"ORDERFLOW_SPLITWORKER_LEASE_WAIT" envDefault:"10s" desc:"How long a delivery waits for a task whose lease another replica holds before it is requeued." range:"× DELIVERY_LIMIT > LEASE"`
	ParcelMaxGrams  int           `env:"ORDERFLOW_SPLITWORKER_PARCEL_MAX_GRAMS" envDefault:"20000" desc:"Heaviest parcel a warehouse ships; heavier shipments are split into parcels." range:"≥ 1"`
	MaxQuantity     int           `env:"ORDERFLOW_SPLITWORKER_MAX_QUANTITY" envDefault:"1000" desc:"Most units one item may order, checked again by the worker's plan." range:"≥ 1"`
	Pollers         int           `env:"ORDERFLOW_SPLITWORKER_POLLERS" envDefault:"8" desc:"Goroutines of one replica polling fulfilment jobs' states." range:"≥ 1"`
	PollInitial     time.Duration `env:"ORDERFLOW_SPLITWORKER_POLL_INITIAL" envDefault:"50ms" desc:"First interval between polls of a fulfilment job; polls back off from it." range:"> 0, ≤ POLL_MAX"`
	PollMax         time.Duration `env:"ORDERFLOW_SPLITWORKER_POLL_MAX" envDefault:"1s" desc:"Longest interval between polls of a fulfilment job." range:"≥ POLL_INITIAL"`
	ShipmentTimeout time.Duration `env:"ORDERFLOW_SPLITWORKER_SHIPMENT_TIMEOUT" envDefault:"2m" desc:"How long a shipment's fulfilment job may run before the task stops waiting for it." range:"≤ JOB_MAX"`
	RequeueBackoff  time.Duration `env:"ORDERFLOW_SPLITWORKER_REQUEUE_BACKOFF" envDefault:"500ms" desc:"Pause before a job that failed transiently is requeued, doubled with each redelivery; each pause is drawn from half to the whole of it, so replicas spread."`
	OutageHold      time.Duration `env:"ORDERFLOW_SPLITWORKER_OUTAGE_HOLD" envDefault:"5m" desc:"How long a delivery is held and retried in place while Redis or the fulfilment system is unreachable, spending no delivery." range:"> 0, ≤ 25m"`
	JobMax          time.Duration `env:"ORDERFLOW_SPLITWORKER_JOB_MAX" envDefault:"10m" desc:"Longest a finisher keeps a slot polling a fulfilment job that outlived the shipment timeout." range:"≥ SHIPMENT_TIMEOUT"`
	FulfilmentSlots int           `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS" envDefault:"4" desc:"N: fulfilment jobs running at once across all split-worker replicas (the Redis slot pool)." range:"≥ 1, ≥ FULFILMENT_SHARDS"`
	// FulfilmentShards splits the running pool over k hash tags (see
	// slotpool.Sharded); every split-worker and the gateway must use the
	// same value.
	FulfilmentShards int           `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS" envDefault:"1" desc:"Shards of the fulfilment slot pool (hash tags spread over Redis Cluster masters); the gateway and every split-worker must use the same value." range:"1–256, ≤ FULFILMENT_SLOTS"`
	SlotLease        time.Duration `env:"ORDERFLOW_SPLITWORKER_SLOT_LEASE" envDefault:"15s" desc:"TTL of a held fulfilment slot, renewed while held; a crashed holder's slot returns after it." range:"≥ 1s"`
	// ClockSkew offsets this replica's own clock: a fault-injection knob
	// for tests only (refused in production).
	ClockSkew time.Duration `env:"ORDERFLOW_SPLITWORKER_CLOCK_SKEW" envDefault:"0s" desc:"Offsets this split-worker replica's own clock, for the fault suite's skewed-clock row." prod:"refused" testonly:"true"`

	Fairness          string         `env:"ORDERFLOW_SPLITWORKER_FAIRNESS" envDefault:"member" desc:"Slot pool fairness: member queues waiters per member (weighted fair share), none keeps one FIFO." range:"member, none"`
	FairnessWeights   map[string]int `env:"ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS" envKeyValSeparator:"=" desc:"Fair-share weights applied at start, as member=weight,…; weights also change at run time." range:"weights 1–1000"`
	MemberSlots       int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_SLOTS" envDefault:"0" desc:"Most fulfilment slots one member may hold (K); 0: no cap." range:"≥ 0"`
	StarveAfter       int            `env:"ORDERFLOW_SPLITWORKER_STARVE_AFTER" envDefault:"4" desc:"High-priority grants in a row while a normal waiter waits." range:"≥ 1"`
	OrderParallelism  int            `env:"ORDERFLOW_SPLITWORKER_ORDER_PARALLELISM" envDefault:"0" desc:"Shipments of one order run at once, each in its own slot; 0: FULFILMENT_SLOTS." range:"≥ 0"`
	MemberConcurrency int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_CONCURRENCY" envDefault:"4" desc:"Jobs of one member a replica runs at once; 0: CONCURRENCY, no per-member bound." range:"≥ 0"`
	MemberBacklog     int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_BACKLOG" envDefault:"0" desc:"Jobs of one member a replica holds at its gate before it moves further ones to the overflow queue; 0: twice MEMBER_CONCURRENCY, -1: never move." range:"≥ -1"`
}

// Validate checks the configuration; ORDERFLOW_ENV decides whether an
// unset scrape token gets the development value or refuses the start. The
// split-worker calls no other service, so it holds no service token.
func (c *Config) Validate() error {
	var errs []error
	if err := c.JWT.CheckOptional(c.Env); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.CheckEnv(c.Env); err != nil {
		errs = append(errs, err)
	}
	if err := c.Redis.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.AMQP.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.poolErrors()...)
	errs = append(errs, c.timingErrors()...)
	if err := config.Distinct(
		config.Named{Name: "ORDERFLOW_METRICS_TOKEN", Value: c.Metrics.Token},
		config.Named{Name: "ORDERFLOW_JWT_SECRET", Value: c.JWT.Secret}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// poolErrors checks the sizes and the running pool's settings.
func (c *Config) poolErrors() []error {
	var errs []error
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
	return errs
}

// timingErrors checks the leases, holds and timeouts against each other.
func (c *Config) timingErrors() []error {
	var errs []error
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
	} else if c.SlotLease < 4*c.Redis.ReadTimeout {
		// A holder renews every third of the lease and gives its slot up
		// at 5/6 of it: a renewal that times out must leave time for
		// the next one before then.
		errs = append(errs, fmt.Errorf("ORDERFLOW_SPLITWORKER_SLOT_LEASE (%s) must be at least 4 × ORDERFLOW_REDIS_READ_TIMEOUT (%s), so that a slot's lease can be renewed before it runs out",
			c.SlotLease, c.Redis.ReadTimeout))
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
	if c.CatalogueAge < 0 {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_CATALOGUE_MAX_AGE must not be negative"))
	}
	if c.PollInitial <= 0 || c.PollMax < c.PollInitial {
		errs = append(errs, errors.New("need 0 < ORDERFLOW_SPLITWORKER_POLL_INITIAL <= ORDERFLOW_SPLITWORKER_POLL_MAX"))
	}
	return errs
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
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "orderflow_splitworker_settle_frames_total",
		Help: "Ack, nack and reject frames sent to RabbitMQ; below the deliveries settled while acks go together.",
	}, func() float64 { return float64(conn.SettleFrames()) }))
	replica := replicaName()
	store := taskstore.New(rdb, taskstore.Options{Prefix: cfg.RedisPrefix, TTL: cfg.TaskTTL, Replica: replica})
	// Finished tasks leave the processing index, and the error rates'
	// counts reach Redis, in batches shared by many orders; both run
	// until the consumer has stopped, so its last tasks are written.
	cleaner := store.NewIndexCleaner(4096)
	store.CleanIndexWith(cleaner)
	events := eventrate.NewBatcher(eventrate.New(rdb, cfg.RedisPrefix), time.Second, func(err error) {
		log.Warn("count events for the error rates; keeping them for the next write", "err", err)
	})
	stopBatches := runBatches(ctx, log, cleaner, events)
	defer stopBatches()
	fc := fulfilment.NewClient(cfg.FulfilmentURL, fulfilment.NewHTTPClient(cfg.FulfilmentCall))
	pool := newPool(ctx, cfg, rdb, reg, log, replica)
	w := newWorker(cfg, store, fc, pool, events, rdb, reg, log, replica)

	mux := http.NewServeMux()
	// Liveness never looks at Redis or RabbitMQ (an outage must not restart
	// every replica); readiness does, and fails once shutdown begins.
	probes := probe.New(map[string]probe.Check{
		"redis":    func(ctx context.Context) error { return redisconn.Ping(ctx, rdb) },
		"rabbitmq": func(context.Context) error { return conn.Check() },
	}, nil)
	defer probes.DrainOnDone(ctx)()
	probes.Register(mux)
	adminJWT, err := cfg.JWT.OptionalVerifier(ctx)
	if err != nil {
		return err
	}
	registerAdmin(mux, cfg, reg, pool, adminJWT)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve.ListenHTTP(ctx, log, cfg.HTTPAddr, mux, ready) })
	g.Go(func() error { return pool.Run(ctx) })
	g.Go(func() error {
		return w.Run(ctx, conn, worker.ConsumeOptions{Names: names, Prefetch: cfg.Prefetch,
			Concurrency: cfg.Concurrency, MemberConcurrency: cfg.MemberConcurrency, MemberBacklog: cfg.MemberBacklog})
	})
	return g.Wait()
}

// runBatches runs the index cleaner and the event batcher (counted as the
// batched step's cost, package cost) until the returned stop is called,
// which flushes them and waits.
func runBatches(ctx context.Context, log *slog.Logger, cleaner *taskstore.Cleaner, events *eventrate.Batcher) (stop func()) {
	bctx, cancel := context.WithCancel(cost.WithStep(context.WithoutCancel(ctx), cost.Batched))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := cleaner.Run(bctx); err != nil {
			log.Warn("processing index cleanup at shutdown failed; its readers will drop the entries", "err", err)
		}
	})
	wg.Go(func() { events.Run(bctx) })
	return func() { cancel(); wg.Wait() }
}

// newPool builds the running pool and seeds its configured settings.
func newPool(ctx context.Context, cfg Config, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger, replica string) *slotpool.Sharded {
	// The running pool caps the fulfilment system's concurrent jobs at N
	// across every replica; N is stored in Redis, the configuration seeds it.
	// Split over k shards, each holds N ÷ k slots under a hash tag of its own.
	pool := slotpool.NewSharded(rdb, slotpool.Options{
		Name: cfg.RedisPrefix + ":fulfilment", Capacity: cfg.FulfilmentSlots, Lease: cfg.SlotLease,
		// A slot whose lease expires while its job may still run stays
		// counted against N for as long as a job may run.
		JobLimit: cfg.JobMax,
		GroupCap: cfg.MemberSlots, StarveAfter: cfg.StarveAfter, Registerer: reg, Logger: log,
		Replica: replica,
	}, cfg.FulfilmentShards)
	// A start writes the configured values only where no operator set
	// others (an autoscaler adding a replica must not end a pause).
	if err := pool.Seed(ctx, cfg.PoolSettings()); err != nil {
		log.Warn("could not seed the fulfilment pool's settings; keeping the stored ones", "err", err)
	}
	return pool
}

// newWorker builds the worker that consumes the split jobs.
func newWorker(cfg Config, store *taskstore.Store, fc *fulfilment.Client, pool *slotpool.Sharded, events worker.EventCounter, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger, replica string) *worker.Worker {
	if cfg.OrderParallelism == 0 {
		cfg.OrderParallelism = cfg.FulfilmentSlots
	}
	if cfg.ClockSkew != 0 {
		log.Warn("this replica's clock is skewed on purpose (ORDERFLOW_SPLITWORKER_CLOCK_SKEW is for tests only)", "skew", cfg.ClockSkew)
	}
	return worker.New(store, fc, worker.PoolSlots{Pool: pool}, log, reg, worker.Options{
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
		Events:           events,
		InFlight:         inflight.New(rdb, cfg.RedisPrefix),
		Replica:          replica,
		CatalogueMaxAge:  cfg.CatalogueAge,
	})
}

// registerAdmin registers the admin port's metrics, pool and profile
// handlers on mux.
func registerAdmin(mux *http.ServeMux, cfg Config, reg *prometheus.Registry, pool *slotpool.Sharded, adminJWT *auth.Verifier) {
	// Metrics are read with the scrape token or an admin token; the
	// pool's snapshot names members, so it is an admin's read alone, and
	// mutations need an admin token.
	mux.Handle("GET /metrics", auth.ScrapeOrAdmin(metrics.Handler(reg), cfg.Metrics, adminJWT))
	mux.Handle("GET /slots", auth.AdminOnly(pool.Handler(), adminJWT))
	admin := func(h http.Handler) http.Handler { return auth.AdminOnly(asActor(h), adminJWT) }
	mux.Handle("PUT /slots/capacity", admin(pool.CapacityHandler()))
	mux.Handle("PUT /slots/weights", admin(pool.WeightHandler()))
	mux.Handle("PUT /slots/fairness", admin(pool.FairnessHandler()))
	profiling.Register(mux, admin)
}

// PoolSettings are the running pool's configured settings: what a start
// seeds (see slotpool.Pool.Seed).
func (c Config) PoolSettings() slotpool.Settings {
	return slotpool.Settings{Capacity: c.FulfilmentSlots, GroupCap: c.MemberSlots, StarveAfter: c.StarveAfter, Weights: c.FairnessWeights}
}

// asActor names the admin of the request (its member id, or "internal"
// for the service token) to the running pool, which records it as the
// origin of the values it sets.
func asActor(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor := "internal"
		if id, ok := auth.IdentityFrom(r.Context()); ok {
			actor = id.Member
		}
		h.ServeHTTP(w, r.WithContext(slotpool.WithActor(r.Context(), actor)))
	})
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
