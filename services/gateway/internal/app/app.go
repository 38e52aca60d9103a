// Package app wires the gateway together: configuration, Redis, RabbitMQ,
// the gRPC server, the public HTTP server (REST, page, OpenAPI, health) and
// the admin HTTP server (metrics, profiles), and runs them until the
// context ends.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/grpcserver"
	"github.com/orderflow/orderflow/pkg/platform/grpctls"
	"github.com/orderflow/orderflow/pkg/platform/metrics"
	"github.com/orderflow/orderflow/pkg/platform/probe"
	"github.com/orderflow/orderflow/pkg/platform/profiling"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/platform/rules"
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/gateway/internal/authn"
	"github.com/orderflow/orderflow/services/gateway/internal/httpapi"
	"github.com/orderflow/orderflow/services/gateway/internal/openapi"
	"github.com/orderflow/orderflow/services/gateway/internal/ops"
	"github.com/orderflow/orderflow/services/gateway/internal/payment"
	"github.com/orderflow/orderflow/services/gateway/internal/paynotify"
	"github.com/orderflow/orderflow/services/gateway/internal/ratelimit"
	"github.com/orderflow/orderflow/services/gateway/internal/tasks"
	"github.com/orderflow/orderflow/services/gateway/internal/web"
)

// Config is the gateway's configuration, read from the environment.
type Config struct {
	Env      config.Env `env:"ORDERFLOW_ENV" envDefault:"production" desc:"Deployment environment: production applies the production rules and refuses test-only settings; development fills unset secrets with the published development ones."`
	HTTPAddr string     `env:"ORDERFLOW_GATEWAY_HTTP_ADDR" envDefault:"127.0.0.1:8080" desc:"Listen address of the public HTTP server (REST, shop page, OpenAPI, health)."`
	GRPCAddr string     `env:"ORDERFLOW_GATEWAY_GRPC_ADDR" envDefault:":9090" desc:"Listen address of the public gRPC server."`
	// AdminAddr serves /metrics and the Go runtime's profiles, apart from
	// the public HTTP port.
	AdminAddr      string `env:"ORDERFLOW_GATEWAY_ADMIN_ADDR" envDefault:"127.0.0.1:9094" desc:"Listen address of the admin HTTP server (metrics, profiles), apart from the public port."`
	ReconcilerAddr string `env:"ORDERFLOW_GATEWAY_RECONCILER_ADDR" envDefault:"127.0.0.1:9091" desc:"gRPC address of the reconciler, to which payment calls are forwarded."`
	// ReconcilerToken is the gateway's identity toward the reconciler;
	// nothing on the gateway accepts it.
	ReconcilerToken config.Secret `env:"ORDERFLOW_GATEWAY_RECONCILER_TOKEN" desc:"The gateway's credential toward the reconciler: the bearer token its payment and operations calls present on the reconciler's gRPC. No listener of the gateway accepts it." prod:"required, at least 32 bytes, not the development token, no other credential's value"`
	// GRPCReflection is "true", "false" or empty (on in development only).
	GRPCReflection string        `env:"ORDERFLOW_GRPC_REFLECTION" desc:"gRPC server reflection: true, false, or empty for on in development only." range:"true, false, empty"`
	DevLogin       bool          `env:"ORDERFLOW_DEV_LOGIN" envDefault:"false" desc:"Serves the development login that issues HS256 tokens from ORDERFLOW_JWT_SECRET." prod:"refused (development only)"`
	TaskTTL        time.Duration `env:"ORDERFLOW_TASK_TTL" envDefault:"24h" desc:"How long a task record is kept after its submission." range:"≥ 1m"`
	MaxItems       int           `env:"ORDERFLOW_GATEWAY_MAX_ITEMS" envDefault:"200" desc:"Most items one order split may carry." range:"≥ 1"`
	MaxWatches     int           `env:"ORDERFLOW_GATEWAY_MAX_WATCHES" envDefault:"8" desc:"Watches one member may hold open on one gateway replica; one more is RESOURCE_EXHAUSTED."`
	// MaxWatchesTotal bounds the watches one replica holds open for all
	// members together.
	MaxWatchesTotal int           `env:"ORDERFLOW_GATEWAY_MAX_WATCHES_TOTAL" envDefault:"10000" desc:"Watches one gateway replica holds open for all members together; one more is 429 WATCH_CAPACITY with Retry-After." range:"≥ 1"`
	WatchLifetime   time.Duration `env:"ORDERFLOW_GATEWAY_WATCH_LIFETIME" envDefault:"30m" desc:"A watch is ended after this long; the client opens a new one."`
	WatchResync     time.Duration `env:"ORDERFLOW_GATEWAY_WATCH_RESYNC" envDefault:"15s" desc:"A watch re-reads its task this often, in case a change event was missed."`
	MaxQuantity     int32         `env:"ORDERFLOW_GATEWAY_MAX_QUANTITY" envDefault:"10000" desc:"Most units one item of a submission may order." range:"≥ 1"`
	MaxBodyBytes    int64         `env:"ORDERFLOW_GATEWAY_MAX_BODY_BYTES" envDefault:"65536" desc:"Largest request body (REST) and message (gRPC) a submission may be." range:"≥ 1024"`
	OutboxGrace     time.Duration `env:"ORDERFLOW_GATEWAY_OUTBOX_GRACE" envDefault:"30s" desc:"How long after a submission the outbox sweeper may republish a job whose confirm was never recorded."`
	// ConfirmWait bounds how long a submission waits for its job's
	// confirm (ORDERFLOW_AMQP_PUBLISH_TIMEOUT when that is shorter), well
	// inside a client's 10 s: a job not confirmed by then is an unknown
	// outcome, kept for the outbox, and the caller gets its task.
	ConfirmWait time.Duration `env:"ORDERFLOW_GATEWAY_CONFIRM_WAIT" envDefault:"2s" desc:"How long a submission waits for its job's publish confirm (ORDERFLOW_AMQP_PUBLISH_TIMEOUT when shorter); after it the outcome is unknown, the job stays in the outbox and the caller gets its task."`
	// RedisBudget bounds each Redis command (with go-redis's retries):
	// one not answered within it fails. Once one has, and a ping is not
	// answered within half of it either, every command fails at once
	// until a ping is answered, so while Redis is silent requests are
	// answered 503 STORE_UNAVAILABLE within about a budget (a submission
	// whose create timed out: half a budget more, to undo it).
	RedisBudget   time.Duration `env:"ORDERFLOW_GATEWAY_REDIS_BUDGET" envDefault:"1500ms" desc:"Bound of each Redis command with its retries; while Redis is silent requests are answered 503 STORE_UNAVAILABLE within about one budget." range:"≥ 100ms"`
	RepairGrace   time.Duration `env:"ORDERFLOW_GATEWAY_REPAIR_GRACE" envDefault:"10m" desc:"A task PROCESSING with no live lease is republished after this (G), again at about 2G and 4G, and failed with 10009 at about 8G; each wait is drawn from 1 to 1.5 times its length, so replicas spread and nothing comes earlier." range:"≥ 1s"`
	RateLimit     float64       `env:"ORDERFLOW_GATEWAY_RATE_LIMIT" envDefault:"50" desc:"Requests per second one member may make on one gateway replica (token bucket); 0 or less turns the limit off."`
	RateBurst     int           `env:"ORDERFLOW_GATEWAY_RATE_BURST" envDefault:"100" desc:"Burst of the per-member rate limit."`
	RedisPrefix   string        `env:"ORDERFLOW_REDIS_PREFIX" envDefault:"orderflow" desc:"Prefix of every Redis key the services write; the services of one deployment must share it."`
	AMQPPrefix    string        `env:"ORDERFLOW_AMQP_PREFIX" envDefault:"orderflow" desc:"Prefix of the RabbitMQ exchange and queue names; the gateway and the split-workers must share it."`
	DeliveryLimit int           `env:"ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT" envDefault:"5" desc:"Deliveries of one split job before it is dead-lettered and its task fails with 10009; the gateway declares the queue with it." range:"≥ 1"`
	// FulfilmentShards is the split-workers' setting: the operations API
	// reads and changes their running pool split over that many shards.
	FulfilmentShards int `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS" envDefault:"1" desc:"Shards of the fulfilment slot pool (hash tags spread over Redis Cluster masters); the gateway and every split-worker must use the same value." range:"1–256, ≤ FULFILMENT_SLOTS"`
	// FulfilmentSlots and the three settings after it are the
	// split-workers' configured pool, which "reset to configuration"
	// writes; unset (0), the gateway refuses that reset.
	FulfilmentSlots int            `env:"ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS" desc:"The split-workers' configured N; the gateway writes it on an operator's reset to configuration (unset: the reset is refused)." range:"≥ 0"`
	MemberSlots     int            `env:"ORDERFLOW_SPLITWORKER_MEMBER_SLOTS" envDefault:"0" desc:"The split-workers' configured per-member slot cap, written on a reset to configuration (0: no cap)." range:"≥ 0"`
	StarveAfter     int            `env:"ORDERFLOW_SPLITWORKER_STARVE_AFTER" envDefault:"4" desc:"The split-workers' configured starvation bound, written on a reset to configuration." range:"≥ 1"`
	FairnessWeights map[string]int `env:"ORDERFLOW_SPLITWORKER_FAIRNESS_WEIGHTS" envKeyValSeparator:"=" desc:"The split-workers' configured member weights (member=weight,...), written on a reset to configuration."`
	AuditMaxLen     int64          `env:"ORDERFLOW_OPS_AUDIT_MAXLEN" envDefault:"100000" desc:"Entries the operations audit log (a Redis stream) keeps." range:"≥ 100"`
	// OpsSampleInterval is how often the operations charts' slot
	// utilisation and check lateness are sampled.
	OpsSampleInterval time.Duration `env:"ORDERFLOW_OPS_SAMPLE_INTERVAL" envDefault:"10s" desc:"How often the operations charts' slot utilisation and check lateness are sampled." range:"1s–1m"`
	// ClockSkew offsets this replica's own clock: a fault-injection knob
	// for tests only (refused in production).
	ClockSkew time.Duration `env:"ORDERFLOW_GATEWAY_CLOCK_SKEW" envDefault:"0s" desc:"Offsets this gateway replica's own clock, for the fault suite's skewed-clock row." prod:"refused" testonly:"true"`
	JWT       auth.Settings
	// Metrics is the scrape token that reads /metrics on the admin port.
	Metrics auth.ScrapeSettings
	Redis   redisconn.Config
	AMQP    amqpbus.Config
	Pay     wechatpay.Config
	// GRPCTLS, when set, is the gateway's client certificate and the CA of
	// the reconciler's, for mutual TLS to the reconciler.
	GRPCTLS grpctls.Config
}

