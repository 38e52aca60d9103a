// Package inflight counts, cluster-wide, the job-queue deliveries that
// consumer replicas hold and have not yet acknowledged (AMQP reports a
// queue's ready messages and consumers, not its unacknowledged ones).
// Each replica reports its own counts to Redis as a heartbeat that states
// when it expires (Redis TIME plus a TTL); a reader sums the reports that
// have not expired, so a replica that dies drops out of the sum at most
// one TTL after its last report, and a replica that stops cleanly removes
// its report at once.
//
// Keys (one hash tag):
//
//	<prefix>:{inflight}  HASH replica -> "<expiry ms>|<queue>=<n>,<queue>=<n>"
//
// Reports are written and read by Lua scripts that take the time from
// Redis TIME, so the replicas' and readers' clocks do not matter.
package inflight

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Queue names of the job queues whose deliveries the split-workers report.
const (
	// Split is the split-job queue.
	Split = "split"
	// Overflow is the overflow queue.
	Overflow = "overflow"
	// Dead is the dead-letter queue.
	Dead = "dead"
)

// Board holds the replicas' reports in Redis.
type Board struct {
	rdb redis.UniversalClient
	key string
}

// New returns a Board whose key starts with prefix.
func New(rdb redis.UniversalClient, prefix string) *Board {
	return &Board{rdb: rdb, key: prefix + ":{inflight}"}
}

// reportScript records a replica's counts until Redis TIME + ttl and keeps
// the hash at least as long.
// KEYS[1] the reports hash
// ARGV[1] replica, ARGV[2] ttl in ms, ARGV[3] counts ("queue=n,...")
// Returns the report's expiry in ms since the epoch (Redis TIME).
var reportScript = redis.NewScript(`
-- KEYS reports | ARGV replica, ttl ms, count | writes the replica's report
local reportsKey = KEYS[1]
local t = redis.call('TIME')
local exp = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('HSET', reportsKey, ARGV[1], exp .. '|' .. ARGV[3])
if redis.call('PTTL', reportsKey) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', reportsKey, ARGV[2])
end
return exp`)

// readScript returns the reports that have not expired and drops the
// others.
// KEYS[1] the reports hash
// Returns {now ms, replica, report, replica, report, ...} (Redis TIME).
var readScript = redis.NewScript(`
-- KEYS reports | drops expired reports, returns {replica, count...}
local reportsKey = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', reportsKey)
local out = {now}
local dead = {}
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], '^(%d+)|'))
  if exp and exp > now then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  else
    dead[#dead + 1] = all[i]
  end
end
if #dead > 0 then redis.call('HDEL', reportsKey, unpack(dead)) end
return out`)

// Report records replica's counts of held deliveries by queue until ttl
// from now (Redis time).
func (b *Board) Report(ctx context.Context, replica string, counts map[string]int64, ttl time.Duration) error {
	queues := make([]string, 0, len(counts))
	for q := range counts {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	parts := make([]string, len(queues))
	for i, q := range queues {
		parts[i] = q + "=" + strconv.FormatInt(counts[q], 10)
	}
	if err := reportScript.Run(ctx, b.rdb, []string{b.key}, replica, ttl.Milliseconds(), strings.Join(parts, ",")).Err(); err != nil {
		return fmt.Errorf("report in-flight deliveries of %s: %w", replica, err)
	}
	return nil
}

// Remove drops replica's report (a replica that stops cleanly).
func (b *Board) Remove(ctx context.Context, replica string) error {
	if err := b.rdb.HDel(ctx, b.key, replica).Err(); err != nil {
		return fmt.Errorf("remove in-flight report of %s: %w", replica, err)
	}
	return nil
}

// Totals are the live reports summed.
type Totals struct {
	// Held is the deliveries held by queue.
	Held map[string]int64
	// Replicas is how many replicas' reports are live.
	Replicas int
	// Time is when they were read (Redis time).
	Time time.Time
}

// Sum adds up the reports that have not expired (and drops the others).
func (b *Board) Sum(ctx context.Context) (Totals, error) {
	res, err := readScript.Run(ctx, b.rdb, []string{b.key}).Slice()
	if err != nil {
		return Totals{}, fmt.Errorf("read in-flight reports: %w", err)
	}
	tot := Totals{Held: map[string]int64{}}
	if len(res) > 0 {
		now, _ := res[0].(int64)
		tot.Time = time.UnixMilli(now)
	}
	for i := 2; i < len(res); i += 2 {
		report, _ := res[i].(string)
		_, counts, _ := strings.Cut(report, "|")
		tot.Replicas++
		for part := range strings.SplitSeq(counts, ",") {
			q, n, ok := strings.Cut(part, "=")
			if !ok {
				continue
			}
			if v, err := strconv.ParseInt(n, 10, 64); err == nil {
				tot.Held[q] += v
			}
		}
	}
	return tot, nil
}

// Heartbeat reports replica's counts (read from counts) every interval,
// valid for ttl, until ctx ends; then it removes the report. A failed
// report is passed to onErr (may be nil) and tried again at the next beat.
func (b *Board) Heartbeat(ctx context.Context, replica string, interval, ttl time.Duration,
	counts func() map[string]int64, onErr func(error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := b.Report(ctx, replica, counts(), ttl); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := b.Remove(rctx, replica); err != nil && onErr != nil {
				onErr(err)
			}
			return
		case <-tick.C:
		}
	}
}
