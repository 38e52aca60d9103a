package redisconn

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/platform/cost"
)

// costHook counts the commands sent under an order step's context
// (package cost); a pipeline or transaction is one round trip.
type costHook struct{}

func (costHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (costHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cost.StepOf(ctx) != "" {
			countCmds(ctx, []redis.Cmder{cmd})
		}
		return next(ctx, cmd)
	}
}

func (costHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cost.StepOf(ctx) != "" {
			countCmds(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// countCmds counts cmds, sent in one round trip, leaving out a
// connection's set-up (HELLO, AUTH, SELECT, READONLY, CLIENT SETINFO …)
// and a transaction's framing (MULTI, EXEC): they follow the pool's dials,
// not the order.
func countCmds(ctx context.Context, cmds []redis.Cmder) {
	var n, scripts int
	var bytes int64
	for _, cmd := range cmds {
		name := cmd.Name()
		switch name {
		case "hello", "auth", "select", "readonly", "client", "multi", "exec":
			continue
		}
		n++
		if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
			scripts++
		}
		bytes += argBytes(cmd.Args())
	}
	if n > 0 {
		cost.AddRedis(ctx, n, scripts, bytes)
	}
}

// argBytes is the size of a command's arguments as sent.
func argBytes(args []any) int64 {
	var n int
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		case int:
			n += len(strconv.Itoa(v))
		case int64:
			n += len(strconv.FormatInt(v, 10))
		default:
			n += 8 // numbers and other scalars, roughly
		}
	}
	return int64(n)
}