// Validate checks the configuration. In production (ORDERFLOW_ENV) it
// refuses missing, short or published development secrets and the dev
// login; in development it fills unset secrets with the development ones.
func (c *Config) Validate() error {
	errs := []error{
		c.Env.Secret("ORDERFLOW_GATEWAY_RECONCILER_TOKEN", &c.ReconcilerToken, auth.MinSecretLen, auth.DevGatewayReconcilerToken),
		c.Pay.CheckEnv(c.Env),
		c.Redis.Validate(),
		c.AMQP.Validate(),
		c.GRPCTLS.Validate(),
	}
	errs = append(errs, c.JWT.CheckEnv(c.Env), c.Metrics.CheckEnv(c.Env))
	// After the checks above, which fill in development values.
	errs = append(errs, config.Distinct(
		config.Named{Name: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN", Value: c.ReconcilerToken},
		config.Named{Name: "ORDERFLOW_METRICS_TOKEN", Value: c.Metrics.Token},
		config.Named{Name: "ORDERFLOW_JWT_SECRET", Value: c.JWT.Secret},
		config.Named{Name: "ORDERFLOW_PAY_APIV3_KEY", Value: c.Pay.APIv3Key}))
	if c.DevLogin && !c.Env.Development() {
		errs = append(errs, fmt.Errorf("ORDERFLOW_DEV_LOGIN=true is refused when %s=production", config.EnvVar))
	} else if c.DevLogin && c.JWT.Secret == "" {
		errs = append(errs, errors.New("ORDERFLOW_DEV_LOGIN=true needs ORDERFLOW_JWT_SECRET (it signs HS256 tokens)"))
	}
	if c.TaskTTL < time.Minute {
		errs = append(errs, errors.New("ORDERFLOW_TASK_TTL must be at least 1m"))
	}
	if c.MaxItems < 1 {
		errs = append(errs, errors.New("ORDERFLOW_GATEWAY_MAX_ITEMS must be positive"))
	}
	if c.MaxQuantity < 1 {
		errs = append(errs, errors.New("ORDERFLOW_GATEWAY_MAX_QUANTITY must be positive"))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, errors.New("ORDERFLOW_GATEWAY_MAX_BODY_BYTES must be at least 1024"))
	}
	if c.RedisBudget < 100*time.Millisecond {
		errs = append(errs, errors.New("ORDERFLOW_GATEWAY_REDIS_BUDGET must be at least 100ms"))
	}
	if c.RepairGrace < time.Second {
		errs = append(errs, errors.New("ORDERFLOW_GATEWAY_REPAIR_GRACE must be at least 1s"))
	}
	if c.AuditMaxLen < 100 {
		errs = append(errs, errors.New("ORDERFLOW_OPS_AUDIT_MAXLEN must be at least 100"))
	}
	if c.OpsSampleInterval < time.Second || c.OpsSampleInterval > time.Minute {
		errs = append(errs, errors.New("ORDERFLOW_OPS_SAMPLE_INTERVAL must be from 1s to 1m"))
	}
	if c.FulfilmentShards < 1 || c.FulfilmentShards > slotpool.MaxShards {
		errs = append(errs, fmt.Errorf("ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS must be from 1 to %d", slotpool.MaxShards))
	}
	if c.DeliveryLimit < 1 {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_DELIVERY_LIMIT must be positive"))
	}
	if c.FulfilmentSlots < 0 {
		errs = append(errs, errors.New("ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS must not be negative (0: not known to the gateway)"))
	} else if s := c.PoolConfig(); s != nil {
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("the split-workers' pool settings (ORDERFLOW_SPLITWORKER_MEMBER_SLOTS, _STARVE_AFTER, _FAIRNESS_WEIGHTS): %w", err))
		}
	}
	return errors.Join(errs...)
}

