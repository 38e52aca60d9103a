package slotpool

// The pool's scripts are the functions of one Redis function library
// (library.go): FUNCTION LOAD runs the library's code once, which creates
// its helpers, and each FCALL of a function then only binds its keys and
// arguments and starts its state afresh (begin) before its body runs.
// Every function runs on the same key layout and begins alike, so that any
// call (acquire, renew, release, the janitor's tick, a capacity change)
// first reclaims expired holders and drops stale waiters and finally
// grants every free slot. Grants therefore never wait for a particular
// replica to act.
//
// Waiters belong to a group (the fairness key, for example a member id)
// and a tier (1 high priority, 2 normal). Within one tier and group they
// are served first come, first served. Across groups the pool runs
// start-time fair queuing with unit-cost jobs: each group with waiters in
// a tier has a virtual start tag; a grant goes to the group with the
// smallest tag, whose tag then grows by 1/weight. Equal weights give round
// robin; weight w gives a group w grants per round. A group that becomes
// active starts at the tier's virtual time (the tag last served), so an
// idle group banks no credit and a busy one owes none. High-tier groups are
// served before normal-tier ones, but while a normal waiter is eligible at
// most "starve" high grants in a row are made before a normal one. With a
// group cap K > 0, a group holding K slots is skipped until one is freed.
//
// A call that grants a slot also lines up standbys: while the waiter the
// fair-queuing rule would serve next belongs to the replica (route) of a
// holder that has no standby yet, it is taken out of the queue as a grant
// would take it (the rotation and virtual time advance, its group's held
// count includes it) and becomes that holder's standby. It stays pending
// (and heartbeats) until the holder gives the slot up: a release, a
// reclaim, a withdrawal or an operator's eviction makes it the holder in
// the same script. A releasing process that knows its holder's standby
// waits in it starts the standby at once and names it in the release
// (ARGV[10]), which then makes it the holder whatever else happened to it
// meanwhile. Lining up stops at the first waiter whose replica has no
// holder free of a standby, so standbys are lined up in fair order; a
// waiter that arrives after a standby was lined up comes after it.
//
// A holder whose lease expires may have left a job running at the
// downstream (its process lost Redis, or died, while the job goes on
// there). With a job limit set, its slot is therefore not freed at once:
// it becomes an orphan, still counted against N, until the job limit has
// passed since the lease was reclaimed (no job was started under the
// slot after its lease ran out, and none runs longer than the job limit);
// only then is it free. The expiry is recorded (finished stream,
// reclaimed count) when the slot becomes an orphan, and its standby goes
// back to its place in the queue.
//
// KEYS (all in the hash tag {<name>}):
//
//	[1]  capacityKey        capacity  string: N, written from ARGV[1] when missing
//	[2]  holdersKey         holders   zset:   token -> lease deadline (ms, Redis TIME)
//	[3]  holdKey            hold      hash:   token -> "grantedMs|leaseMs|jobID"
//	[4]  pendingKey         pending   zset:   token -> sequence number (arrival order)
//	[5]  pendingInfoKey     pinfo     hash:   token -> "enqueuedMs|leaseMs|jobID"
//	[6]  pendingDeadlineKey pdeadline zset:   token -> waiter heartbeat deadline (ms)
//	[7]  seqKey             seq       string: sequence counter of the pending queue
//	[8]  finishedKey        finished  stream: job, outcome (1 completed, 2 failed), detail, token, held_ms, group
//	[9]  reclaimedKey       reclaimed string: total leases reclaimed
//	[10] queueKey           queue     zset:   all scores 0; member tier..group.."\0"..seq(16 digits).."\0"..token,
//	                                          so one lexicographic range is one (tier, group) FIFO
//	[11] pendingMetaKey     pmeta     hash:   token -> its queue member (waiters)
//	[12] holdMetaKey        hmeta     hash:   token -> the queue member it was granted as (holders)
//	[13] activeHighKey      active1   zset:   high-tier groups with waiters -> virtual start tag
//	[14] activeNormalKey    active2   zset:   normal-tier groups with waiters -> virtual start tag
//	[15] virtualTagsKey     vt        hash:   tier..group -> start tag kept for a group that went idle ahead of the virtual time
//	[16] groupHeldKey       gheld     hash:   group -> slots it holds
//	[17] weightsKey         weights   hash:   group -> weight (missing: 1)
//	[18] settingsKey        settings  hash:   groupcap (K, 0 none), starve (high grants in a row
//	                                          while a normal waiter waits), v1/v2 (virtual time of
//	                                          each tier), skip (high grants in a row so far),
//	                                          joblimit (ms a job started under a slot may run,
//	                                          as the last acquiring replica declared it)
//	[19] standbyKey         standby   hash:   "h"..holder -> its standby, "s"..standby -> its holder
//	[20] originKey          origin    hash:   capacity / fairness / weights -> "source|ms|actor": who set
//	                                          the setting's current value (source configuration or
//	                                          operator), when (Redis time) and who (see origin.go)
//	[21] orphansKey         orphans   zset:   token.."\0"..grantedMs.."\0"..group.."\0"..jobID -> when it frees (ms)
//
// ARGV common to all functions:
//
//	[1] default capacity, [2] finished stream MAXLEN (~), [3] grant channel,
//	[4] default group cap, [5] default starvation bound, [6] the calling
//	Pool's route; a function's own arguments start at ARGV[7].
//
// Every function returns the same array:
//
//	{status, grantedMs, reclaimed, dropped, capacity, inUse, waiting, {granted tokens}, now,
//	 {holder, standby, holder, standby, ...}}
//
// where status is the function's own, grantedMs is the grant time of the
// script's token when it holds a slot (else 0), reclaimed/dropped count the
// expired holders and stale waiters removed by this call, granted lists the
// waiters promoted by this call and now is the call's Redis time (ms), their
// grant time; the last list names the standbys this call lined up, each
// after its holder (a standby of another replica's holder is also
// published on that replica's grant channel as "standby|holder|standby").
// The calling replica hands the grants of its own waiters over
// directly; every other grant is published as "token|grantedMs" on the
// grant channel of the waiter's replica (ARGV[3]..":"..route, the route
// being the part of the token before its last "."), so only that replica
// wakes. A token without a route (queued by an older version) is
// published on ARGV[3] itself.
//
// All times come from redis.call('TIME'): lease deadlines do not depend on
// the clocks of the replicas. Redis 7 replicates script effects, so TIME
// before a write is allowed.
const prelude = libraryState + preludeClock + preludeSettings + preludeQueue + preludeHolders +
	preludeReclaim + preludePromote + preludeDesignate + preludeResult + preludeBegin

