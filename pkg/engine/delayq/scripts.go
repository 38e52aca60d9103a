package delayq

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// luaPrelude holds the helpers shared by the scripts.
const luaPrelude = `
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse_rec(rec)
  local g, a = string.match(rec, '^(%d+):(%d+):')
  return g, tonumber(a), string.sub(rec, #g + #a + 3)
end
local function parse_own(o)
  return string.match(o, '^(%d+):(%d+):(%d+):(%d+):(%d*)$')
end
local function fix_top(top, zk, b)
  local f = redis.call('ZRANGE', zk, 0, 0, 'WITHSCORES')
  if #f == 0 then redis.call('ZREM', top, b) else redis.call('ZADD', top, f[2], b) end
end
local function head(key)
  local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #h == 0 then return nil end
  return tonumber(h[2])
end
local function add_due(top, zk, n, chan, b, id, due)
  local before = head(top)
  if redis.call('ZADD', zk, due, id) == 1 then redis.call('INCR', n) end
  fix_top(top, zk, b)
  if before == nil or tonumber(due) < before then redis.call('PUBLISH', chan, due) end
end
local function clear_deferred(own, id)
  local o = redis.call('HGET', own, id)
  if o then
    local f, g, b, d, p = parse_own(o)
    if p ~= '' then redis.call('HSET', own, id, f .. ':' .. g .. ':' .. b .. ':' .. d .. ':') end
  end
end
`

// scheduleScript upserts a job: new generation, attempt 0, new payload, new
// due time. A firing deferred behind a running attempt is superseded.
// KEYS[1] top, KEYS[2] z:<b>, KEYS[3] h:<b>, KEYS[4] n, KEYS[5] seq, KEYS[6] own.
// ARGV[1] id, ARGV[2] due ms, ARGV[3] payload, ARGV[4] bucket, ARGV[5] wake channel.
// Returns 1 when the id was new, 0 when it replaced a job.
var scheduleScript = redis.NewScript(luaPrelude + `
-- KEYS top, z:<b>, h:<b>, n, seq, own | ARGV id, due ms, payload, bucket, channel | returns 1 new, 0 replaced
local topKey, dueKey, jobsKey, countKey, seqKey, ownKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local gen = redis.call('INCR', seqKey)
local added = redis.call('HSET', jobsKey, ARGV[1], gen .. ':0:' .. ARGV[3])
clear_deferred(ownKey, ARGV[1])
add_due(topKey, dueKey, countKey, ARGV[5], ARGV[4], ARGV[1], ARGV[2])
return added
`)

// cancelScript removes a job's pending firing and record; a running attempt
// finishes but is neither retried nor rescheduled.
// KEYS[1] top, KEYS[2] z:<b>, KEYS[3] h:<b>, KEYS[4] n, KEYS[5] own.
// ARGV[1] id, ARGV[2] bucket.
// Returns 1 when the job existed, else 0.
var cancelScript = redis.NewScript(luaPrelude + `
-- KEYS top, z:<b>, h:<b>, n, own | ARGV id, bucket | returns 1 existed, 0 not
local topKey, dueKey, jobsKey, countKey, ownKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local had = redis.call('HDEL', jobsKey, ARGV[1])
if redis.call('ZREM', dueKey, ARGV[1]) == 1 then
  redis.call('DECR', countKey)
  fix_top(topKey, dueKey, ARGV[2])
end
clear_deferred(ownKey, ARGV[1])
return had
`)

