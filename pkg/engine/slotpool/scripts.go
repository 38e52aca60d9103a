package slotpool

import "github.com/redis/go-redis/v9"

// Every script of the pool runs on the same key layout and starts with the
// same prelude, so that any call (acquire, renew, release, the janitor's
// tick, a capacity change) first reclaims expired holders and drops stale
// waiters and finally promotes the head of the pending queue into every
// free slot. Grants therefore never wait for a particular replica to act.
//
// KEYS (all in the hash tag {<name>}):
//
//	[1] capacity  string: N, written from ARGV[1] when missing
//	[2] holders   zset:   token -> lease deadline (ms, Redis TIME)
//	[3] hold      hash:   token -> "grantedMs|leaseMs|jobID"
//	[4] pending   zset:   token -> sequence number (FIFO order)
//	[5] pinfo     hash:   token -> "enqueuedMs|leaseMs|jobID"
//	[6] pdeadline zset:   token -> waiter heartbeat deadline (ms)
//	[7] seq       string: sequence counter of the pending queue
//	[8] finished  stream: job, outcome (1 completed, 2 failed), detail, token, held_ms
//	[9] reclaimed string: total leases reclaimed
//
// ARGV common to all scripts:
//
//	[1] default capacity, [2] finished stream MAXLEN (~), [3] grant channel;
//	script-specific arguments start at ARGV[4].
//
// Every script returns the same array:
//
//	{status, grantedMs, reclaimed, dropped, capacity, inUse, waiting, {granted tokens}}
//
// where status is script-specific, grantedMs is the grant time of ARGV[4]
// when it holds a slot (else 0), reclaimed/dropped count the expired
// holders and stale waiters removed by this call, and granted lists the
// waiters promoted by this call. Each grant is also published on the
// grant channel as "token|grantedMs" so the waiter wakes at once.
//
// All times come from redis.call('TIME'): lease deadlines do not depend on
// the clocks of the replicas. Redis 7 replicates script effects, so TIME
// before a write is allowed.
const prelude = `
local now
do
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fields(v)
  local i = string.find(v, '|', 1, true)
  local j = string.find(v, '|', i + 1, true)
  return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1, j - 1)), string.sub(v, j + 1)
end
local cap = redis.call('GET', KEYS[1])
if cap then
  cap = tonumber(cap)
else
  cap = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
end
local reclaimed, dropped, granted = 0, 0, {}
for _, tok in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)) do
  local v = redis.call('HGET', KEYS[3], tok)
  local job, held = '', 0
  if v then
    local since, _, j = fields(v)
    job, held = j, now - since
  end
  redis.call('ZREM', KEYS[2], tok)
  redis.call('HDEL', KEYS[3], tok)
  redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[2], '*',
    'job', job, 'outcome', '2', 'detail', 'lease expired', 'token', tok, 'held_ms', held)
  reclaimed = reclaimed + 1
end
if reclaimed > 0 then redis.call('INCRBY', KEYS[9], reclaimed) end
for _, tok in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', KEYS[4], tok)
  redis.call('ZREM', KEYS[6], tok)
  redis.call('HDEL', KEYS[5], tok)
  dropped = dropped + 1
end
-- promote grants the free slots to the head of the pending queue.
local function promote()
  local free = cap - redis.call('ZCARD', KEYS[2])
  if free <= 0 then return end
  for _, tok in ipairs(redis.call('ZRANGE', KEYS[4], 0, free - 1)) do
    local v = redis.call('HGET', KEYS[5], tok)
    redis.call('ZREM', KEYS[4], tok)
    redis.call('ZREM', KEYS[6], tok)
    redis.call('HDEL', KEYS[5], tok)
    if v then
      local _, lease, job = fields(v)
      redis.call('ZADD', KEYS[2], now + lease, tok)
      redis.call('HSET', KEYS[3], tok, now .. '|' .. lease .. '|' .. job)
      redis.call('PUBLISH', ARGV[3], tok .. '|' .. now)
      granted[#granted + 1] = tok
    end
  end
end
-- result promotes, then reports. With tok set, status is computed for it:
-- 1 holds a slot, 0 still pending, -1 neither.
local function result(status, tok)
  promote()
  local since = 0
  if tok then
    local v = redis.call('HGET', KEYS[3], tok)
    if v then
      status = 1
      since = fields(v)
    elseif redis.call('ZSCORE', KEYS[4], tok) then
      status = 0
    else
      status = -1
    end
  end
  return {status, since, reclaimed, dropped, cap, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[4]), granted}
end
`

