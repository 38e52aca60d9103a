// Package eventrate counts named events (tasks failed by code, dead
// letters, uncertain provider answers, ...) cluster-wide in Redis, in
// buckets of one minute of Redis TIME, and reads their sums over recent
// windows or minute by minute (Series). It also keeps the peak of sampled
// gauges (slot utilisation, check lateness) in each minute. Every replica adds to the same buckets and every reader sees the
// same sums, so the figures do not depend on which replica answers or how
// many there are.
//
// Keys (a shard's two keys share one hash tag, so each script touches one
// Redis Cluster slot):
//
//	<prefix>:{rates:<shard>}:counts   HASH "<minute>:<name>" -> count
//	<prefix>:{rates:<shard>}:buckets  ZSET "<minute>:<name>" -> minute, to prune
//
// where minute is Redis TIME in whole minutes since the Unix epoch, and
//
//	<prefix>:{gauges}:values   HASH "<minute>:<name>" -> largest value observed
//	<prefix>:{gauges}:buckets  ZSET "<minute>:<name>" -> minute, to prune
//
// Buckets older than Keep are dropped as new ones are written, and every
// key expires Keep after its last write.
//
// On a Redis Cluster the counts are Shards pairs of keys, so the script
// call of every finished task or provider answer spreads over the masters
// instead of bounding them by one master's core: each call adds to one
// shard (the next one of the Counter's round-robin) and a read sums every
// shard, in one pipeline. On one Redis the counts are the one pair
// <prefix>:{rates}:counts and :buckets: shards would cost its one core
// more at every read (each name's bucket in every shard) for nothing. On
// a Cluster that single-tag pair, which earlier versions wrote, is read
// as one more shard, so an upgrade loses no counts; it expires Keep after
// their last write.
package eventrate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keep is how long a bucket is kept; windows are at most this long.
const Keep = 2 * time.Hour

// Names of the events orderflow counts (written by the services, read by
// the operations overview and its charts).
const (
	// TaskSubmitted counts order splits accepted by the gateways.
	TaskSubmitted = "task.submitted"
	// TaskFinished counts tasks that finished (any terminal status).
	TaskFinished = "task.finished"
	// TaskFailed, followed by the error code, counts FAILED tasks.
	TaskFailed = "task.failed."
	// DeadLettered counts dead-lettered split jobs.
	DeadLettered = "task.dead"
	// ProviderAnswer counts the payment provider's answers to the
	// reconciler; ProviderUncertain those it retries (uncertain or
	// unusable).
	ProviderAnswer    = "payment.answer"
	ProviderUncertain = "payment.uncertain"
)

// Shards is the number of shards of the counts on a Redis Cluster.
const Shards = 16

// Counter counts events in Redis.
type Counter struct {
	rdb    redis.UniversalClient
	prefix string
	// shards is Shards on a Redis Cluster, 0 on one Redis (the single
	// pair of keys only).
	shards int
	// next is the round-robin position of the next write's shard.
	next atomic.Uint32
}

// New returns a Counter whose keys start with prefix, sharded when rdb is
// a Redis Cluster client.
func New(rdb redis.UniversalClient, prefix string) *Counter {
	shards := 0
	if _, ok := rdb.(*redis.ClusterClient); ok {
		shards = Shards
	}
	return newCounter(rdb, prefix, shards)
}

func newCounter(rdb redis.UniversalClient, prefix string, shards int) *Counter {
	c := &Counter{rdb: rdb, prefix: prefix, shards: shards}
	// Replicas start at different shards.
	c.next.Store(rand.Uint32())
	return c
}

// keys returns the counts hash and bucket index of shard i, or the single
// pair (one Redis; earlier versions) for i < 0.
func (c *Counter) keys(i int) []string {
	tag := c.prefix + ":{rates}"
	if i >= 0 {
		tag = c.prefix + ":{rates:" + strconv.Itoa(i) + "}"
	}
	return []string{tag + ":counts", tag + ":buckets"}
}

// writeKeys returns the keys the next write adds to: the next shard of the
// round-robin, or the single pair on one Redis. Counts are only ever
// summed, so any shard will do; a round-robin spreads each replica's
// writes evenly, where a hash of the event's name would send every
// finished task's count to one shard.
func (c *Counter) writeKeys() []string {
	if c.shards == 0 {
		return c.keys(-1)
	}
	return c.keys(int(c.next.Add(1) % uint32(c.shards)))
}