// libraryState declares what one call works on: its keys and arguments
// and the state it reports. The helpers share them as upvalues; begin sets
// them at the start of every call, so no call sees another's.
const libraryState = `
local KEYS, ARGV
local capacityKey, holdersKey, holdKey, pendingKey, pendingInfoKey, pendingDeadlineKey, seqKey,
  finishedKey, reclaimedKey, queueKey, pendingMetaKey, holdMetaKey, activeHighKey, activeNormalKey,
  virtualTagsKey, groupHeldKey, weightsKey, settingsKey, standbyKey, originKey, orphansKey
-- now is the call's Redis time (ms); cap, groupcap, starve and joblimit
-- the pool's settings (see settings); orphaned the orphaned slots.
local now, cap, groupcap, starve, joblimit, orphaned
-- active maps a tier to its rotation's key.
local active = {}
-- npending counts the waiters (pending, standbys included): read once
-- (reclaim) and kept by every change of pending, so that no body reads it
-- again.
local npending
-- qchanged records that this call removed a waiter or ran the
-- fair-queuing pass: only such a call can leave fairness state behind an
-- empty queue (see result).
local qchanged
-- reclaimed and dropped count the holders and waiters removed by this
-- call, granted lists the tokens it granted and isgranted marks them.
local reclaimed, dropped, granted, isgranted
-- inuse and waiting count the holders and waiters once promote has run;
-- a call that knows both before (the enqueue's direct grant) sets them
-- and saves promote the two reads.
local inuse, waiting
-- designated lists the standbys lined up by this call, holder then
-- standby; lineup says whether this call should line any up (it granted
-- or handed over a slot).
local designated, lineup
`

// preludeKeys binds the keys to names, in the order of the key
// constants (slotpool.go); the scripts address keys by these names only.
const preludeKeys = `
capacityKey = KEYS[1]
holdersKey = KEYS[2]
holdKey = KEYS[3]
pendingKey = KEYS[4]
pendingInfoKey = KEYS[5]
pendingDeadlineKey = KEYS[6]
seqKey = KEYS[7]
finishedKey = KEYS[8]
reclaimedKey = KEYS[9]
queueKey = KEYS[10]
pendingMetaKey = KEYS[11]
holdMetaKey = KEYS[12]
activeHighKey = KEYS[13]
activeNormalKey = KEYS[14]
virtualTagsKey = KEYS[15]
groupHeldKey = KEYS[16]
weightsKey = KEYS[17]
settingsKey = KEYS[18]
standbyKey = KEYS[19]
originKey = KEYS[20]
orphansKey = KEYS[21]
`

// preludeClock defines the parsers of tokens (route), hold and pending
// records (fields) and queue members (member).
const preludeClock = `
-- route is the grant route a token carries (before its last '.'), or nil.
local function route(tok) return string.match(tok, '^(.*)%.') end
local function fields(v)
  local i = string.find(v, '|', 1, true)
  local j = string.find(v, '|', i + 1, true)
  return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1, j - 1)), string.sub(v, j + 1)
end
-- member parses a queue member into tier, group and token.
local function member(m)
  local i = string.find(m, '\0', 2, true)
  return string.sub(m, 1, 1), string.sub(m, 2, i - 1), string.sub(m, i + 18)
end
`

// preludeSettings defines settings, which reads N (cap), the group cap,
// the starvation bound and the job limit, writing the configured defaults
// where they are missing, and frees the orphans whose job limit has
// passed; held counts the slots held.
const preludeSettings = `
local function settings()
cap = redis.call('GET', capacityKey)
if cap then
  cap = tonumber(cap)
else
  cap = tonumber(ARGV[1])
  redis.call('SET', capacityKey, ARGV[1])
end
do
  local v = redis.call('HMGET', settingsKey, 'groupcap', 'starve', 'joblimit')
  groupcap, starve, joblimit = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) or 0
  if not groupcap then
    groupcap = tonumber(ARGV[4])
    redis.call('HSET', settingsKey, 'groupcap', ARGV[4])
  end
  if not starve then
    starve = tonumber(ARGV[5])
    redis.call('HSET', settingsKey, 'starve', ARGV[5])
  end
end
-- Orphans whose job limit has passed free their slots; orphaned counts
-- the others, which held counts with the holders against N.
orphaned = redis.call('ZCARD', orphansKey)
if orphaned > 0 then
  orphaned = orphaned - redis.call('ZREMRANGEBYSCORE', orphansKey, '-inf', now)
end
end
local function held() return redis.call('ZCARD', holdersKey) + orphaned end
`

