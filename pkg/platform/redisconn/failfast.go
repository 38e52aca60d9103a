package redisconn

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotAnswering is the error of a command refused without being sent
// because Redis is known not to answer: a command ran out of its budget
// and a ping sent then was not answered either (see NewFailFast). The
// command certainly did not run.
var ErrNotAnswering = errors.New("redis is not answering: a command timed out, and so did a ping")

// probePause is how long the breaker waits between two failed pings.
const probePause = 250 * time.Millisecond

// Breaker bounds every command of a client by a budget and, once a
// command has run out of it and a ping sent then is not answered within
// half of it (Redis silent: packets dropped, no reset, no refusal), fails
// every command at once with ErrNotAnswering until a ping is answered
// or refused (Run sends them). One stalled connection does not open it (the ping
// goes on another), nor does an error other than a time-out (a refused
// connection fails fast by itself), nor a command whose caller stopped
// waiting first.
type Breaker struct {
	c      redis.UniversalClient
	budget time.Duration
	log    *slog.Logger

	open atomic.Bool
	wake chan struct{} // one token: a command ran out of its budget
}

// probeKey marks the context of the breaker's own pings, which go through
// while the breaker is open.
type probeKey struct{}

// NewFailFast returns a client for cfg, as New does, whose commands each
// (with go-redis's retries and its wait for a pooled connection) end
// after budget at the latest, and the Breaker that fails them at once
// while Redis is known not to answer. The caller must run the Breaker's
// Run for as long as it uses the client: without it, the breaker never
// opens or closes. The client follows the deadlines of its callers'
// contexts (go-redis's ContextTimeoutEnabled), so a blocking command must
// be given a context that outlasts it.
func NewFailFast(cfg Config, budget time.Duration, log *slog.Logger) (redis.UniversalClient, *Breaker) {
	b := &Breaker{budget: budget, log: log, wake: make(chan struct{}, 1)}
	b.c = newClient(cfg, b)
	return b.c, b
}

// Open reports whether commands are being refused now.
func (b *Breaker) Open() bool { return b.open.Load() }

// Run pings Redis each time a command has run out of its budget: when
// the ping times out too, it opens the breaker and pings on until one is
// answered (or refused), then closes it. It returns when ctx ends.
func (b *Breaker) Run(ctx context.Context) {
	pctx := context.WithValue(ctx, probeKey{}, true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		for {
			err := b.ping(pctx)
			if ctx.Err() != nil {
				return
			}
			if err == nil || !timedOut(err) {
				// Answered, or refused at once: either way not silent, and
				// the commands' own errors say what is wrong.
				if b.open.CompareAndSwap(true, false) {
					b.log.Info("redis is no longer silent; commands go through again", "ping_err", err)
				}
				break
			}
			if b.open.CompareAndSwap(false, true) {
				b.log.Warn("redis does not answer; failing commands at once until a ping is answered", "budget", b.budget, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(probePause):
			}
		}
	}
}

// ping sends one PING, waiting at most half the budget for its answer.
func (b *Breaker) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.budget/2)
	defer cancel()
	return b.c.Ping(ctx).Err()
}

// DialHook leaves dials alone: the budget's deadline bounds them.
func (b *Breaker) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook guards a single command.
func (b *Breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return b.guard(ctx, func(ctx context.Context) error { return next(ctx, cmd) }, cmd)
	}
}

// ProcessPipelineHook guards a pipeline (or transaction) as one command.
func (b *Breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return b.guard(ctx, func(ctx context.Context) error { return next(ctx, cmds) }, cmds...)
	}
}

// guard refuses cmds while the breaker is open, else runs them within the
// budget and, when they ran out of it while their caller was still
// waiting, has Run check whether Redis answers at all.
func (b *Breaker) guard(ctx context.Context, run func(context.Context) error, cmds ...redis.Cmder) error {
	probe := ctx.Value(probeKey{}) != nil
	if b.open.Load() && !probe {
		for _, c := range cmds {
			c.SetErr(ErrNotAnswering)
		}
		return ErrNotAnswering
	}
	bctx, cancel := context.WithTimeout(ctx, b.budget)
	defer cancel()
	err := run(bctx)
	if err != nil && !probe && ctx.Err() == nil && timedOut(err) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return err
}

// timedOut reports whether err is a deadline passing: a socket's, or a
// context's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