// readKeys returns the key pairs a read sums: every shard and the single
// pair.
func (c *Counter) readKeys() [][]string {
	out := make([][]string, 0, c.shards+1)
	for i := range c.shards {
		out = append(out, c.keys(i))
	}
	return append(out, c.keys(-1))
}

// pruneLua ends a write script: it drops the buckets of hashKey and
// indexKey (which the script binds) older than ARGV[1] minutes before
// minute, renews both keys' expiry and returns minute.
const pruneLua = `
local old = redis.call('ZRANGE', indexKey, '-inf', minute - tonumber(ARGV[1]), 'BYSCORE', 'LIMIT', 0, 256)
if #old > 0 then
  redis.call('HDEL', hashKey, unpack(old))
  redis.call('ZREM', indexKey, unpack(old))
end
local ttl = (tonumber(ARGV[1]) + 1) * 60
redis.call('EXPIRE', hashKey, ttl)
redis.call('EXPIRE', indexKey, ttl)
return minute`

// addScript adds to the current minute's buckets and drops buckets older
// than the kept minutes.
// hashKey counts hash, indexKey bucket index
// ARGV[1] minutes kept, then pairs of name and amount
// Returns the minute written.
var addScript = redis.NewScript(`
-- KEYS counts hash, index | ARGV minutes kept, name, amount... | returns the minute written
local hashKey, indexKey = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local minute = math.floor(tonumber(t[1]) / 60)
for i = 2, #ARGV, 2 do
  local f = minute .. ':' .. ARGV[i]
  redis.call('HINCRBY', hashKey, f, ARGV[i + 1])
  redis.call('ZADD', indexKey, minute, f)
end
` + pruneLua)

// Add adds n to the named event's count in the current minute (Redis
// TIME). A name may contain any character, ':' included.
func (c *Counter) Add(ctx context.Context, name string, n int64) error {
	return c.AddAll(ctx, map[string]int64{name: n})
}

// AddAll adds every named amount in one round trip, to one shard.
func (c *Counter) AddAll(ctx context.Context, counts map[string]int64) error {
	args := []any{int64(Keep / time.Minute)}
	for name, n := range counts {
		if n != 0 {
			args = append(args, name, n)
		}
	}
	if len(args) == 1 {
		return nil
	}
	if err := addScript.Run(ctx, c.rdb, c.writeKeys(), args...).Err(); err != nil {
		return fmt.Errorf("count events: %w", err)
	}
	return nil
}

// readScript returns the current time and the buckets of the last minutes.
// hashKey counts hash, indexKey bucket index
// ARGV[1] minutes to read (the current one included)
// Returns {now seconds, now microseconds, field, count, field, count, ...}.
var readScript = redis.NewScript(`
-- KEYS counts hash, index | ARGV minutes to read | returns {seconds, microseconds, field, count...}
local hashKey, indexKey = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local minute = math.floor(tonumber(t[1]) / 60)
local out = {t[1], t[2]}
local fields = redis.call('ZRANGE', indexKey, minute - tonumber(ARGV[1]) + 1, '+inf', 'BYSCORE')
if #fields == 0 then return out end
local vals = redis.call('HMGET', hashKey, unpack(fields))
for i = 1, #fields do
  if vals[i] then
    out[#out + 1] = fields[i]
    out[#out + 1] = vals[i]
  end
end
return out`)

// Window is the events counted over a recent window.
type Window struct {
	// Start is the start of the window's oldest minute; End is when it was
	// read (Redis TIME). End - Start is between Minutes-1 and Minutes
	// minutes.
	Start, End time.Time
	// Minutes is the number of one-minute buckets the window spans.
	Minutes int
	// Counts are the events by name.
	Counts map[string]int64
}

// Sum returns the sum of the counts whose name starts with prefix.
func (w Window) Sum(prefix string) int64 {
	var n int64
	for name, c := range w.Counts {
		if strings.HasPrefix(name, prefix) {
			n += c
		}
	}
	return n
}