// preludeQueue defines the fair queue's helpers: each tier's rotation
// (active, vtime, head, activate, settle) and the removal of a waiter
// (unqueue).
const preludeQueue = `
local function vtime(t) return tonumber(redis.call('HGET', settingsKey, 'v' .. t)) or 0 end
local function head(t, g)
  return redis.call('ZRANGEBYLEX', queueKey, '[' .. t .. g .. '\0', '(' .. t .. g .. '\1', 'LIMIT', 0, 1)[1]
end
-- activate puts group g into tier t's rotation when it is not there yet.
local function activate(t, g)
  if redis.call('ZSCORE', active[t], g) then return end
  local tag = vtime(t)
  local kept = tonumber(redis.call('HGET', virtualTagsKey, t .. g))
  if kept then
    if kept > tag then tag = kept end
    redis.call('HDEL', virtualTagsKey, t .. g)
  end
  redis.call('ZADD', active[t], tag, g)
end
-- settle takes group g out of tier t's rotation once it has no waiter
-- there, keeping its tag if it is ahead of the tier's virtual time.
local function settle(t, g)
  if head(t, g) then return end
  local tag = redis.call('ZSCORE', active[t], g)
  redis.call('ZREM', active[t], g)
  if tag and tonumber(tag) > vtime(t) then redis.call('HSET', virtualTagsKey, t .. g, tag) end
end
-- unqueue removes a waiter from every pending structure and returns 1
-- when tok was pending, else 0; queued says tok was taken from the queue,
-- so it is no standby.
local function unqueue(tok, queued)
  qchanged = true
  local m = redis.call('HGET', pendingMetaKey, tok)
  if not queued then
    -- A standby leaving gives back the slot its group had reserved.
    local h = redis.call('HGET', standbyKey, 's' .. tok)
    if h then
      redis.call('HDEL', standbyKey, 's' .. tok, 'h' .. h)
      if m then
        local _, g = member(m)
        if redis.call('HINCRBY', groupHeldKey, g, '-1') <= 0 then redis.call('HDEL', groupHeldKey, g) end
      end
    end
  end
  local n = redis.call('ZREM', pendingKey, tok)
  npending = npending - n
  redis.call('ZREM', pendingDeadlineKey, tok)
  redis.call('HDEL', pendingInfoKey, tok)
  redis.call('HDEL', pendingMetaKey, tok)
  if m then
    redis.call('ZREM', queueKey, m)
    local t, g = member(m)
    settle(t, g)
  end
  return n
end
`

// preludeHolders defines the holders' helpers: removing (unhold) and
// recording (hold) a holder, waking a waiter (announce) and handing a
// slot to a holder's standby (unpend, takeover, requeue, succeed).
const preludeHolders = `
-- unhold removes a holder and returns its hold record and group; v is the
-- record when the caller has read it already.
local function unhold(tok, v)
  v = v or redis.call('HGET', holdKey, tok)
  local m = redis.call('HGET', holdMetaKey, tok)
  redis.call('ZREM', holdersKey, tok)
  redis.call('HDEL', holdKey, tok)
  redis.call('HDEL', holdMetaKey, tok)
  local g = ''
  if m then
    local _
    _, g = member(m)
    if redis.call('HINCRBY', groupHeldKey, g, '-1') <= 0 then redis.call('HDEL', groupHeldKey, g) end
  end
  return v, g
end
-- announce wakes the waiter tok, granted now, unless the calling replica
-- hands the grant over itself.
local function announce(tok)
  local r = route(tok)
  if not r then
    redis.call('PUBLISH', ARGV[3], tok .. '|' .. now)
    return
  end
  if r ~= ARGV[6] then redis.call('PUBLISH', ARGV[3] .. ':' .. r, tok .. '|' .. now) end
end
-- hold records tok (of job, tier t and group g, queue member m) as a
-- holder granted now with lease ms (deadline, when set, caps it); reserved
-- says its group's held count includes it already (a standby's). A token
-- that holds already is left as it is, and hold returns false.
local function hold(tok, job, lease, g, m, reserved, deadline)
  if redis.call('HSETNX', holdKey, tok, now .. '|' .. lease .. '|' .. job) == 0 then return false end
  redis.call('ZADD', holdersKey, math.min(now + lease, deadline or now + lease), tok)
  redis.call('HSET', holdMetaKey, tok, m)
  if not reserved then redis.call('HINCRBY', groupHeldKey, g, '1') end
  return true
end
-- unpend removes the standby s from the pending structures (it left the
-- queue when it was lined up) and returns its pending record and member.
-- It removes a waiter: the queue may be empty after it (see result).
local function unpend(s)
  qchanged = true
  local v = redis.call('HGET', pendingInfoKey, s)
  local m = redis.call('HGET', pendingMetaKey, s)
  npending = npending - redis.call('ZREM', pendingKey, s)
  redis.call('ZREM', pendingDeadlineKey, s)
  redis.call('HDEL', pendingInfoKey, s)
  redis.call('HDEL', pendingMetaKey, s)
  return v, m
end
-- takeover makes the standby s of holder h a holder and wakes it (its
-- group's count has included it since it was lined up); deadline, when
-- set, caps its lease. The caller has given up h's slot.
local function takeover(s, h, deadline)
  redis.call('HDEL', standbyKey, 'h' .. h, 's' .. s)
  local v, m = unpend(s)
  local _, lease, job = fields(v)
  local _, g = member(m)
  hold(s, job, lease, g, m, true, deadline)
  announce(s)
  granted[#granted + 1] = s
  isgranted[s] = true
end
-- requeue puts the standby s of holder h back at its place in its group's
-- queue, giving back the slot its group had reserved.
local function requeue(s, h)
  qchanged = true
  redis.call('HDEL', standbyKey, 'h' .. h, 's' .. s)
  local m = redis.call('HGET', pendingMetaKey, s)
  if not m then return end
  local t, g = member(m)
  if redis.call('HINCRBY', groupHeldKey, g, '-1') <= 0 then redis.call('HDEL', groupHeldKey, g) end
  redis.call('ZADD', queueKey, 0, m)
  activate(t, g)
end
-- succeed hands the slot holder h has just given up to h's standby, if it
-- has one: it becomes the holder (its lease capped by deadline when set),
-- unless a lowered capacity is still held in full, when it goes back to
-- its place in the queue.
local function succeed(h, deadline)
  local s = redis.call('HGET', standbyKey, 'h' .. h)
  if not s then return end
  if held() >= cap then
    requeue(s, h)
    return
  end
  takeover(s, h, deadline)
end
`