// claimScript takes up to max due jobs: first attempts whose lease expired
// (their replica died), then due firings in due-time order. A firing whose
// job is still running elsewhere is deferred until that attempt ends.
// Due times are compared with ARGV[1] (the queue's time); leases always
// with Redis TIME, so a fake clock's jumps never expire a lease.
//
// The script touches only the keys it is given: the buckets it may need
// are declared in KEYS (z:<b>, h:<b> for each bucket b in ARGV[5...]). When
// the job it comes to next lives in a bucket that was not declared, it
// stops there (nothing of that job changed) and asks for that bucket; every
// reply also names the buckets due first, so the caller's next claim
// usually declares exactly what it needs.
// KEYS[1] top, KEYS[2] run, KEYS[3] own, KEYS[4] n, KEYS[5] seq,
// KEYS[4+2i] z:<b_i>, KEYS[5+2i] h:<b_i> for i >= 1.
// ARGV[1] now ms or "" for Redis TIME, ARGV[2] max jobs, ARGV[3] lease ms,
// ARGV[4] wake channel, ARGV[4+i] bucket b_i.
// Returns {now, next due (-1 when none), pending, TIME ms, next lease
// deadline (-1 when none), stopped (1: a bucket was missing), {buckets to
// declare next: missing ones first, then those due first},
// (id, payload, due, attempt, fence, bucket, rerun)...}.
var claimScript = redis.NewScript(luaPrelude + `
-- KEYS top, run, own, n, seq, then z:<b>, h:<b> per bucket | ARGV now, max, lease ms, channel, buckets | returns {now, next due, pending, TIME, next lease, stopped, {buckets}, jobs...}
local topKey, runKey, ownKey, countKey, seqKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local hintBuckets = ` + strconv.Itoa(hintBuckets) + `
local now = now_ms(ARGV[1])
local tnow = now_ms('')
local max = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local bk = {}
for i = 5, #ARGV do bk[ARGV[i]] = {KEYS[2 * i - 4], KEYS[2 * i - 3]} end
local want, wanted, stopped = {}, {}, 0
local function ask(b)
  if not wanted[b] then wanted[b] = true; want[#want + 1] = b end
  stopped = 1
end
local out = {}
local cnt = 0
local function take(id, g, a, pl, b, d, rerun)
  local fence = redis.call('INCR', seqKey)
  redis.call('ZADD', runKey, tnow + lease, id)
  redis.call('HSET', ownKey, id, fence .. ':' .. g .. ':' .. b .. ':' .. d .. ':')
  for _, v in ipairs({id, pl, d, a, fence, b, rerun}) do out[#out + 1] = v end
  cnt = cnt + 1
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', runKey, '-inf', tnow, 'LIMIT', 0, max)) do
  local o = redis.call('HGET', ownKey, id)
  if not o then
    redis.call('ZREM', runKey, id)
  else
    local f, g, b, d, p = parse_own(o)
    local k = bk[b]
    if not k then
      ask(b)
    else
      redis.call('ZREM', runKey, id)
      local rec = redis.call('HGET', k[2], id)
      if rec then
        local rg, a, pl = parse_rec(rec)
        if rg == g then
          a = a + 1
          redis.call('HSET', k[2], id, rg .. ':' .. a .. ':' .. pl)
          take(id, g, a, pl, b, d, 1)
        else
          redis.call('HDEL', ownKey, id)
          if p ~= '' then add_due(topKey, k[1], countKey, ARGV[4], b, id, p) end
        end
      else
        redis.call('HDEL', ownKey, id)
      end
    end
  end
end
local guard = 0
while cnt < max and guard < max + 64 do
  guard = guard + 1
  local h = redis.call('ZRANGE', topKey, 0, 0, 'WITHSCORES')
  if #h == 0 or tonumber(h[2]) > now then break end
  local b = h[1]
  local k = bk[b]
  if not k then
    ask(b)
    break
  end
  local zk, hk = k[1], k[2]
  local due = redis.call('ZRANGEBYSCORE', zk, '-inf', now, 'WITHSCORES', 'LIMIT', 0, max - cnt)
  for i = 1, #due, 2 do
    local id, d = due[i], due[i + 1]
    redis.call('ZREM', zk, id)
    redis.call('DECR', countKey)
    local o = redis.call('HGET', ownKey, id)
    if o then
      local f, g, ob, od = parse_own(o)
      redis.call('HSET', ownKey, id, f .. ':' .. g .. ':' .. ob .. ':' .. od .. ':' .. d)
    else
      local rec = redis.call('HGET', hk, id)
      if rec then
        local g, a, pl = parse_rec(rec)
        take(id, g, a, pl, b, d, 0)
      end
    end
  end
  fix_top(topKey, zk, b)
end
for _, b in ipairs(redis.call('ZRANGE', topKey, 0, math.max(max, hintBuckets) - 1)) do
  if not wanted[b] then wanted[b] = true; want[#want + 1] = b end
end
local res = {now, head(topKey) or -1, tonumber(redis.call('GET', countKey) or '0'), tnow, head(runKey) or -1, stopped, want}
for _, v in ipairs(out) do res[#res + 1] = v end
return res
`)

// renewScript extends the lease of a running attempt that still holds the
// job's fence.
// KEYS[1] run, KEYS[2] own. ARGV[1] id, ARGV[2] fence, ARGV[3] lease ms.
// Returns 1 when renewed, 0 when the attempt lost the job.
var renewScript = redis.NewScript(luaPrelude + `
-- KEYS run, own | ARGV id, fence, lease ms | returns 1 renewed, 0 lost
local runKey, ownKey = KEYS[1], KEYS[2]
local o = redis.call('HGET', ownKey, ARGV[1])
if not o or string.match(o, '^(%d+):') ~= ARGV[2] then return 0 end
redis.call('ZADD', runKey, now_ms('') + tonumber(ARGV[3]), ARGV[1])
return 1
`)

// finishScript ends an attempt that holds the job's fence. mode "ack"
// deletes the job; "retry" schedules it again after ARGV[5] ms with
// attempt+1; "release" puts it back at its due time with the same attempt.
// Whatever the mode, a job rescheduled while running keeps its new
// schedule, and a cancelled one stays gone.
// KEYS[1] top, KEYS[2] run, KEYS[3] own, KEYS[4] n, KEYS[5] h:<b>, KEYS[6] z:<b>.
// ARGV[1] id, ARGV[2] fence, ARGV[3] mode, ARGV[4] now ms or "" for Redis
// TIME, ARGV[5] backoff ms, ARGV[6] wake channel, ARGV[7] bucket.
// Returns 1 when applied, 0 when the attempt had lost the job.
var finishScript = redis.NewScript(luaPrelude + `
-- KEYS top, run, own, n, h:<b>, z:<b> | ARGV id, fence, mode, now, backoff ms, channel, bucket | returns 1 applied, 0 lost
local topKey, runKey, ownKey, countKey, jobsKey, dueKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local o = redis.call('HGET', ownKey, ARGV[1])
if not o then return 0 end
local f, g, b, d, p = parse_own(o)
if f ~= ARGV[2] then return 0 end
redis.call('ZREM', runKey, ARGV[1])
redis.call('HDEL', ownKey, ARGV[1])
local rec = redis.call('HGET', jobsKey, ARGV[1])
if not rec then return 1 end
local rg, a, pl = parse_rec(rec)
if rg ~= g then
  if p ~= '' then add_due(topKey, dueKey, countKey, ARGV[6], ARGV[7], ARGV[1], p) end
  return 1
end
if ARGV[3] == 'ack' then
  redis.call('HDEL', jobsKey, ARGV[1])
  return 1
end
local due = d
if ARGV[3] == 'retry' then
  a = a + 1
  due = now_ms(ARGV[4]) + tonumber(ARGV[5])
end
redis.call('HSET', jobsKey, ARGV[1], rg .. ':' .. a .. ':' .. pl)
add_due(topKey, dueKey, countKey, ARGV[6], ARGV[7], ARGV[1], due)
return 1
`)