// PoolConfig returns the split-workers' configured pool settings, or nil
// when ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS is not set.
func (c Config) PoolConfig() *slotpool.Settings {
	if c.FulfilmentSlots <= 0 {
		return nil
	}
	return &slotpool.Settings{Capacity: c.FulfilmentSlots, GroupCap: c.MemberSlots, StarveAfter: c.StarveAfter, Weights: c.FairnessWeights}
}

// Run serves the gateway until ctx ends. ready, when not nil, is called
// with the bound addresses once both listeners are open.
//
// Its sections: connect to Redis and RabbitMQ, build the task API, the
// payment API and the operations API, register them on the gRPC server,
// open the listeners, build the HTTP handler and the admin port, serve.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready serve.Ready) error {
	log.Info("starting", "config", cfg) // config.Secret fields marshal masked
	if cfg.JWT.Secret.Reveal() == auth.DevJWTSecret {
		log.Warn("using the development JWT secret; set ORDERFLOW_JWT_SECRET in production")
	}
	gw := &gateway{cfg: cfg, log: log}
	gw.connect()
	defer gw.rdb.Close()
	defer gw.conn.Close()
	defer gw.pub.Close()
	if err := gw.buildTasks(ctx); err != nil {
		return err
	}
	recConn, err := gw.buildPayments()
	if err != nil {
		return err
	}
	defer recConn.Close()
	gw.buildOps()
	gw.buildGRPC()
	lis, err := listen(cfg)
	if err != nil {
		return err
	}
	loop, err := grpc.NewClient(loopbackAddr(lis.grpc.Addr()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		return fmt.Errorf("loopback grpc client: %w", err)
	}
	defer loop.Close()
	probes := gw.probes()
	defer probes.DrainOnDone(ctx)()
	handler, err := gw.httpHandler(ctx, loop, probes)
	if err != nil {
		return err
	}
	for _, svc := range []string{"", gatewayv1.OrderSplitService_ServiceDesc.ServiceName, gatewayv1.TaskService_ServiceDesc.ServiceName, gatewayv1.PaymentService_ServiceDesc.ServiceName, opsv1.OpsService_ServiceDesc.ServiceName} {
		gw.health.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
	return gw.serve(ctx, ready, lis, handler)
}

// gateway holds what Run builds, section by section.
type gateway struct {
	cfg Config
	log *slog.Logger

	// connect
	rdb          redis.UniversalClient
	redisBreaker *redisconn.Breaker
	names        jobqueue.Names
	conn         *amqpbus.Conn
	pub          *amqpbus.Publisher

	// buildTasks
	verifier  *auth.Verifier
	authCfg   auth.Config
	reg       *prometheus.Registry
	store     *taskstore.Store
	taskAuthn *authn.Authenticator
	apiDoc    []byte
	local     clock.Clock
	taskSrv   *tasks.Server

	// buildPayments
	reconciler reconcilerv1.ReconcilerServiceClient
	paySrv     *payment.Server
	notify     http.Handler

	// buildOps
	opsSrv  *ops.Server
	sampler *ops.Sampler

	// buildGRPC
	grpcSrv *grpc.Server
	health  *health.Server
}

// connect builds the Redis client and the RabbitMQ connection and
// publisher.
func (gw *gateway) connect() {
	cfg, log := gw.cfg, gw.log
	// Every Redis command ends within RedisBudget, and while Redis is
	// silent (a command and then a ping went unanswered) every one
	// fails at once: requests are answered 503 instead of waiting.
	gw.rdb, gw.redisBreaker = redisconn.NewFailFast(cfg.Redis, cfg.RedisBudget, log)
	gw.names = jobqueue.NewNames(cfg.AMQPPrefix)
	amqpCfg := cfg.AMQP
	if cfg.ConfirmWait > 0 && cfg.ConfirmWait < amqpCfg.PublishTimeout {
		amqpCfg.PublishTimeout = cfg.ConfirmWait
	}
	gw.conn = amqpbus.New(amqpCfg, log, gw.names.Topology(cfg.DeliveryLimit))
	gw.pub = amqpbus.NewPublisher(gw.conn)
	// Connect (and declare the topology) now; if RabbitMQ is down the
	// gateway still starts, answers 503 and connects when it is back.
	if err := gw.conn.Check(); err != nil {
		log.Warn("rabbitmq not reachable at start; will retry on demand", "err", err)
	}
}

// buildTasks builds the token verifier, the metrics registry, the task
// store and the task API (submissions, reads, watches).
func (gw *gateway) buildTasks(ctx context.Context) error {
	cfg, log := gw.cfg, gw.log
	var err error
	gw.verifier, gw.authCfg, err = cfg.JWT.NewVerifier(ctx)
	if err != nil {
		return err
	}
	gw.reg = metrics.NewRegistry()
	gw.store = taskstore.New(gw.rdb, taskstore.Options{Prefix: cfg.RedisPrefix, TTL: cfg.TaskTTL, RepairGrace: cfg.RepairGrace})
	var limiter authn.Limiter
	if l := ratelimit.New(cfg.RateLimit, cfg.RateBurst); l != nil {
		limiter = l
	}
	gw.taskAuthn = authn.New(gw.verifier, limiter)
	splitRules := rules.NewOrderSplit(int64(cfg.MaxItems), int64(cfg.MaxQuantity))
	gw.apiDoc, err = openapi.Document(rules.Gateway(splitRules))
	if err != nil {
		return err
	}
	gw.local = clock.SkewedBy(cfg.ClockSkew)
	if cfg.ClockSkew != 0 {
		log.Warn("this replica's clock is skewed on purpose (ORDERFLOW_GATEWAY_CLOCK_SKEW is for tests only)", "skew", cfg.ClockSkew)
	}
	gw.taskSrv = tasks.New(gw.store, gw.pub, gw.taskAuthn, log, tasks.Options{
		Clock:       gw.local,
		Rules:       splitRules,
		Queue:       gw.names,
		OutboxGrace: cfg.OutboxGrace,
		RepairGrace: cfg.RepairGrace,
		// A create that timed out is undone within half a budget more, so
		// even that submission is answered within 1.5 budgets.
		RollbackWait: cfg.RedisBudget / 2,
		Registerer:   gw.reg,
		MaxWatches:   cfg.MaxWatches, MaxWatchesTotal: cfg.MaxWatchesTotal,
		MaxWatchLifetime: cfg.WatchLifetime, WatchResync: cfg.WatchResync,
	})
	return nil
}

// buildPayments dials the reconciler and builds the payment API and the
// provider's notification handler. The caller closes the connection it
// returns.
func (gw *gateway) buildPayments() (*grpc.ClientConn, error) {
	cfg, log := gw.cfg, gw.log
	// Payments are forwarded to the reconciler with the gateway's token.
	// While it is unreachable the connection retries at most every 2 s
	// (gRPC's default grows to 2 minutes), so payments resume within
	// seconds of its return.
	recCreds, err := cfg.GRPCTLS.DialOption()
	if err != nil {
		return nil, err
	}
	recConn, err := grpc.NewClient(cfg.ReconcilerAddr, recCreds,
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second, Backoff: grpcbackoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}}),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithPerRPCCredentials(payment.ServiceToken(cfg.ReconcilerToken.Reveal())))
	if err != nil {
		return nil, fmt.Errorf("reconciler client: %w", err)
	}
	gw.reconciler = reconcilerv1.NewReconcilerServiceClient(recConn)
	gw.paySrv = payment.New(gw.reconciler, gw.taskAuthn, log)
	payClient, err := cfg.Pay.NewClient(log, gw.local)
	if err != nil {
		recConn.Close()
		return nil, fmt.Errorf("payment provider client: %w", err)
	}
	gw.notify = paynotify.NewHandler(paynotify.Options{
		Keys: payClient.Keys(), APIv3Key: []byte(cfg.Pay.APIv3Key.Reveal()),
		Reconciler: gw.reconciler, Logger: log, Registerer: gw.reg, Clock: gw.local,
		MchID: cfg.Pay.MchID, AppID: cfg.Pay.AppID, Redis: gw.rdb, Prefix: cfg.RedisPrefix,
	})
	return recConn, nil
}