// enqueueScript appends a waiter to the pending queue and promotes.
// ARGV[4] token, ARGV[5] job id, ARGV[6] lease ms, ARGV[7] waiter TTL ms.
// Status: 1 granted at once, 0 pending.
var enqueueScript = redis.NewScript(prelude + `
local tok = ARGV[4]
local seq = redis.call('INCR', KEYS[7])
redis.call('ZADD', KEYS[4], seq, tok)
redis.call('ZADD', KEYS[6], now + tonumber(ARGV[7]), tok)
redis.call('HSET', KEYS[5], tok, now .. '|' .. ARGV[6] .. '|' .. ARGV[5])
return result(0, tok)
`)

// pollScript renews a waiter's heartbeat and reports whether it was granted.
// ARGV[4] token, ARGV[5] waiter TTL ms.
// Status: 1 granted, 0 still pending, -1 dropped (heartbeat expired).
var pollScript = redis.NewScript(prelude + `
local tok = ARGV[4]
if redis.call('ZSCORE', KEYS[6], tok) then
  redis.call('ZADD', KEYS[6], 'XX', now + tonumber(ARGV[5]), tok)
end
return result(0, tok)
`)

// cancelScript withdraws a waiter; if it was granted meanwhile, the slot is
// freed (the job never started, so nothing is recorded).
// ARGV[4] token.
// Status: 0 removed from pending, 1 freed a granted slot, -1 not found.
var cancelScript = redis.NewScript(prelude + `
local tok = ARGV[4]
local st = -1
if redis.call('ZREM', KEYS[4], tok) == 1 then
  redis.call('ZREM', KEYS[6], tok)
  redis.call('HDEL', KEYS[5], tok)
  st = 0
elseif redis.call('HDEL', KEYS[3], tok) == 1 then
  redis.call('ZREM', KEYS[2], tok)
  st = 1
end
return result(st)
`)

// renewScript extends a holder's lease.
// ARGV[4] token, ARGV[5] lease ms.
// Status: 1 renewed, 0 lost (reclaimed or released).
var renewScript = redis.NewScript(prelude + `
local tok = ARGV[4]
if redis.call('ZSCORE', KEYS[2], tok) then
  redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[5]), tok)
  return result(1)
end
return result(0)
`)

// releaseScript frees a slot, records the outcome in the finished stream and
// promotes the next waiter.
// ARGV[4] token, ARGV[5] outcome (1 completed, 2 failed), ARGV[6] detail.
// Status: 1 released, 0 lost (the lease was reclaimed before).
var releaseScript = redis.NewScript(prelude + `
local tok = ARGV[4]
local v = redis.call('HGET', KEYS[3], tok)
if not v then return result(0) end
local since, _, job = fields(v)
redis.call('ZREM', KEYS[2], tok)
redis.call('HDEL', KEYS[3], tok)
redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[2], '*',
  'job', job, 'outcome', ARGV[5], 'detail', ARGV[6], 'token', tok, 'held_ms', now - since)
return result(1)
`)

// tickScript is the janitor's pass: reclaim, drop stale waiters, promote.
// No extra ARGV. Status: 0.
var tickScript = redis.NewScript(prelude + `
return result(0)
`)

// setCapacityScript changes N and promotes waiters into new free slots.
// ARGV[4] new capacity. Status: 1.
var setCapacityScript = redis.NewScript(prelude + `
redis.call('SET', KEYS[1], ARGV[4])
cap = tonumber(ARGV[4])
return result(1)
`)