// preludeReclaim defines reclaim, which reclaims the holders whose lease
// expired (recording them in the finished stream, orphaning their slots
// under a job limit, handing them to their standbys otherwise) and drops
// the waiters whose heartbeat expired.
const preludeReclaim = `
local function reclaim()
npending = redis.call('ZCARD', pendingKey)
for _, tok in ipairs(redis.call('ZRANGEBYSCORE', holdersKey, '-inf', now, 'LIMIT', '0', '100')) do
  local v, g = unhold(tok)
  local job, since = '', now
  if v then
    local _
    since, _, job = fields(v)
  end
  redis.call('XADD', finishedKey, 'MAXLEN', '~', ARGV[2], '*',
    'job', job, 'outcome', '2', 'detail', 'lease expired', 'token', tok, 'held_ms', now - since, 'group', g)
  reclaimed = reclaimed + 1
  local s = redis.call('HGET', standbyKey, 'h' .. tok)
  if joblimit > 0 then
    -- Its job may still run: the slot stays taken as an orphan.
    redis.call('ZADD', orphansKey, now + joblimit, tok .. '\0' .. since .. '\0' .. g .. '\0' .. job)
    orphaned = orphaned + 1
    if s then requeue(s, tok) end
  elseif s then
    -- The holder's standby takes the slot for as long as its heartbeat
    -- says it may be alive (the holder's process may have started it
    -- already); a stale one is dropped below.
    local pd = tonumber(redis.call('ZSCORE', pendingDeadlineKey, s))
    if pd and pd > now then succeed(tok, pd) end
  end
end
if reclaimed > 0 then redis.call('INCRBY', reclaimedKey, reclaimed) end
if npending > 0 then
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', pendingDeadlineKey, '-inf', now, 'LIMIT', '0', '100')) do
    unqueue(tok)
    dropped = dropped + 1
  end
end
end
`

// preludePromote defines promote, which grants the free slots by the
// fair-queuing rule (pick chooses the group).
const preludePromote = `
-- pick returns the first group of tier t's rotation below the group cap,
-- and its tag.
local function pick(t)
  local off = 0
  while true do
    local r = redis.call('ZRANGE', active[t], off, off + 15, 'WITHSCORES')
    if #r == 0 then return nil end
    for i = 1, #r, 2 do
      if groupcap <= 0 or (tonumber(redis.call('HGET', groupHeldKey, r[i])) or 0) < groupcap then
        return r[i], tonumber(r[i + 1])
      end
    end
    off = off + 16
  end
end
-- promote grants the free slots, one by one, to the head of the group
-- the fair-queuing rule selects.
local function promote()
  inuse = inuse or held()
  waiting = waiting or npending
  local free = cap - inuse
  if free <= 0 or waiting == 0 then return end
  qchanged = true
  -- Standbys were lined up before every queued waiter: they take free
  -- slots first.
  if redis.call('HLEN', standbyKey) > 0 then
    local sb = redis.call('HGETALL', standbyKey)
    for i = 1, #sb, 2 do
      if free <= 0 then break end
      if string.sub(sb[i], 1, 1) == 's' then
        takeover(string.sub(sb[i], 2), sb[i + 1])
        waiting = waiting - 1
        inuse = inuse + 1
        free = free - 1
      end
    end
  end
  local skip = tonumber(redis.call('HGET', settingsKey, 'skip')) or 0
  while free > 0 do
    local hg, htag = pick('1')
    local ng, ntag = pick('2')
    if not hg and not ng then break end
    local t, g, tag
    if hg and (not ng or skip < starve) then
      t, g, tag = '1', hg, htag
      if ng then skip = skip + 1 else skip = 0 end
    else
      t, g, tag = '2', ng, ntag
      skip = 0
    end
    local m = head(t, g)
    local w = tonumber(redis.call('HGET', weightsKey, g)) or 1
    redis.call('HSET', settingsKey, 'v' .. t, tag)
    redis.call('ZADD', active[t], 'XX', tag + 1 / w, g)
    if not m then
      redis.call('ZREM', active[t], g)
    else
      local _, _, tok = member(m)
      local v = redis.call('HGET', pendingInfoKey, tok)
      waiting = waiting - unqueue(tok, true)
      -- A queue entry its token no longer points at goes too, so that
      -- every turn of the loop removes the head it looked at.
      if redis.call('ZREM', queueKey, m) == 1 then settle(t, g) end
      if v then
        local _, lease, job = fields(v)
        hold(tok, job, lease, g, m)
        announce(tok)
        granted[#granted + 1] = tok
        isgranted[tok] = true
        inuse = inuse + 1
        free = free - 1
      end
    end
  end
  redis.call('HSET', settingsKey, 'skip', skip)
end
`