// buildOps builds the operations API and its sampler.
func (gw *gateway) buildOps() {
	cfg, rdb := gw.cfg, gw.rdb
	// The operations API reads the split-worker's running pool (same
	// name and shards, so the same keys) and forwards payment calls to the
	// reconciler.
	pool := slotpool.NewSharded(rdb, slotpool.Options{Name: cfg.RedisPrefix + ":fulfilment"}, cfg.FulfilmentShards)
	events := eventrate.New(rdb, cfg.RedisPrefix)
	gw.opsSrv = ops.New(ops.Options{
		Store: gw.store, Pub: gw.pub, Channels: gw.conn, Queue: gw.names,
		Pool:       pool,
		PoolConfig: cfg.PoolConfig(),
		Reconciler: gw.reconciler, Authn: gw.taskAuthn,
		Audit: ops.NewAudit(rdb, cfg.RedisPrefix, cfg.AuditMaxLen), Log: gw.log, OutboxGrace: cfg.OutboxGrace,
		Events: events, InFlight: inflight.New(rdb, cfg.RedisPrefix),
		Clock: gw.local,
	})
	// The operations charts: submissions, slot utilisation and check
	// lateness, sampled into the cluster-wide per-minute series.
	gw.sampler = ops.NewSampler(ops.SamplerOptions{
		Events: events, Pool: pool, Reconciler: gw.reconciler, Accepted: gw.taskSrv.Accepted,
		Interval: cfg.OpsSampleInterval, Log: gw.log,
	})
}

