// Package redisconn builds the Redis client every service uses from one
// configuration: a single server, a Redis Cluster when several seed
// addresses are given, or the primary that Redis Sentinel names.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/config"
	"github.com/orderflow/orderflow/pkg/platform/tlsconf"
)

// Config is the Redis part of a service's configuration.
type Config struct {
	// Addr is host:port, or a comma-separated list of cluster seed nodes.
	// It is not used when SentinelAddrs is set.
	Addr string `env:"ORDERFLOW_REDIS_ADDR" envDefault:"127.0.0.1:6379" desc:"Redis host:port, or comma-separated seed nodes of a Redis Cluster; unused with Sentinels."`
	// Username is the ACL user (empty: the default user).
	Username string        `env:"ORDERFLOW_REDIS_USERNAME" desc:"Redis ACL user (empty: the default user)."`
	Password config.Secret `env:"ORDERFLOW_REDIS_PASSWORD" desc:"Redis password."`
	// SentinelAddrs lists Redis Sentinels (host:port); when set, the
	// client connects to the primary they name for SentinelMaster and
	// follows it across failovers.
	SentinelAddrs []string `env:"ORDERFLOW_REDIS_SENTINEL_ADDRS" desc:"Redis Sentinels (host:port, comma-separated); the client follows the primary they name across failovers."`
	// SentinelMaster is the name the Sentinels monitor the primary under.
	SentinelMaster string `env:"ORDERFLOW_REDIS_SENTINEL_MASTER" desc:"Name under which the Sentinels monitor the primary." range:"set with SENTINEL_ADDRS"`
	// SentinelPassword authenticates to the Sentinels themselves
	// (Sentinel's requirepass); Username and Password authenticate to the
	// primary.
	SentinelPassword config.Secret `env:"ORDERFLOW_REDIS_SENTINEL_PASSWORD" desc:"Password of the Sentinels themselves (their requirepass)."`
	Cluster          bool          `env:"ORDERFLOW_REDIS_CLUSTER" envDefault:"false" desc:"Connect to a Redis Cluster (implied by several ORDERFLOW_REDIS_ADDR)." range:"not with Sentinels"`
	DialTimeout      time.Duration `env:"ORDERFLOW_REDIS_DIAL_TIMEOUT" envDefault:"2s" desc:"Bound of opening one Redis connection."`
	ReadTimeout      time.Duration `env:"ORDERFLOW_REDIS_READ_TIMEOUT" envDefault:"2s" desc:"Bound of reading one Redis reply."`
	WriteTimeout     time.Duration `env:"ORDERFLOW_REDIS_WRITE_TIMEOUT" envDefault:"2s" desc:"Bound of writing one Redis command."`
	PoolSize         int           `env:"ORDERFLOW_REDIS_POOL_SIZE" envDefault:"128" desc:"Redis connections one process may hold (per node on a cluster)."`
	// MinReplicaAcks, when above 0, makes every write wait until this many
	// replicas acknowledge it (Redis WAIT) before it counts as done, so a
	// failover to a replica loses nothing the product has answered on;
	// see RequireReplicaAcks. 0 (the default) trusts the primary alone,
	// which must then persist every write (appendfsync always).
	MinReplicaAcks int `env:"ORDERFLOW_REDIS_MIN_REPLICA_ACKS" envDefault:"0" desc:"Replicas that must acknowledge a write (Redis WAIT) before it counts as done; 0 trusts the primary alone, which must then fsync every write." range:"≥ 0"`
	// ReplicaAckTimeout bounds that wait; a write not acknowledged in time
	// fails. It must be shorter than ReadTimeout.
	ReplicaAckTimeout time.Duration `env:"ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT" envDefault:"500ms" desc:"Bound of the wait for replica acknowledgements; a write not acknowledged in time fails." range:"> 0, < READ_TIMEOUT"`
	// TLS connects to Redis (and to the Sentinels) over TLS; setting any
	// TLS file implies it.
	TLS bool `env:"ORDERFLOW_REDIS_TLS" envDefault:"false" desc:"Connect to Redis and the Sentinels over TLS; implied by any TLS file."`
	// TLSCAFile holds the certificates that may sign the server's (empty:
	// the system's roots); TLSCertFile and TLSKeyFile are the client's, for
	// a server with tls-auth-clients.
	TLSCAFile     string `env:"ORDERFLOW_REDIS_TLS_CA_FILE" desc:"CA certificates (PEM) that may sign Redis's certificate (empty: the system's roots)."`
	TLSCertFile   string `env:"ORDERFLOW_REDIS_TLS_CERT_FILE" desc:"Client certificate (PEM) for a Redis with tls-auth-clients."`
	TLSKeyFile    string `env:"ORDERFLOW_REDIS_TLS_KEY_FILE" desc:"Client key (PEM) for a Redis with tls-auth-clients."`
	TLSServerName string `env:"ORDERFLOW_REDIS_TLS_SERVER_NAME" desc:"Name expected in Redis's certificate (empty: the host dialled)."`
}

// tlsFiles is the TLS part of the configuration.
func (c Config) tlsFiles() tlsconf.Files {
	return tlsconf.Files{
		CA: c.TLSCAFile, CAVar: "ORDERFLOW_REDIS_TLS_CA_FILE",
		Cert: c.TLSCertFile, CertVar: "ORDERFLOW_REDIS_TLS_CERT_FILE",
		Key: c.TLSKeyFile, KeyVar: "ORDERFLOW_REDIS_TLS_KEY_FILE",
		ServerName: c.TLSServerName,
	}
}