// preludeDesignate defines designate, which lines up standbys.
const preludeDesignate = `
-- designate lines up standbys (see above) in fair order, stopping at the
-- first waiter whose replica has no holder free of a standby.
local function designate()
  local free, nfree, skip
  while true do
    local hg, htag = pick('1')
    local ng, ntag = pick('2')
    if not hg and not ng then break end
    skip = skip or tonumber(redis.call('HGET', settingsKey, 'skip')) or 0
    local t, g, tag, nskip
    if hg and (not ng or skip < starve) then
      t, g, tag = '1', hg, htag
      if ng then nskip = skip + 1 else nskip = 0 end
    else
      t, g, tag, nskip = '2', ng, ntag, 0
    end
    local m = head(t, g)
    if not m then
      redis.call('ZREM', active[t], g)
    else
      if not free then
        free, nfree = {}, 0
        local hs = redis.call('ZRANGE', holdersKey, 0, -1)
        if #hs == 0 then break end
        local fs = {}
        for i, h in ipairs(hs) do fs[i] = 'h' .. h end
        local got = redis.call('HMGET', standbyKey, unpack(fs))
        for i, h in ipairs(hs) do
          local r = route(h)
          if r and not got[i] then
            free[r] = free[r] or {}
            table.insert(free[r], h)
            nfree = nfree + 1
          end
        end
      end
      if nfree == 0 then break end
      local _, _, tok = member(m)
      local r = route(tok)
      local list = r and free[r]
      if not list or #list == 0 then break end
      local h = table.remove(list)
      nfree = nfree - 1
      skip = nskip
      qchanged = true
      local w = tonumber(redis.call('HGET', weightsKey, g)) or 1
      redis.call('HSET', settingsKey, 'v' .. t, tag)
      redis.call('ZADD', active[t], 'XX', tag + 1 / w, g)
      redis.call('ZREM', queueKey, m)
      settle(t, g)
      redis.call('HINCRBY', groupHeldKey, g, 1)
      redis.call('HSET', standbyKey, 'h' .. h, tok, 's' .. tok, h)
      if r ~= ARGV[6] then redis.call('PUBLISH', ARGV[3] .. ':' .. r, 'standby|' .. h .. '|' .. tok) end
      designated[#designated + 1] = h
      designated[#designated + 1] = tok
    end
  end
  if skip then redis.call('HSET', settingsKey, 'skip', skip) end
end
`

// preludeResult defines result, which promotes, lines up standbys and
// builds the answer every script returns.
const preludeResult = `
-- result promotes, then reports. With tok set, status is computed for it:
-- 1 holds a slot, 0 still pending, -1 neither; with known set, the caller
-- knows tok's status before promoting (1: made a holder now; 0: queued by
-- this call), so only a grant by promote changes it. An empty queue
-- forgets the virtual times, so the fairness state never outgrows the
-- waiters; only a call that removed a waiter or promoted can have left
-- any (an enqueue leaves the queue non-empty).
local function result(status, tok, known, since)
  promote()
  if lineup or #granted > 0 then designate() end
  since = since or 0
  if tok and known then
    if status == 1 or isgranted[tok] then status, since = 1, now end
  elseif tok then
    local v = redis.call('HGET', holdKey, tok)
    if v then
      status = 1
      since = fields(v)
    elseif redis.call('ZSCORE', pendingKey, tok) then
      status = 0
    else
      status = -1
    end
  end
  if waiting == 0 and qchanged and redis.call('HDEL', settingsKey, 'v1', 'v2', 'skip') > 0 then
    redis.call('DEL', virtualTagsKey)
  end
  return {status, since, reclaimed, dropped, cap, inuse, waiting, granted, now, designated}
end
`

// preludeBegin defines fresh, which starts the state one call reports
// afresh, and begin, which every function runs first: it binds the call's
// keys and arguments, reads its Redis time and the settings, reclaims
// and drops.
const preludeBegin = `
local function fresh()
  reclaimed, dropped, qchanged = 0, 0, false
  granted, isgranted, designated, lineup = {}, {}, {}, false
  inuse, waiting = nil, nil
end
local function begin(keys, args)
  KEYS, ARGV = keys, args
` + preludeKeys + `
  active['1'], active['2'] = activeHighKey, activeNormalKey
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  fresh()
  settings()
  reclaim()
end
`

