package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlowRepliesRedis returns a client of the shared Redis that takes the
// reply to every single command extra late, after it arrived: a loaded machine that gets round
// to reading Redis' answers late, so each round trip is lopsided (the
// command reaches Redis at once, the answer is seen extra later).
func SlowRepliesRedis(t testing.TB, extra time.Duration) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	t.Cleanup(func() { _ = rdb.Close() })
	// Connect first: a connection's set-up commands must not be slowed,
	// or the first command would reach Redis late.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s unavailable: %v", RedisAddr(), err)
	}
	rdb.AddHook(slowReplies{by: extra})
	return rdb
}

type slowReplies struct{ by time.Duration }

func (slowReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s slowReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		time.Sleep(s.by)
		return err
	}
}

// ProcessPipelineHook leaves pipelines alone, among them the commands
// that set up a new connection: only the replies of single commands are
// late, never the sending of one.
func (slowReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
