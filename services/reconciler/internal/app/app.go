// Package app wires the payment reconciler: configuration, the Redis
// payment store, the provider client, the delayed-job queue and its
// workers, the gRPC API and the HTTP admin endpoints.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/orderflow/orderflow/pkg/engine/delayq"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
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
	"github.com/orderflow/orderflow/pkg/platform/serve"
	"github.com/orderflow/orderflow/pkg/provider/wechatpay"
	"github.com/orderflow/orderflow/services/reconciler/internal/paystore"
	"github.com/orderflow/orderflow/services/reconciler/internal/reconcile"
	"github.com/orderflow/orderflow/services/reconciler/internal/rpc"
)

// Config is the reconciler's configuration.
type Config struct {
	GRPCAddr string     `env:"ORDERFLOW_RECONCILER_GRPC_ADDR" envDefault:":9091" desc:"Listen address of the reconciler's gRPC server."`
	HTTPAddr string     `env:"ORDERFLOW_RECONCILER_HTTP_ADDR" envDefault:"127.0.0.1:9093" desc:"Listen address of the reconciler's admin HTTP server (health, metrics, profiles)."`
	Env      config.Env `env:"ORDERFLOW_ENV" envDefault:"production" desc:"Deployment environment: production applies the production rules and refuses test-only settings; development fills unset secrets with the published development ones."`
	// GatewayToken is the token of the gRPC port's one caller, the
	// gateway; members' and admins' tokens are refused there.
	GatewayToken config.Secret `env:"ORDERFLOW_GATEWAY_RECONCILER_TOKEN" desc:"The token the gateway presents: the reconciler's gRPC serves only calls carrying it. It grants nothing on the admin port." prod:"required, at least 32 bytes, not the development token, no other credential's value"`
	// JWT verifies admin tokens (role admin) for the admin port's profiles;
	// optional (without it nobody is admin).
	JWT auth.Settings
	// Metrics is the scrape token that reads /metrics.
	Metrics auth.ScrapeSettings
	// GRPCReflection is "true", "false" or empty (on in development only).
	GRPCReflection string `env:"ORDERFLOW_GRPC_REFLECTION" desc:"gRPC server reflection: true, false, or empty for on in development only." range:"true, false, empty"`
	RedisPrefix    string `env:"ORDERFLOW_REDIS_PREFIX" envDefault:"orderflow" desc:"Prefix of every Redis key the services write; the services of one deployment must share it."`
	// Schedule holds the query offsets from an order's creation.
	Schedule []time.Duration `env:"ORDERFLOW_RECONCILE_SCHEDULE" envDefault:"5s,30s,1m,3m,5m,10m,30m" envSeparator:"," desc:"Offsets from a payment's creation at which the provider is queried; the last one closes an unpaid order." range:"increasing, positive"`
	// RetryBase and RetryMax bound the backoff after uncertain answers.
	RetryBase time.Duration `env:"ORDERFLOW_RECONCILE_RETRY_BASE" envDefault:"2s" desc:"First backoff after an uncertain provider answer, doubled per retry; each wait is drawn from half to the whole of it, so replicas spread." range:"> 0, ≤ RETRY_MAX"`
	RetryMax  time.Duration `env:"ORDERFLOW_RECONCILE_RETRY_MAX" envDefault:"1m" desc:"Longest backoff after uncertain provider answers." range:"≥ RETRY_BASE"`
	// Concurrency is how many checks one replica runs at once.
	Concurrency int `env:"ORDERFLOW_RECONCILE_CONCURRENCY" envDefault:"32" desc:"Payment checks one replica runs at once." range:"≥ 1"`
	// Lease is how long a replica holds a check without renewing it; a
	// crashed replica's checks run elsewhere after it.
	Lease time.Duration `env:"ORDERFLOW_RECONCILE_LEASE" envDefault:"30s" desc:"How long a replica holds a check without renewing it; a crashed replica's checks run elsewhere after it." range:"≥ 1s"`
	// RepairGrace is how long a payment's creation may take before a
	// repair schedules a first check the creation did not schedule.
	RepairGrace time.Duration `env:"ORDERFLOW_RECONCILE_REPAIR_GRACE" envDefault:"30s" desc:"How long a payment's creation may take before a repair schedules the first check it did not schedule." range:"> 0"`
	// Retention is how long a payment record is kept after creation.
	Retention time.Duration `env:"ORDERFLOW_PAYMENT_RETENTION" envDefault:"720h" desc:"How long a payment record is kept after its creation." range:"≥ last schedule offset + 1h"`
	// ClockSkew offsets this replica's own clock: a fault-injection knob
	// for tests only (refused in production). Schedules stay on Redis TIME, so
	// a skewed replica neither fires checks early nor stamps them wrong.
	ClockSkew time.Duration `env:"ORDERFLOW_RECONCILER_CLOCK_SKEW" envDefault:"0s" desc:"Offsets this reconciler replica's own clock, for the fault suite's skewed-clock row; schedules stay on Redis TIME." prod:"refused" testonly:"true"`
	// RedisBudget bounds each Redis command (with go-redis's retries);
	// once one has run out of it and a ping is not answered within half
	// of it either, every command fails at once until a ping is answered,
	// so while Redis is silent payment calls are answered Unavailable
	// within about a budget instead of waiting.
	RedisBudget time.Duration `env:"ORDERFLOW_RECONCILER_REDIS_BUDGET" envDefault:"1500ms" desc:"Bound of each Redis command with its retries; while Redis is silent payment calls are answered Unavailable within about one budget." range:"≥ 100ms"`
	Redis       redisconn.Config
	Pay         wechatpay.Config
	// GRPCTLS, when set, makes the gRPC port require mutual TLS.
	GRPCTLS grpctls.Config
	// GRPCTLSClientNames are the callers whose client certificates the
	// gRPC port accepts with mutual TLS on.
	GRPCTLSClientNames []string `env:"ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES" envDefault:"orderflow-gateway" envSeparator:"," desc:"With mutual TLS on, the names a client certificate must carry (a DNS subject alternative name or the subject's common name, compared exactly): a certificate from the CA naming anyone else is refused in the handshake. The chart sets the gateway's name." range:"at least one name when ORDERFLOW_GRPC_TLS_* is set"`
}