// enqueueOp appends a waiter to its group's queue and promotes. When
// nobody waits and a slot is free for the waiter's group, the fair-queuing
// rule would grant that slot to this waiter alone, so it is made a holder
// at once, without passing through the queue and its rotation state; that
// path reads the counts promote needs itself, so it answers without a
// fair-queuing pass.
// ARGV[7] token, ARGV[8] job id, ARGV[9] lease ms, ARGV[10] waiter TTL ms,
// ARGV[11] tier ("1" high, "2" normal), ARGV[12] group, ARGV[13] job limit
// ms (missing: keep the pool's; 0: expired leases free their slots at once).
// Status: 1 granted at once, 0 pending.
var enqueueOp = &op{name: "enqueue", body: enqueueBody}

const enqueueBody = `
-- enqueue | KEYS preludeKeys | ARGV[7..13] token, job, lease ms, waiter TTL ms, tier, group, job limit | status 1 granted, 0 pending
local tok, job, t, g = ARGV[7], ARGV[8], ARGV[11], ARGV[12]
local queued = npending
-- A token already waiting or holding is a client's retry after a lost
-- reply: it is left as it is, since a second queue entry would outlive
-- the first one's grant. (An empty queue holds no token; on the direct
-- grant below, hold itself refuses a holder.)
if queued > 0 and (redis.call('ZSCORE', pendingKey, tok) or redis.call('HEXISTS', holdKey, tok) == 1) then
  return result(0, tok)
end
local limit = tonumber(ARGV[13])
if limit and limit ~= joblimit then
  redis.call('HSET', settingsKey, 'joblimit', limit)
  joblimit = limit
end
if queued == 0 then
  local inpool = held()
  if inpool < cap and (groupcap <= 0 or (tonumber(redis.call('HGET', groupHeldKey, g)) or 0) < groupcap) then
    -- Its member never enters the queue, so it needs no sequence number.
    if not hold(tok, job, tonumber(ARGV[9]), g, t .. g .. '\0' .. string.format('%016d', 0) .. '\0' .. tok) then
      return result(0, tok)
    end
    inuse, waiting = inpool + 1, 0
    return result(1, tok, true)
  end
  if redis.call('HEXISTS', holdKey, tok) == 1 then return result(0, tok) end
end
` + enqueueWaiter + `
return result(0, tok, true)
`

// enqueueWaiter queues the waiter tok of job in tier t and group g (the
// Lua locals it expects), with lease ARGV[9] and waiter TTL ARGV[10] (ms).
// The caller has made sure that tok is neither waiting nor holding.
const enqueueWaiter = `
do
  local seq = redis.call('INCR', seqKey)
  local m = t .. g .. '\0' .. string.format('%016d', seq) .. '\0' .. tok
  redis.call('ZADD', pendingKey, seq, tok)
  npending = npending + 1
  redis.call('ZADD', pendingDeadlineKey, now + tonumber(ARGV[10]), tok)
  redis.call('HSET', pendingInfoKey, tok, now .. '|' .. ARGV[9] .. '|' .. job)
  redis.call('HSET', pendingMetaKey, tok, m)
  redis.call('ZADD', queueKey, 0, m)
  activate(t, g)
end
`

// pollOp renews a waiter's heartbeat and reports whether it was granted.
// ARGV[7] token, ARGV[8] waiter TTL ms.
// Status: 1 granted, 0 still pending, -1 dropped (heartbeat expired).
var pollOp = &op{name: "poll", body: pollBody}

const pollBody = `
-- poll | KEYS preludeKeys | ARGV[7..8] token, waiter TTL ms | status 1 granted, 0 pending, -1 dropped
local tok = ARGV[7]
if redis.call('ZSCORE', pendingDeadlineKey, tok) then
  redis.call('ZADD', pendingDeadlineKey, 'XX', now + tonumber(ARGV[8]), tok)
end
return result(0, tok)
`

// cancelOp withdraws a waiter; if it was granted meanwhile, the slot is
// freed (the job never started, so nothing is recorded) and goes to its
// standby, if it has one.
// ARGV[7] token.
// Status: 0 removed from pending, 1 freed a granted slot, -1 not found.
var cancelOp = &op{name: "cancel", body: cancelBody}

const cancelBody = `
-- cancel | KEYS preludeKeys | ARGV[7] token | status 0 unqueued, 1 freed a slot, -1 not found
local tok = ARGV[7]
local st = -1
if redis.call('ZSCORE', pendingKey, tok) then
  unqueue(tok)
  st = 0
elseif redis.call('HEXISTS', holdKey, tok) == 1 then
  unhold(tok)
  succeed(tok)
  st = 1
end
return result(st)
`

// renewOp extends a holder's lease.
// ARGV[7] token, ARGV[8] lease ms.
// Status: 1 renewed, 0 lost (reclaimed or released).
var renewOp = &op{name: "renew", body: renewBody}

