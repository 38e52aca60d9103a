package delayq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Read-only inspection for operators: the queue's counts and one job's
// state. Nothing here changes the queue.

// maxOverdueBuckets bounds the buckets Stats counts overdue firings in,
// so one call never blocks Redis for long; beyond it the count is a lower
// bound.
const maxOverdueBuckets = 1024

// Stats are a queue's counts at one instant of its time source.
type Stats struct {
	// Now is the queue's time the counts were read at.
	Now time.Time
	// Pending is the number of firings waiting for their due time.
	Pending int64
	// NextDue is when the earliest pending firing is due (zero: none).
	NextDue time.Time
	// Overdue counts pending firings already due; a lower bound when
	// OverdueCapped.
	Overdue       int64
	OverdueCapped bool
	// MaxLateness is how far past its due time the earliest overdue
	// firing is (0 when none is overdue).
	MaxLateness time.Duration
	// InFlight is the number of attempts running on any replica.
	InFlight int64
}

// statsScript reads the counts kept in the queue's own keys and names the
// buckets holding due firings; Stats counts those with ZCOUNT on the
// declared bucket keys.
// KEYS[1] top, KEYS[2] n, KEYS[3] run.
// ARGV[1] now ms or "" for Redis TIME, ARGV[2] most buckets to name.
// Returns {now, pending, next due (-1 when none), capped (0/1), in flight,
// {due buckets}}.
var statsScript = redis.NewScript(luaPrelude + `
-- KEYS top, n, run | ARGV now, most buckets | returns {now, pending, next due, capped, in flight, {due buckets}}
local topKey, countKey, runKey = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms(ARGV[1])
local maxb = tonumber(ARGV[2])
local due = redis.call('ZRANGE', topKey, '-inf', now, 'BYSCORE', 'LIMIT', 0, maxb + 1)
local capped = 0
if #due > maxb then
  capped = 1
  due[#due] = nil
end
return {now, tonumber(redis.call('GET', countKey) or '0'), head(topKey) or -1, capped, redis.call('ZCARD', runKey), due}
`)

// Stats returns the queue's counts. The overdue count is read just after
// the other counts, not in the same instant.
func (q *shard) Stats(ctx context.Context) (Stats, error) {
	keys := []string{q.topKey(), q.countKey(), q.runKey()}
	v, err := statsScript.Run(ctx, q.rdb, keys, q.nowArg(), maxOverdueBuckets).Slice()
	if err != nil {
		return Stats{}, fmt.Errorf("queue stats: %w", err)
	}
	if len(v) != 6 {
		return Stats{}, fmt.Errorf("queue stats: unexpected reply of %d values", len(v))
	}
	now, next := asInt(v[0]), asInt(v[2])
	s := Stats{Now: time.UnixMilli(now), Pending: asInt(v[1]), OverdueCapped: asInt(v[3]) == 1, InFlight: asInt(v[4])}
	if next >= 0 {
		s.NextDue = time.UnixMilli(next)
		if next <= now {
			s.MaxLateness = time.Duration(now-next) * time.Millisecond
		}
	}
	due, _ := v[5].([]any)
	if len(due) == 0 {
		return s, nil
	}
	counts := make([]*redis.IntCmd, len(due))
	pipe := q.rdb.Pipeline()
	for i, b := range due {
		counts[i] = pipe.ZCount(ctx, q.dueKey(asString(b)), "-inf", strconv.FormatInt(now, 10))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, fmt.Errorf("queue stats: count overdue firings: %w", err)
	}
	for _, c := range counts {
		s.Overdue += c.Val()
	}
	return s, nil
}

// JobState is one job's state.
type JobState struct {
	// Scheduled is true while the job exists (pending or running).
	Scheduled bool
	// Due is when its pending firing is due (zero while only an attempt
	// runs). A firing that came due while an attempt runs waits for it
	// and is reported here.
	Due time.Time
	// Attempt counts earlier failed or interrupted attempts of this
	// schedule.
	Attempt int
	// Running is true while an attempt runs; LeaseUntil is when its lease
	// ends unless renewed.
	Running    bool
	LeaseUntil time.Time
}

// lookupScript reads one job.
// KEYS[1] h:<b>, KEYS[2] z:<b>, KEYS[3] run, KEYS[4] own. ARGV[1] id.
// Returns {exists (0/1), attempt, due ms (-1: none), lease deadline ms (-1: not running)}.
var lookupScript = redis.NewScript(luaPrelude + `
-- KEYS h:<b>, z:<b>, run, own | ARGV id | returns {exists, attempt, due ms, lease deadline ms}
local jobsKey, dueKey, runKey, ownKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local rec = redis.call('HGET', jobsKey, ARGV[1])
if not rec then return {0, 0, -1, -1} end
local g, a = parse_rec(rec)
local due = redis.call('ZSCORE', dueKey, ARGV[1])
local lease = redis.call('ZSCORE', runKey, ARGV[1])
local o = redis.call('HGET', ownKey, ARGV[1])
if not due and o then
  local f, og, b, d, p = parse_own(o)
  if p ~= '' then due = p end
end
return {1, a, tonumber(due or '-1'), tonumber(lease or '-1')}
`)

// Lookup returns job id's state; Scheduled is false when there is no
// such job.
func (q *shard) Lookup(ctx context.Context, id string) (JobState, error) {
	if id == "" {
		return JobState{}, ErrEmptyID
	}
	b := bucketOf(id)
	keys := []string{q.jobsKey(b), q.dueKey(b), q.runKey(), q.ownKey()}
	v, err := lookupScript.Run(ctx, q.rdb, keys, id).Int64Slice()
	if err != nil {
		return JobState{}, fmt.Errorf("look up job %s: %w", id, err)
	}
	if len(v) != 4 {
		return JobState{}, fmt.Errorf("look up job %s: unexpected reply of %d values", id, len(v))
	}
	s := JobState{Scheduled: v[0] == 1, Attempt: int(v[1])}
	if v[2] >= 0 {
		s.Due = time.UnixMilli(v[2])
	}
	if v[3] >= 0 {
		s.Running, s.LeaseUntil = true, time.UnixMilli(v[3])
	}
	return s, nil
}