// buildGRPC builds the gRPC server and registers the APIs on it.
func (gw *gateway) buildGRPC() {
	cfg := gw.cfg
	gw.grpcSrv, gw.health = grpcserver.New(gw.log, gw.reg, grpcserver.Options{
		Reflection: grpcserver.ReflectionFromEnv(cfg.GRPCReflection, cfg.Env.Development()),
		// A submission is at most MaxBodyBytes of JSON; its protobuf is smaller.
		MaxRecvMsgSize: int(max(cfg.MaxBodyBytes, grpcserver.DefaultMaxRecvMsgSize)),
	})
	gatewayv1.RegisterOrderSplitServiceServer(gw.grpcSrv, gw.taskSrv)
	gatewayv1.RegisterTaskServiceServer(gw.grpcSrv, gw.taskSrv)
	gatewayv1.RegisterPaymentServiceServer(gw.grpcSrv, gw.paySrv)
	opsv1.RegisterOpsServiceServer(gw.grpcSrv, gw.opsSrv)
}

// listeners are the gateway's three open ports.
type listeners struct{ grpc, http, admin net.Listener }

// listen opens the gRPC, HTTP and admin ports; on an error it closes
// those it opened.
func listen(cfg Config) (listeners, error) {
	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return listeners{}, fmt.Errorf("listen grpc: %w", err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return listeners{}, fmt.Errorf("listen http: %w", err)
	}
	adminLis, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return listeners{}, fmt.Errorf("listen admin: %w", err)
	}
	return listeners{grpc: grpcLis, http: httpLis, admin: adminLis}, nil
}