// Validate checks the configuration; ORDERFLOW_ENV decides whether unset
// secrets get the development values or refuse the start.
func (c *Config) Validate() error {
	var errs []error
	if err := reconcile.ParseSchedule(c.Schedule); err != nil {
		errs = append(errs, fmt.Errorf("ORDERFLOW_RECONCILE_SCHEDULE: %w", err))
	}
	if c.RetryBase <= 0 || c.RetryMax < c.RetryBase {
		errs = append(errs, errors.New("ORDERFLOW_RECONCILE_RETRY_BASE must be positive and at most ORDERFLOW_RECONCILE_RETRY_MAX"))
	}
	if c.RepairGrace <= 0 {
		errs = append(errs, errors.New("ORDERFLOW_RECONCILE_REPAIR_GRACE must be positive"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("ORDERFLOW_RECONCILE_CONCURRENCY must be positive"))
	}
	if c.Lease < time.Second {
		errs = append(errs, errors.New("ORDERFLOW_RECONCILE_LEASE must be at least 1s"))
	}
	if c.Retention < c.Schedule[len(c.Schedule)-1]+time.Hour {
		errs = append(errs, errors.New("ORDERFLOW_PAYMENT_RETENTION must exceed the schedule by at least 1h"))
	}
	if err := c.Env.Secret("ORDERFLOW_GATEWAY_RECONCILER_TOKEN", &c.GatewayToken, auth.MinSecretLen, auth.DevGatewayReconcilerToken); err != nil {
		errs = append(errs, err)
	}
	if err := c.JWT.CheckOptional(c.Env); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.CheckEnv(c.Env); err != nil {
		errs = append(errs, err)
	}
	if err := c.GRPCTLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	for i, n := range c.GRPCTLSClientNames {
		c.GRPCTLSClientNames[i] = strings.TrimSpace(n)
	}
	c.GRPCTLSClientNames = slices.DeleteFunc(c.GRPCTLSClientNames, func(n string) bool { return n == "" })
	if c.GRPCTLS.Enabled() && len(c.GRPCTLSClientNames) == 0 {
		errs = append(errs, errors.New("ORDERFLOW_RECONCILER_GRPC_TLS_CLIENT_NAMES must name at least one caller when mutual TLS is on"))
	}
	if err := c.Redis.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.RedisBudget < 100*time.Millisecond {
		errs = append(errs, errors.New("ORDERFLOW_RECONCILER_REDIS_BUDGET must be at least 100ms"))
	}
	if err := c.Pay.CheckEnv(c.Env); err != nil {
		errs = append(errs, err)
	} else if err := c.Pay.Validate(); err != nil {
		errs = append(errs, err)
	}
	// After the checks above, which fill in development values.
	if err := config.Distinct(
		config.Named{Name: "ORDERFLOW_GATEWAY_RECONCILER_TOKEN", Value: c.GatewayToken},
		config.Named{Name: "ORDERFLOW_METRICS_TOKEN", Value: c.Metrics.Token},
		config.Named{Name: "ORDERFLOW_JWT_SECRET", Value: c.JWT.Secret},
		config.Named{Name: "ORDERFLOW_PAY_APIV3_KEY", Value: c.Pay.APIv3Key}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run serves until ctx ends. ready, when not nil, is called with the
// bound addresses once both listeners are open.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready serve.Ready) error {
	log.Info("starting", "config", cfg) // config.Secret fields marshal masked
	rdb, redisBreaker := redisconn.NewFailFast(cfg.Redis, cfg.RedisBudget, log)
	defer rdb.Close()
	if err := redisconn.Ping(ctx, rdb); err != nil {
		return err
	}
	local := clock.SkewedBy(cfg.ClockSkew)
	if cfg.ClockSkew != 0 {
		log.Warn("this replica's clock is skewed on purpose (ORDERFLOW_RECONCILER_CLOCK_SKEW is for tests only)", "skew", cfg.ClockSkew)
	}
	// Creation times, attempt times and due times are stamped in Redis
	// TIME, the time the delay queue compares due times with, so replicas
	// agree on the schedule whatever their own clocks say.
	now := redisconn.NewServerClock(rdb, local)
	if err := now.Sync(ctx); err != nil {
		return err
	}
	client, err := cfg.Pay.NewClient(log, local)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	queue, svc := newService(rdb, cfg, log, client, now, reg)
	grpcSrv, health, err := newGRPCServer(cfg, log, reg, rpc.New(svc, log, now.Now))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	adminJWT, err := cfg.JWT.OptionalVerifier(ctx)
	if err != nil {
		return err
	}
	// Metrics are read with the scrape token or an admin token; the Go
	// runtime's profiles need an admin token.
	mux.Handle("GET /metrics", auth.ScrapeOrAdmin(metrics.Handler(reg), cfg.Metrics, adminJWT))
	profiling.Register(mux, func(h http.Handler) http.Handler { return auth.AdminOnly(h, adminJWT) })
	// Liveness never looks at Redis; readiness does, and both readiness and
	// gRPC health fail from the moment shutdown begins.
	probes := probe.New(map[string]probe.Check{
		"redis": func(ctx context.Context) error { return redisconn.Ping(ctx, rdb) },
	}, health)
	defer probes.DrainOnDone(ctx)()
	probes.Register(mux)
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: serve.ReadHeaderTimeout, ReadTimeout: serve.BodyTimeout, WriteTimeout: time.Minute, IdleTimeout: serve.IdleTimeout}

	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen grpc %s: %w", cfg.GRPCAddr, err)
	}
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen http %s: %w", cfg.HTTPAddr, err)
	}
	serve.Listening(log, ready, serve.Addrs{HTTP: httpLis.Addr().String(), GRPC: grpcLis.Addr().String()})

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve.GRPC(gctx, grpcSrv, grpcLis) })
	g.Go(func() error { return serve.HTTP(gctx, httpSrv, httpLis) })
	g.Go(func() error { redisBreaker.Run(gctx); return nil })
	g.Go(func() error { now.Run(gctx, 10*time.Second); return nil })
	g.Go(func() error { svc.RunRepair(gctx, 5*time.Second); return nil })
	g.Go(func() error {
		return queue.Run(gctx, func(ctx context.Context, j delayq.Job) error { return svc.Check(ctx, j.ID, j.Due) })
	})
	return g.Wait()
}