const renewBody = `
-- renew | KEYS preludeKeys | ARGV[7..8] token, lease ms | status 1 renewed, 0 lost
local tok = ARGV[7]
if redis.call('ZSCORE', holdersKey, tok) then
  redis.call('ZADD', holdersKey, 'XX', now + tonumber(ARGV[8]), tok)
  return result(1)
end
return result(0)
`

// releaseOp frees a slot, records the outcome in the finished stream and
// grants the freed slot: to the holder's standby if it has one, else by
// the fair-queuing rule. A releasing process that has already started the
// holder's standby names it (ARGV[10], with the job, lease, tier and group
// it was queued with): while the holder still holds, that waiter takes the
// slot whatever else happened to it (it may have been dropped as stale or
// lined up behind another holder meanwhile), and the holder's own standby,
// if another, goes back to its place in the queue.
// ARGV[7] token, ARGV[8] outcome (1 completed, 2 failed), ARGV[9] detail,
// ARGV[10] standby started by the caller ("" or missing: none), ARGV[11] its job id,
// ARGV[12] its lease ms, ARGV[13] its tier, ARGV[14] its group.
// Status: 1 released, 0 lost (the lease was reclaimed before); grantedMs
// is the grant time of ARGV[10] when it holds a slot after the call.
var releaseOp = &op{name: "release", body: releaseBody}

const releaseBody = `
-- release | KEYS preludeKeys | ARGV[7..14] token, outcome, detail, started standby, its job, lease ms, tier, group | status 1 released, 0 lost
local tok, s = ARGV[7], ARGV[10] or ''
local function started()
  if s == '' then return nil end
  local sv = redis.call('HGET', holdKey, s)
  if sv then return (fields(sv)) end
  return nil
end
local v = redis.call('HGET', holdKey, tok)
if not v then return result(0, nil, nil, started()) end
local g
v, g = unhold(tok, v)
local since, _, job = fields(v)
redis.call('XADD', finishedKey, 'MAXLEN', '~', ARGV[2], '*',
  'job', job, 'outcome', ARGV[8], 'detail', ARGV[9], 'token', tok, 'held_ms', now - since, 'group', g)
if s == '' or redis.call('HEXISTS', holdKey, s) == 1 then
  -- Only a pending waiter can be a standby: with nobody pending there is
  -- none to look up, and promote reuses the count.
  waiting = npending
  if waiting > 0 then
    succeed(tok)
    waiting = nil
  end
else
  local own = redis.call('HGET', standbyKey, 'h' .. tok)
  if own and own ~= s then requeue(own, tok) end
  local h = redis.call('HGET', standbyKey, 's' .. s)
  local m
  if h then
    redis.call('HDEL', standbyKey, 'h' .. h, 's' .. s)
    local _
    _, m = unpend(s)
  else
    m = redis.call('HGET', pendingMetaKey, s)
    if m then unqueue(s, true) end
  end
  m = m or (ARGV[13] .. ARGV[14] .. '\0' .. string.format('%016d', 0) .. '\0' .. s)
  hold(s, ARGV[11], tonumber(ARGV[12]), ARGV[14], m, h and true)
  granted[#granted + 1] = s
  isgranted[s] = true
  lineup = true
end
return result(1, nil, nil, started())
`

// tickOp is the janitor's pass: reclaim, drop stale waiters, put back
// in the queue the standbys of holders that are gone (released by an older
// version of these scripts, which knows no standbys), promote.
// No extra ARGV. Status: 0.
var tickOp = &op{name: "tick", body: tickBody}

const tickBody = `
-- tick | KEYS preludeKeys | no ARGV of its own | status 0
local sb = redis.call('HGETALL', standbyKey)
for i = 1, #sb, 2 do
  if string.sub(sb[i], 1, 1) == 'h' and not redis.call('ZSCORE', holdersKey, string.sub(sb[i], 2)) then
    requeue(sb[i + 1], string.sub(sb[i], 2))
  end
end
return result(0)
`

// setCapacityOp changes N, records the operator as its origin and
// promotes waiters into new free slots.
// ARGV[7] new capacity, ARGV[8] actor. Status: 1.
var setCapacityOp = &op{name: "setCapacity", body: setCapacityBody}

const setCapacityBody = `
-- setCapacity | KEYS preludeKeys | ARGV[7..8] capacity, actor | status 1
redis.call('SET', capacityKey, ARGV[7])
cap = tonumber(ARGV[7])
redis.call('HSET', originKey, 'capacity', 'operator|' .. now .. '|' .. ARGV[8])
return result(1)
`

// setFairnessOp changes the group cap and the starvation bound (an
// empty argument keeps the current value) and promotes, since a higher cap
// may let a skipped group take a free slot.
// The operator is recorded as their origin.
// ARGV[7] group cap K (0 none), ARGV[8] starvation bound, ARGV[9] actor.
// Status: 1.
var setFairnessOp = &op{name: "setFairness", body: setFairnessBody}

const setFairnessBody = `
-- setFairness | KEYS preludeKeys | ARGV[7..9] group cap, starvation bound, actor | status 1
redis.call('HSET', originKey, 'fairness', 'operator|' .. now .. '|' .. ARGV[9])
if ARGV[7] ~= '' then
  redis.call('HSET', settingsKey, 'groupcap', ARGV[7])
  groupcap = tonumber(ARGV[7])
end
if ARGV[8] ~= '' then
  redis.call('HSET', settingsKey, 'starve', ARGV[8])
  starve = tonumber(ARGV[8])
end
return result(1)
`