// probes builds the liveness and readiness probes.
func (gw *gateway) probes() *probe.Probes {
	// Liveness never looks at Redis or RabbitMQ; readiness does, and both
	// readiness and gRPC health fail from the moment shutdown begins.
	return probe.New(map[string]probe.Check{
		"redis":    func(ctx context.Context) error { return redisconn.Ping(ctx, gw.rdb) },
		"rabbitmq": func(context.Context) error { return gw.conn.Check() },
	}, gw.health).Private(func(r *http.Request) bool {
		// The gateway's port is public: only operators see which
		// dependency failed.
		return auth.IsAdmin(r, gw.verifier)
	}, gw.log)
}

// httpHandler builds the public HTTP handler: REST through the loopback
// gRPC client, the payment routes, the pages and the OpenAPI document.
func (gw *gateway) httpHandler(ctx context.Context, loop *grpc.ClientConn, probes *probe.Probes) (http.Handler, error) {
	routes := map[string]http.Handler{"POST /v1/payments/notify": gw.notify, "GET /v1/payments/{orderCode}/qr": gw.paySrv.QRHandler()}
	if gw.cfg.DevLogin {
		gw.log.Warn("dev login is on: anyone can get a token for any member (ORDERFLOW_DEV_LOGIN=true)")
		routes["POST /v1/dev/login"] = devLogin(gw.authCfg)
	}
	return httpapi.New(ctx, httpapi.Options{
		MaxBodyBytes: gw.cfg.MaxBodyBytes,
		Tasks:        gw.taskSrv,
		Payments:     gw.paySrv,
		Ops:          gw.opsSrv,
		Loopback:     loop,
		Probes:       probes,
		Registerer:   gw.reg,
		Logger:       gw.log,
		OpenAPI:      gw.apiDoc,
		Routes:       routes,
		Pages:        web.Pages(),
	})
}