// tlsConfig is the client TLS configuration, nil when TLS is off.
func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS && !c.tlsFiles().Set() {
		return nil, nil
	}
	return c.tlsFiles().Config()
}

// Validate checks the combination of modes: Sentinel needs both its
// addresses and the primary's name, and excludes Cluster. Each error names
// the variable to fix.
func (c Config) Validate() error {
	var errs []error
	sentinels := splitAddrs(c.SentinelAddrs)
	if len(sentinels) != len(c.SentinelAddrs) {
		errs = append(errs, errors.New("ORDERFLOW_REDIS_SENTINEL_ADDRS has an empty entry"))
	}
	switch {
	case len(c.SentinelAddrs) > 0 && strings.TrimSpace(c.SentinelMaster) == "":
		errs = append(errs, errors.New("ORDERFLOW_REDIS_SENTINEL_MASTER must be set when ORDERFLOW_REDIS_SENTINEL_ADDRS is"))
	case len(c.SentinelAddrs) == 0 && c.SentinelMaster != "":
		errs = append(errs, errors.New("ORDERFLOW_REDIS_SENTINEL_ADDRS must be set when ORDERFLOW_REDIS_SENTINEL_MASTER is"))
	}
	if len(c.SentinelAddrs) > 0 && (c.Cluster || strings.Contains(c.Addr, ",")) {
		errs = append(errs, errors.New("ORDERFLOW_REDIS_SENTINEL_ADDRS cannot be combined with a Redis Cluster (ORDERFLOW_REDIS_CLUSTER or several ORDERFLOW_REDIS_ADDR)"))
	}
	switch {
	case c.MinReplicaAcks < 0:
		errs = append(errs, errors.New("ORDERFLOW_REDIS_MIN_REPLICA_ACKS must not be negative"))
	case c.MinReplicaAcks == 0:
	case c.ReplicaAckTimeout <= 0 || c.ReplicaAckTimeout >= c.ReadTimeout:
		errs = append(errs, errors.New("ORDERFLOW_REDIS_REPLICA_ACK_TIMEOUT must be above 0 and below ORDERFLOW_REDIS_READ_TIMEOUT"))
	}
	if _, err := c.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// splitAddrs trims each address and drops the empty ones.
func splitAddrs(in []string) []string {
	out := make([]string, 0, len(in))
	for _, a := range in {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// IsCluster reports whether cfg names a Redis Cluster (Cluster set, or
// several addresses, without Sentinels): the mode in which New returns a
// cluster client.
func (c Config) IsCluster() bool {
	return len(c.SentinelAddrs) == 0 && (c.Cluster || len(splitAddrs(strings.Split(c.Addr, ","))) > 1)
}

// New returns a client for cfg, traced with OpenTelemetry. Sentinel
// addresses give a failover client that asks the Sentinels for the
// primary of SentinelMaster and reconnects when they promote another;
// several addresses, or Cluster set, give a cluster client; otherwise a
// single-node client. With MinReplicaAcks set, every write waits for that
// many replicas (RequireReplicaAcks). cfg is expected to have passed
// Validate.
func New(cfg Config) redis.UniversalClient { return newClient(cfg, nil) }

// newClient is New, with every command guarded by b when b is not nil.
func newClient(cfg Config, b *Breaker) redis.UniversalClient {
	opts := &redis.UniversalOptions{
		Addrs:        splitAddrs(strings.Split(cfg.Addr, ",")),
		Username:     cfg.Username,
		Password:     cfg.Password.Reveal(),
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		PoolSize:     cfg.PoolSize,
		// One dial per attempt of a command: the client already retries a
		// command whose dial failed (MaxRetries, with backoff), and its
		// default of five dials per attempt made a command to a refused
		// or unreachable server take 4 × 5 dials before it failed (a
		// killed primary, before Sentinel names another: requests answered
		// 503 after 2-3 s instead of at once).
		DialerRetries: 1,
		// The breaker's budget is a deadline on each command's context;
		// the client follows it only with this set.
		ContextTimeoutEnabled: b != nil,
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		// Validate reports this at start; a client that cannot load its
		// files fails every handshake rather than falling back to plain text.
		tc = &tls.Config{MinVersion: tls.VersionTLS12, VerifyConnection: func(tls.ConnectionState) error { return err }}
	}
	opts.TLSConfig = tc
	var c redis.UniversalClient
	switch {
	case len(cfg.SentinelAddrs) > 0:
		opts.Addrs = splitAddrs(cfg.SentinelAddrs)
		opts.MasterName = strings.TrimSpace(cfg.SentinelMaster)
		opts.SentinelPassword = cfg.SentinelPassword.Reveal()
		c = redis.NewFailoverClient(opts.Failover())
	case cfg.IsCluster():
		c = redis.NewClusterClient(opts.Cluster())
	default:
		c = redis.NewClient(opts.Simple())
	}
	// The breaker first, so its budget bounds everything the other hooks
	// send for a command (a replica WAIT, a COMMAND lookup).
	if b != nil {
		c.AddHook(b)
	}
	// A span per command (and pipeline) under the caller's span; with the
	// tracer provider unset or unsampled this costs no export.
	traceCommands(c)
	RequireReplicaAcks(c, cfg.MinReplicaAcks, cfg.ReplicaAckTimeout)
	// Commands under an order step's context are counted (package cost):
	// a context lookup and an atomic add each.
	c.AddHook(costHook{})
	return c
}

// Ping checks that Redis answers.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}