// setWeightOp sets a group's weight (1 removes the entry). The new
// weight applies from the group's next grant. The operator is recorded as
// the weights' origin.
// ARGV[7] group, ARGV[8] weight, ARGV[9] actor. Status: 1.
var setWeightOp = &op{name: "setWeight", body: setWeightBody}

const setWeightBody = `
-- setWeight | KEYS preludeKeys | ARGV[7..9] group, weight, actor | status 1
redis.call('HSET', originKey, 'weights', 'operator|' .. now .. '|' .. ARGV[9])
if tonumber(ARGV[8]) == 1 then
  redis.call('HDEL', weightsKey, ARGV[7])
else
  redis.call('HSET', weightsKey, ARGV[7], ARGV[8])
end
return result(1)
`

// seedOp writes the configured settings (Pool.Seed and
// ResetToConfiguration): each of N, the fairness limits (group cap and
// starvation bound) and the weights (all groups as one setting) is
// written unless its origin records an operator, or whatever its origin
// with force. A setting whose value changes, or that has no origin yet,
// gets the origin "configuration|now|actor"; it then promotes, since a
// higher N or cap may free slots.
// ARGV[7] N, ARGV[8] group cap K, ARGV[9] starvation bound, ARGV[10] force
// ("1" or "0"), ARGV[11] actor, ARGV[12...] group, weight, group, weight, …
// (weight 1 is stored as no entry). Status: the number of settings written.
var seedOp = &op{name: "seed", body: seedBody}

const seedBody = `
-- seed | KEYS preludeKeys | ARGV[7..] N, group cap, starvation bound, force, actor, group, weight... | status settings written
local force = ARGV[10] == '1'
local rec = 'configuration|' .. now .. '|' .. ARGV[11]
local written = 0
-- take reports whether setting f is to be written; same says whether the
-- stored value already equals the configured one.
local function take(f, same)
  local o = redis.call('HGET', originKey, f)
  if not force and o and string.sub(o, 1, 9) == 'operator|' then return false end
  if force or not o or not same then
    redis.call('HSET', originKey, f, rec)
  end
  return true
end
if take('capacity', cap == tonumber(ARGV[7])) then
  redis.call('SET', capacityKey, ARGV[7])
  cap = tonumber(ARGV[7])
  written = written + 1
end
if take('fairness', groupcap == tonumber(ARGV[8]) and starve == tonumber(ARGV[9])) then
  redis.call('HSET', settingsKey, 'groupcap', ARGV[8], 'starve', ARGV[9])
  groupcap, starve = tonumber(ARGV[8]), tonumber(ARGV[9])
  written = written + 1
end
do
  local want, n = {}, 0
  for i = 12, #ARGV, 2 do
    if tonumber(ARGV[i + 1]) ~= 1 then
      want[ARGV[i]] = ARGV[i + 1]
      n = n + 1
    end
  end
  local have = redis.call('HGETALL', weightsKey)
  local same = #have == 2 * n
  for i = 1, #have, 2 do
    if want[have[i]] ~= have[i + 1] then same = false end
  end
  if take('weights', same) then
    redis.call('DEL', weightsKey)
    for g, w in pairs(want) do redis.call('HSET', weightsKey, g, w) end
    written = written + 1
  end
end
return result(written)
`

// batchOp runs several calls of the functions in batchable, in order, in
// one call: a Pool sends the calls of its callers that are made while its
// function calls are on their way to Redis together (see batcher), so the
// round trip, the call's own cost and begin's reads, reclaim and drop are
// paid once for all of them. Each call's body runs as its own function
// would at the same Redis time: on its own ARGV (the common ARGV followed
// by its own), with the state one call reports (granted, standbys, counts,
// whether it changed the queue) starting afresh; the reclaimed and dropped
// counts are reported by the first call.
// ARGV[7...] for each call: its function's number (its index in
// batchable, from 1), its number of arguments n, then its n arguments
// (its ARGV[7...]).
// Returns the array of the calls' answers, in order.
var batchOp = &op{name: "batch", body: batchBody}

// batchable lists the functions batchOp runs, by their number there.
var batchable = []*op{enqueueOp, pollOp, cancelOp, renewOp, releaseOp, tickOp, setCapacityOp, setFairnessOp, setWeightOp}

const batchBody = `
-- batch | KEYS preludeKeys | ARGV[7..] per call: function number, n, its n arguments | returns each call's answer
local all, out, i = ARGV, {}, 7
while i <= #all do
  local f, n = batchable[tonumber(all[i])], tonumber(all[i + 1])
  local a = {all[1], all[2], all[3], all[4], all[5], all[6]}
  for j = 1, n do a[6 + j] = all[i + 1 + j] end
  i = i + 2 + n
  ARGV = a
  if #out > 0 then fresh() end
  out[#out + 1] = f()
end
return out
`

// poolOps are the pool's functions.
var poolOps = []*op{enqueueOp, pollOp, cancelOp, renewOp, releaseOp, tickOp, setCapacityOp, setFairnessOp, setWeightOp, seedOp, batchOp}

// poolLibrary is the library of the pool's functions.
var poolLibrary = newLibrary("slotpool", prelude, batchable, poolOps...)