// newService builds the delay queue of payment checks and the
// reconciliation service that runs them.
func newService(rdb redis.UniversalClient, cfg Config, log *slog.Logger, client *wechatpay.Client, now *redisconn.ServerClock, reg *prometheus.Registry) (*delayq.Queue, *reconcile.Service) {
	queue := delayq.New(rdb, delayq.Options{
		Name: cfg.RedisPrefix + ":reconcile", Lease: cfg.Lease, Concurrency: cfg.Concurrency,
		Cluster: cfg.Redis.IsCluster(), Registerer: reg, Logger: log,
	})
	svc := reconcile.New(paystore.New(rdb, cfg.RedisPrefix, cfg.Retention), client, queue, reconcile.Options{
		Schedule: cfg.Schedule, RetryBase: cfg.RetryBase, RetryMax: cfg.RetryMax,
		NotifyURL: cfg.Pay.NotifyURL, Logger: log, Registerer: reg, Clock: now, RepairGrace: cfg.RepairGrace,
		Inspector: queue, Events: eventrate.New(rdb, cfg.RedisPrefix),
	})
	return queue, svc
}

// newGRPCServer builds the gRPC server (TLS when configured, the service
// token required) serving api, and reports it serving.
func newGRPCServer(cfg Config, log *slog.Logger, reg *prometheus.Registry, api reconcilerv1.ReconcilerServiceServer) (*grpc.Server, *health.Server, error) {
	var serverOpts []grpc.ServerOption
	if o, err := cfg.GRPCTLS.ServerOption(cfg.GRPCTLSClientNames); err != nil {
		return nil, nil, err
	} else if o != nil {
		serverOpts = append(serverOpts, o)
	}
	// The gRPC port is internal: its allow-list names its one caller.
	callers := auth.Callers{"gateway": cfg.GatewayToken.Reveal()}
	grpcSrv, health := grpcserver.New(log, reg, grpcserver.Options{
		ServerOptions: serverOpts,
		Unary:         []grpc.UnaryServerInterceptor{rpc.UnaryAuth(callers)},
		Stream:        []grpc.StreamServerInterceptor{rpc.StreamAuth(callers)},
		Reflection:    grpcserver.ReflectionFromEnv(cfg.GRPCReflection, cfg.Env.Development()),
	})
	reconcilerv1.RegisterReconcilerServiceServer(grpcSrv, api)
	health.SetServingStatus(reconcilerv1.ReconcilerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return grpcSrv, health, nil
}