// serve runs the servers and the background loops until ctx ends or one
// of them fails.
func (gw *gateway) serve(ctx context.Context, ready serve.Ready, lis listeners, handler http.Handler) error {
	// The admin port: /metrics for the scrape token or an admin token,
	// and the Go runtime's profiles for an admin token. The public port
	// serves neither.
	adminMux := http.NewServeMux()
	adminMux.Handle("GET /metrics", auth.ScrapeOrAdmin(metrics.Handler(gw.reg), gw.cfg.Metrics, gw.verifier))
	profiling.Register(adminMux, func(h http.Handler) http.Handler {
		return auth.AdminOnly(h, gw.verifier)
	})

	// No server-wide ReadTimeout or WriteTimeout: watches stream for
	// minutes. Bodies get their own deadline instead.
	httpSrv := &http.Server{Handler: serve.BodyDeadline(handler, serve.BodyTimeout), ReadHeaderTimeout: serve.ReadHeaderTimeout, IdleTimeout: serve.IdleTimeout}
	taskSrv := gw.taskSrv
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve.GRPC(gctx, gw.grpcSrv, lis.grpc) })
	g.Go(func() error { return serve.HTTP(gctx, httpSrv, lis.http) })
	g.Go(func() error { return serve.HTTP(gctx, serve.AdminServer(adminMux), lis.admin) })
	g.Go(func() error { gw.redisBreaker.Run(gctx); return nil })
	g.Go(func() error { taskSrv.RunWatches(gctx); return nil })
	g.Go(func() error { gw.sampler.Run(gctx); return nil })
	g.Go(func() error { taskSrv.SweepOutbox(gctx, 5*time.Second); return nil })
	g.Go(func() error { taskSrv.CleanOutbox(gctx); return nil })
	g.Go(func() error { taskSrv.SweepRepair(gctx, min(5*time.Second, gw.cfg.RepairGrace/2)); return nil })
	serve.Listening(gw.log, ready, serve.Addrs{HTTP: lis.http.Addr().String(), GRPC: lis.grpc.Addr().String(), Admin: lis.admin.Addr().String()})
	return g.Wait()
}