// Names returns the names starting with prefix, largest count first (then
// by name).
func (w Window) Names(prefix string) []string {
	var out []string
	for name := range w.Counts {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if w.Counts[out[i]] != w.Counts[out[j]] {
			return w.Counts[out[i]] > w.Counts[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

// Windows reads the counts of the last minutes[i] one-minute buckets (the
// current minute included) for each i, in one round trip (one per master
// on a Redis Cluster, every shard read in one pipeline). Every window is
// at most Keep long. The time is the latest Redis TIME the shards
// answered with.
func (c *Counter) Windows(ctx context.Context, minutes ...int) ([]Window, error) {
	longest := 1
	for _, m := range minutes {
		if err := validMinutes(m); err != nil {
			return nil, fmt.Errorf("read event counts: %w", err)
		}
		longest = max(longest, m)
	}
	now, buckets, err := c.read(ctx, c.readKeys(), longest)
	if err != nil {
		return nil, fmt.Errorf("read event counts: %w", err)
	}
	minute := now.Unix() / 60
	out := make([]Window, len(minutes))
	for i, m := range minutes {
		out[i] = Window{Start: time.Unix((minute-int64(m)+1)*60, 0).UTC(), End: now, Minutes: m, Counts: map[string]int64{}}
	}
	for _, pair := range buckets {
		for _, b := range pair {
			n, err := strconv.ParseInt(b.value, 10, 64)
			if err != nil {
				continue
			}
			for j, m := range minutes {
				if b.minute > minute-int64(m) {
					out[j].Counts[b.name] += n
				}
			}
		}
	}
	return out, nil
}

func validMinutes(m int) error {
	if m < 1 || time.Duration(m)*time.Minute > Keep {
		return fmt.Errorf("window of %d minutes not in 1..%d", m, int(Keep/time.Minute))
	}
	return nil
}

// bucket is one "<minute>:<name>" field of a counts or gauges hash and
// its value.
type bucket struct {
	minute int64
	name   string
	value  string
}

// read runs readScript on every pair of keys in one pipeline and returns
// the latest Redis TIME they answered with and, for each pair, its buckets
// of the last minutes (the current one included).
func (c *Counter) read(ctx context.Context, keys [][]string, minutes int) (time.Time, [][]bucket, error) {
	cmds := make([]*redis.Cmd, len(keys))
	pipe := c.rdb.Pipeline()
	for i, k := range keys {
		cmds[i] = readScript.EvalSha(ctx, pipe, k, minutes)
	}
	_, _ = pipe.Exec(ctx)
	var now time.Time
	out := make([][]bucket, len(keys))
	for i, cmd := range cmds {
		vals, err := cmd.StringSlice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script cache is empty (a restart): nothing ran here.
			vals, err = readScript.Run(ctx, c.rdb, keys[i], minutes).StringSlice()
		}
		if err != nil {
			return time.Time{}, nil, err
		}
		if len(vals) < 2 {
			return time.Time{}, nil, fmt.Errorf("short answer %q", vals)
		}
		sec, err1 := strconv.ParseInt(vals[0], 10, 64)
		usec, err2 := strconv.ParseInt(vals[1], 10, 64)
		if err1 != nil || err2 != nil {
			return time.Time{}, nil, fmt.Errorf("bad time %q", vals[:2])
		}
		if t := time.Unix(sec, usec*1000).UTC(); t.After(now) {
			now = t
		}
		for j := 2; j+1 < len(vals); j += 2 {
			at, name, ok := strings.Cut(vals[j], ":")
			m, err := strconv.ParseInt(at, 10, 64)
			if !ok || err != nil {
				continue
			}
			out[i] = append(out[i], bucket{minute: m, name: name, value: vals[j+1]})
		}
	}
	return now, out, nil
}

// gaugeKeys returns the gauges hash and its bucket index. Gauges are
// written once per sampling interval by each gateway replica, so one
// pair (one Redis Cluster slot) carries them.
func (c *Counter) gaugeKeys() []string {
	tag := c.prefix + ":{gauges}"
	return []string{tag + ":values", tag + ":buckets"}
}

// observeScript keeps, for each named gauge, the largest value observed in
// the current minute, and drops buckets older than the kept minutes.
// hashKey gauges hash, indexKey bucket index
// ARGV[1] minutes kept, then pairs of name and value
// Returns the minute written.
var observeScript = redis.NewScript(`
-- KEYS gauges hash, index | ARGV minutes kept, name, value... | returns the minute written
local hashKey, indexKey = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local minute = math.floor(tonumber(t[1]) / 60)
for i = 2, #ARGV, 2 do
  local f = minute .. ':' .. ARGV[i]
  local cur = redis.call('HGET', hashKey, f)
  if not cur or tonumber(ARGV[i + 1]) > tonumber(cur) then
    redis.call('HSET', hashKey, f, ARGV[i + 1])
  end
  redis.call('ZADD', indexKey, minute, f)
end
` + pruneLua)

// Observe records sampled values of named gauges (slot utilisation, check
// lateness, ...) in the current minute (Redis TIME), in one round trip.
// Each minute keeps the largest value observed in it by any replica, so
// a minute's figure is its peak. Values must be finite.
func (c *Counter) Observe(ctx context.Context, values map[string]float64) error {
	args := []any{int64(Keep / time.Minute)}
	for name, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("observe gauge %s: value %v is not finite", name, v)
		}
		args = append(args, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	if len(args) == 1 {
		return nil
	}
	if err := observeScript.Run(ctx, c.rdb, c.gaugeKeys(), args...).Err(); err != nil {
		return fmt.Errorf("observe gauges: %w", err)
	}
	return nil
}

// Series is the events counted and the gauges observed in each of the
// last Minutes one-minute buckets, oldest first.
type Series struct {
	// Start is the start of the oldest minute; minute i starts at
	// Start + i minutes. End is when the series was read (Redis TIME),
	// within the newest minute.
	Start, End time.Time
	// Minutes is the number of one-minute buckets.
	Minutes int
	// Counts are the events by name, Minutes long each.
	Counts map[string][]int64
	// Gauges are the largest value observed in each minute by name,
	// Minutes long each; NaN where nothing was observed.
	Gauges map[string][]float64
}

// Sum returns, for each minute, the sum of the counts whose name starts
// with prefix.
func (s Series) Sum(prefix string) []int64 {
	out := make([]int64, s.Minutes)
	for name, counts := range s.Counts {
		if strings.HasPrefix(name, prefix) {
			for i, n := range counts {
				out[i] += n
			}
		}
	}
	return out
}

// Gauge returns the named gauge's values, Minutes long, NaN where nothing
// was observed.
func (s Series) Gauge(name string) []float64 {
	if g, ok := s.Gauges[name]; ok {
		return g
	}
	return nans(s.Minutes)
}

// nans returns n NaNs.
func nans(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}

// Series reads the counts and gauges of the last minutes one-minute
// buckets (the current minute included), minute by minute, in one round
// trip (one per master on a Redis Cluster). minutes is at most Keep long.
func (c *Counter) Series(ctx context.Context, minutes int) (Series, error) {
	if err := validMinutes(minutes); err != nil {
		return Series{}, fmt.Errorf("read event series: %w", err)
	}
	counts := c.readKeys()
	now, buckets, err := c.read(ctx, append(counts, c.gaugeKeys()), minutes)
	if err != nil {
		return Series{}, fmt.Errorf("read event series: %w", err)
	}
	first := now.Unix()/60 - int64(minutes) + 1
	s := Series{Start: time.Unix(first*60, 0).UTC(), End: now, Minutes: minutes, Counts: map[string][]int64{}, Gauges: map[string][]float64{}}
	for _, pair := range buckets[:len(counts)] {
		for _, b := range pair {
			n, err := strconv.ParseInt(b.value, 10, 64)
			if err != nil || b.minute < first || b.minute >= first+int64(minutes) {
				continue
			}
			if s.Counts[b.name] == nil {
				s.Counts[b.name] = make([]int64, minutes)
			}
			s.Counts[b.name][b.minute-first] += n
		}
	}
	for _, b := range buckets[len(counts)] {
		v, err := strconv.ParseFloat(b.value, 64)
		if err != nil || b.minute < first || b.minute >= first+int64(minutes) {
			continue
		}
		if s.Gauges[b.name] == nil {
			s.Gauges[b.name] = nans(minutes)
		}
		if g := s.Gauges[b.name]; math.IsNaN(g[b.minute-first]) || v > g[b.minute-first] {
			g[b.minute-first] = v
		}
	}
	return s, nil
}
