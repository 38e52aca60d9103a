// Package redisconn builds the Redis client every service uses from one
// configuration: a single server, or a Redis Cluster when several seed
// addresses are given.
package redisconn

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/config"
)

// Config is the Redis part of a service's configuration.
type Config struct {
	// Addr is host:port, or a comma-separated list of cluster seed nodes.
	Addr         string        `env:"ORDERFLOW_REDIS_ADDR" envDefault:"127.0.0.1:6379"`
	Password     config.Secret `env:"ORDERFLOW_REDIS_PASSWORD"`
	Cluster      bool          `env:"ORDERFLOW_REDIS_CLUSTER" envDefault:"false"`
	DialTimeout  time.Duration `env:"ORDERFLOW_REDIS_DIAL_TIMEOUT" envDefault:"2s"`
	ReadTimeout  time.Duration `env:"ORDERFLOW_REDIS_READ_TIMEOUT" envDefault:"2s"`
	WriteTimeout time.Duration `env:"ORDERFLOW_REDIS_WRITE_TIMEOUT" envDefault:"2s"`
	PoolSize     int           `env:"ORDERFLOW_REDIS_POOL_SIZE" envDefault:"128"`
}

// New returns a client for cfg, traced with OpenTelemetry. Several
// addresses, or Cluster set, give a cluster client; otherwise a
// single-node client.
func New(cfg Config) redis.UniversalClient {
	addrs := strings.Split(cfg.Addr, ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	opts := &redis.UniversalOptions{
		Addrs:        addrs,
		Password:     cfg.Password.Reveal(),
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		PoolSize:     cfg.PoolSize,
	}
	var c redis.UniversalClient
	if cfg.Cluster || len(addrs) > 1 {
		c = redis.NewClusterClient(opts.Cluster())
	} else {
		c = redis.NewClient(opts.Simple())
	}
	// A span per command (and pipeline) under the caller's span; with the
	// tracer provider unset or unsampled this costs no export. The hook
	// only fails on options it never gets here.
	_ = redisotel.InstrumentTracing(c, redisotel.WithDBStatement(false))
	return c
}

// Ping checks that Redis answers.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}