// loopbackAddr turns a wildcard listen address into one a client can dial.
func loopbackAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		if ok {
			return fmt.Sprintf("127.0.0.1:%d", tcp.Port)
		}
	}
	return a.String()
}

// devLogin issues a 12-hour token for any member id, with the roles asked
// for (e.g. ["admin"] for the operations page): development only.
func devLogin(cfg auth.Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MemberID string   `json:"memberId"`
			Roles    []string `json:"roles"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		w.Header().Set("Content-Type", "application/json")
		if err := dec.Decode(&req); err != nil || !auth.ValidMemberID(req.MemberID) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 3, "message": "memberId: must be 1 to 64 characters of letters, digits, '_', '-', '.' or '@'"})
			return
		}
		if !validRoles(req.Roles) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 3, "message": "roles: at most 8 names of 1 to 32 lowercase letters, digits, '_' or '-'"})
			return
		}
		now := time.Now()
		tok, err := auth.Issue(cfg, req.MemberID, now, 12*time.Hour, req.Roles...)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"memberId": req.MemberID, "token": tok, "expireTime": now.Add(12 * time.Hour).UTC().Format(time.RFC3339),
		})
	})
}

// validRoles accepts up to 8 role names of lowercase letters, digits, '_'
// and '-'.
func validRoles(roles []string) bool {
	if len(roles) > 8 {
		return false
	}
	for _, r := range roles {
		if len(r) == 0 || len(r) > 32 {
			return false
		}
		for _, c := range r {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
				return false
			}
		}
	}
	return true
}
