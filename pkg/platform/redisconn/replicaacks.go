package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated means a write reached the primary but fewer replicas
// than the configured minimum acknowledged it in time: it may be lost when
// a replica is promoted, so it must not be acknowledged to anyone. Callers
// treat it as any other Redis error (the outcome of the write is unknown).
var ErrNotReplicated = errors.New("redis write not acknowledged by enough replicas")

// RequireReplicaAcks makes every write sent through c wait, before it
// returns, until at least n replicas acknowledge it (Redis WAIT n timeout,
// sent on the same connection right after the write). A write that fewer
// replicas acknowledge within timeout fails with ErrNotReplicated, even
// though the primary applied it. Reads are not delayed. A pipeline that
// writes gets one WAIT at its end; MULTI/EXEC transactions are passed
// through unchanged (the product only reads in them).
//
// While replicas are known to be behind (a write was not acknowledged
// less than timeout ago), writes wait at most a millisecond for them, so a
// stalled replica does not hold every pooled connection for the whole
// timeout; the first write after that window waits the full timeout again.
//
// With n ≥ 1, a failover to a replica that acknowledged (Sentinel promotes
// the replica with the most data) keeps every write the product answered
// on. The cost is one replica round trip per write.
//
// On a Redis Cluster client the wait is installed on every node's client
// (each master waits for its own replicas: WAIT counts the replicas of the
// connection's server), so a write goes with its WAIT to the master of its
// slot, and a write redirected (MOVED, ASK) waits on the master that took
// it. A hook on the cluster client itself would send WAIT to any node, on
// another connection, where it waits for nothing.
func RequireReplicaAcks(c redis.UniversalClient, n int, timeout time.Duration) {
	if n <= 0 {
		return
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) {
			node.AddHook(&replicaAcks{c: node, n: n, timeout: timeout})
		})
		return
	}
	c.AddHook(&replicaAcks{c: c, n: n, timeout: timeout})
}

// replicaAcks is the hook of RequireReplicaAcks.
type replicaAcks struct {
	c       redis.UniversalClient
	n       int
	timeout time.Duration

	// behindUntil is when the last unacknowledged write's window ends
	// (Unix nanoseconds).
	behindUntil atomic.Int64

	mu     sync.Mutex
	writes map[string]bool // command name → writes; nil until COMMAND answered
}

func (h *replicaAcks) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sends a write as a pipeline of the write and WAIT on one
// connection (which ProcessPipelineHook completes); other commands go as
// they are.
func (h *replicaAcks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.isWrite(ctx, cmd) {
			return next(ctx, cmd)
		}
		_, err := h.c.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Process(ctx, cmd) })
		return err
	}
}

// ProcessPipelineHook appends WAIT to a pipeline that writes and fails its
// commands with ErrNotReplicated when too few replicas acknowledged.
//
// The pipeline is sent as PING, the commands, WAIT. The Redis client sends
// a pipeline again (up to its MaxRetries) when the reply to its first
// command is an error it deems passing — NOREPLICAS, READONLY, LOADING,
// MASTERDOWN, as a primary answers while replicas are missing or a
// failover runs — and each time the WAIT would hold the connection for
// the whole timeout although nothing was written: a refused write took
// (1 + MaxRetries) × the timeout, and a request making three writes on its
// way to an error answer several seconds. With the PING first, a write
// the primary refuses fails at once with the primary's error; a broken
// connection is still retried (that error fails every reply).
func (h *replicaAcks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() == "multi" || !h.anyWrite(ctx, cmds) {
			return next(ctx, cmds)
		}
		timeout, behind := h.timeout, time.Now().UnixNano() < h.behindUntil.Load()
		if behind {
			timeout = time.Millisecond
		}
		wait := redis.NewIntCmd(ctx, "wait", h.n, timeout.Milliseconds())
		sent := make([]redis.Cmder, 0, len(cmds)+2)
		sent = append(append(append(sent, redis.NewStatusCmd(ctx, "ping")), cmds...), wait)
		err := next(ctx, sent)
		acked, werr := wait.Result()
		if werr == nil && acked < int64(h.n) && !behind {
			// Replicas are missing or behind (the primary may also have
			// refused the writes): the writes of the next timeout wait no
			// longer than a millisecond for them.
			h.behindUntil.Store(time.Now().Add(h.timeout).UnixNano())
		}
		if werr == nil && acked >= int64(h.n) {
			return cmdsFirstErr(cmds, err)
		}
		nerr := fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, acked, h.n, timeout)
		if werr != nil {
			nerr = fmt.Errorf("%w: wait: %w", ErrNotReplicated, werr)
		}
		failed := false
		for _, c := range cmds {
			if c.Err() == nil {
				c.SetErr(nerr)
			} else {
				failed = true
			}
		}
		if failed || (err != nil && werr == nil) {
			// A command's own error (a refusal, or MOVED after a Redis
			// Cluster failover, which sent the WAIT to a replica) is the
			// pipeline's: the cluster client follows a redirect only when
			// it sees it.
			return cmdsFirstErr(cmds, err)
		}
		return nerr
	}
}

// cmdsFirstErr is the error of the first of cmds that failed, else err
// (the error of the pipeline sent, whose first reply was the PING's).
func cmdsFirstErr(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil {
			return cerr
		}
	}
	return err
}

func (h *replicaAcks) anyWrite(ctx context.Context, cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if h.isWrite(ctx, c) {
			return true
		}
	}
	return false
}

// isWrite reports whether cmd may write: COMMAND's "write" flag, or a
// script or function call (EVAL, EVALSHA, FCALL; not their _RO forms).
// Until COMMAND has answered, every command counts as a write.
func (h *replicaAcks) isWrite(ctx context.Context, cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	switch name {
	case "eval", "evalsha", "fcall":
		return true
	case "wait", "command", "ping", "hello", "auth", "select", "client", "info", "time", "role":
		return false
	}
	writes := h.table(ctx)
	if writes == nil {
		return true
	}
	return writes[name]
}

// table loads the write commands from COMMAND once (retried on the next
// call after a failure).
func (h *replicaAcks) table(ctx context.Context) map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writes != nil {
		return h.writes
	}
	infos, err := h.c.Command(ctx).Result()
	if err != nil {
		return nil
	}
	writes := make(map[string]bool, len(infos))
	for name, info := range infos {
		for _, f := range info.Flags {
			if f == "write" {
				writes[strings.ToLower(name)] = true
			}
		}
	}
	h.writes = writes
	return writes
}
