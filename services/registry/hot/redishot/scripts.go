package redishot

import "github.com/redis/go-redis/v9"

// The Lua scripts that change the hot state. Each runs atomically in Redis: a check and the
// write it guards are never separated by another client's command.
//
// Layout, under the hash tag {prefix} so that every key lives in one slot (the scripts touch
// several keys, which Redis Cluster allows only within a slot):
//
//	{p}:epoch             hash  e (epoch), run (run_id of the Redis process that was given
//	                            the epoch), c (counter of the epoch)
//	{p}:lock:<resource>   string "<epoch> <counter> <acquired ms> <holder>", set with
//	                            SET NX PXAT (TIME + ttl) on a grant: Redis frees it at expiry
//	{p}:locks             zset  resources of (possibly) held locks, score 0: byte-ordered, for
//	                            ListLocks by prefix and page without KEYS or SCAN
//	{p}:expiry            zset  the same resources scored by expiry (ms), so that entries of
//	                            locks that expired are cleaned a few at a time on every grant
//	{p}:released          channel: a resource name is published when its lock is released
//	{p}:hb:<instance>     string last heartbeat (ms), PX ttl: the agent's TTL key
//	{p}:heartbeats        zset  instance ids scored by last heartbeat (ms): the staleness index
//	{p}:heartbeats:run    string run_id of the Redis process whose staleness index is complete
//
// Restart detection: Redis' run_id changes with every process start. The epoch hash records the
// run_id it was installed under; a grant whose Redis has another run_id (restarted, possibly
// from an old RDB/AOF whose counter is behind tokens already handed out; or a promoted replica)
// or no epoch at all (flushed) is refused with -1 until a new durable epoch is installed.

// timeMs is the Lua that sets now to Redis' clock in milliseconds.
const timeMs = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// runID is the Lua that sets run to the Redis process's run_id.
const runID = `
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
`

// luaParseLock is the Lua that splits a lock value into e, c, acq and holder (strings).
const luaParseLock = `
local function parse(v)
  return string.match(v, '^(%d+) (%d+) (%d+) (.*)$')
end
`

// acquireScript grants a lock or names its holder.
//
//	KEYS: lock, epoch, locks, expiry
//	ARGV: holder, ttl ms, resource, lock key prefix
//	=> {1, epoch, counter, acquired ms, expires ms}   granted
//	   {0, holder, expires ms, now ms}                 held by another
//	   {-1}                                            no valid epoch: install one and retry
var acquireScript = redis.NewScript(timeMs + luaParseLock + `
local cur = redis.call('GET', KEYS[1])
local ce, cc
if cur then
  local e, c, acq, holder = parse(cur)
  if holder ~= ARGV[1] then
    return {0, holder, redis.call('PEXPIRETIME', KEYS[1]), now}
  end
  ce, cc = e, c
end
` + runID + `
local ep = redis.call('HMGET', KEYS[2], 'e', 'run', 'c')
if not ep[1] or ep[2] ~= run or (tonumber(ep[3]) or 0) >= 4294967295 then
  return {-1}
end
local ttl = tonumber(ARGV[2])
local e, c
if cur and ce == ep[1] then
  -- The same holder, under the current epoch: re-granted with the same token.
  e, c = ce, cc
else
  -- A new grant (or the same holder's grant from an older epoch): a new token.
  e, c = ep[1], redis.call('HINCRBY', KEYS[2], 'c', 1)
  redis.call('ZADD', KEYS[3], 0, ARGV[3])
  -- Amortised cleanup: forget a few index entries whose locks expired.
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 4)
  for _, r in ipairs(dead) do
    if redis.call('EXISTS', ARGV[4] .. r) == 0 then
      redis.call('ZREM', KEYS[3], r)
      redis.call('ZREM', KEYS[4], r)
    end
  end
end
local v = e .. ' ' .. c .. ' ' .. now .. ' ' .. ARGV[1]
if cur then
  redis.call('SET', KEYS[1], v, 'XX', 'PXAT', now + ttl)
else
  redis.call('SET', KEYS[1], v, 'NX', 'PXAT', now + ttl)
end
redis.call('ZADD', KEYS[4], now + ttl, ARGV[3])
return {1, tonumber(e), tonumber(c), now, now + ttl}
`)

// installEpochScript installs a durable epoch, unless a valid one is there with room for the
// tokens asked for.
//
//	KEYS: epoch
//	ARGV: candidate epoch (just taken from the durable store), tokens needed (1 when absent)
//	=> the epoch in force
var installEpochScript = redis.NewScript(runID + `
local ep = redis.call('HMGET', KEYS[1], 'e', 'run', 'c')
if ep[1] and ep[2] == run and (tonumber(ep[3]) or 0) + (tonumber(ARGV[2]) or 1) <= 4294967295 then
  return tonumber(ep[1])
end
local e = tonumber(ARGV[1])
if ep[1] and tonumber(ep[1]) >= e then
  -- The durable store is behind this Redis (it should not be): keep increasing anyway.
  e = tonumber(ep[1]) + 1
end
redis.call('HSET', KEYS[1], 'e', e, 'run', run, 'c', 0)
return e
`)

// checkGrant is the Lua shared by renew and release: the rule of hot.CheckGrant. It returns
// nil and the parsed value when ARGV[1..3] (holder, epoch, counter) hold the current grant of
// KEYS[1], else the error reply.
const checkGrant = luaParseLock + `
local function check()
  local cur = redis.call('GET', KEYS[1])
  if not cur then
    return {-1}, nil
  end
  local e, c, acq, holder = parse(cur)
  local te, tc = tonumber(ARGV[2]), tonumber(ARGV[3])
  e, c = tonumber(e), tonumber(c)
  if te < e or (te == e and tc < c) then
    return {-2, holder}, nil
  end
  if te ~= e or tc ~= c then
    return {-3}, nil
  end
  if holder ~= ARGV[1] then
    return {-4, holder}, nil
  end
  return nil, {cur, acq}
end
`

// renewScript extends a held lock.
//
//	KEYS: lock, expiry
//	ARGV: holder, epoch, counter, ttl ms, resource
//	=> {1, acquired ms, expires ms}, or {-1} not held, {-2, holder} stale token, {-3} wrong
//	   token, {-4, holder} held by another
var renewScript = redis.NewScript(timeMs + checkGrant + `
local refused, held = check()
if refused then
  return refused
end
local ttl = tonumber(ARGV[4])
redis.call('SET', KEYS[1], held[1], 'PXAT', now + ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
return {1, tonumber(held[2]), now + ttl}
`)

// releaseScript frees a held lock and wakes its waiters.
//
//	KEYS: lock, locks, expiry
//	ARGV: holder, epoch, counter, resource, channel
//	=> {1}, or the refusals of renewScript
var releaseScript = redis.NewScript(checkGrant + `
local refused = check()
if refused then
  return refused
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[4])
return {1}
`)

// getScript reads a lock and its expiry together.
//
//	KEYS: lock
//	=> {1, value, expires ms} or {0}
var getScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {0}
end
return {1, cur, redis.call('PEXPIRETIME', KEYS[1])}
`)

// listScript walks the lock index from a lexicographic bound, dropping entries of locks that
// expired, and collects held locks (of one holder, if given).
//
//	KEYS: locks, expiry
//	ARGV: min, max (ZRANGEBYLEX bounds), limit, holder or "", lock key prefix, scan budget
//	=> {next, {resource, holder, epoch, counter, acquired ms, expires ms, ...}}: next is where
//	   to continue ("" at the end)
var listScript = redis.NewScript(luaParseLock + `
local limit, budget = tonumber(ARGV[3]), tonumber(ARGV[6])
local out, n, scanned, last = {}, 0, 0, ''
local min = ARGV[1]
while true do
  local batch = redis.call('ZRANGEBYLEX', KEYS[1], min, ARGV[2], 'LIMIT', 0, 128)
  if #batch == 0 then
    return {'', out}
  end
  for _, r in ipairs(batch) do
    scanned = scanned + 1
    local k = ARGV[5] .. r
    local v = redis.call('GET', k)
    if v then
      local e, c, acq, holder = parse(v)
      if ARGV[4] == '' or holder == ARGV[4] then
        if n == limit then
          return {last, out}
        end
        n = n + 1
        last = r
        for _, x in ipairs({r, holder, e, c, acq, tostring(redis.call('PEXPIRETIME', k))}) do
          out[#out + 1] = x
        end
      end
    else
      redis.call('ZREM', KEYS[1], r)
      redis.call('ZREM', KEYS[2], r)
    end
    if scanned >= budget then
      return {r, out}
    end
  end
  min = '(' .. batch[#batch]
end
`)

// beatScript refreshes an agent's TTL key and moves its index entry forward.
//
//	KEYS: hb key, heartbeats
//	ARGV: at ms, ttl ms, instance id
var beatScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], 'GT', ARGV[1], ARGV[3])
return 1
`)

// staleScript answers the index entries before a time, if the index is complete.
//
//	KEYS: heartbeats, heartbeats:run
//	ARGV: before ms (exclusive), offset, limit
//	=> {id, score, ...} or -1 when the index is not known complete on this Redis process
var staleScript = redis.NewScript(runID + `
if redis.call('GET', KEYS[2]) ~= run then
  return -1
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'WITHSCORES', 'LIMIT', ARGV[2], ARGV[3])
`)

// markIndexedScript records that the staleness index is complete on this Redis process.
//
//	KEYS: heartbeats:run
var markIndexedScript = redis.NewScript(runID + `
redis.call('SET', KEYS[1], run)
return 1
`)

// acquireAllScript grants a batch of locks to one holder, all or nothing (hot.Locks.AcquireAll).
//
//	KEYS: epoch, locks, expiry, lock 1..n
//	ARGV: holder, ttl ms, lock key prefix, resource 1..n
//	=> {1, epoch, now ms, counter 1..n}     granted: expires now + ttl, acquired now
//	   {0, i, holder, expires ms, now ms}   resource i (from 1) is held by another
//	   {-1, tokens}                         no valid epoch with room for tokens new grants:
//	                                        install one and retry
var acquireAllScript = redis.NewScript(timeMs + luaParseLock + `
local n, holder = #KEYS - 3, ARGV[1]
local curs = {}
for i = 1, n do
  local cur = redis.call('GET', KEYS[3 + i])
  curs[i] = false
  if cur then
    local e, c, acq, h = parse(cur)
    if h ~= holder then
      return {0, i, h, redis.call('PEXPIRETIME', KEYS[3 + i]), now}
    end
    curs[i] = {e, c}
  end
end
` + runID + `
local ep = redis.call('HMGET', KEYS[1], 'e', 'run', 'c')
local fresh = 0
for i = 1, n do
  if not curs[i] or curs[i][1] ~= ep[1] then
    fresh = fresh + 1
  end
end
if not ep[1] or ep[2] ~= run or (tonumber(ep[3]) or 0) + fresh > 4294967295 then
  return {-1, fresh}
end
local ttl = tonumber(ARGV[2])
local e, c = ep[1], 0
if fresh > 0 then
  c = redis.call('HINCRBY', KEYS[1], 'c', fresh) - fresh
end
local out = {1, tonumber(e), now}
for i = 1, n do
  local r, cc = ARGV[3 + i], nil
  if curs[i] and curs[i][1] == e then
    -- Held by the holder under the current epoch: re-granted with the same token.
    cc = tonumber(curs[i][2])
  else
    c = c + 1
    cc = c
    redis.call('ZADD', KEYS[2], 0, r)
  end
  redis.call('SET', KEYS[3 + i], e .. ' ' .. cc .. ' ' .. now .. ' ' .. holder, 'PXAT', now + ttl)
  redis.call('ZADD', KEYS[3], now + ttl, r)
  out[#out + 1] = cc
end
if fresh > 0 then
  -- Amortised cleanup, as in acquireScript.
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 4)
  for _, r in ipairs(dead) do
    if redis.call('EXISTS', ARGV[3] .. r) == 0 then
      redis.call('ZREM', KEYS[2], r)
      redis.call('ZREM', KEYS[3], r)
    end
  end
end
return out
`)

// releaseAllScript frees the current grants of a batch of one holder and wakes their waiters
// (one message: the released resources separated by newlines).
//
//	KEYS: locks, expiry, lock 1..n
//	ARGV: holder, channel, then resource, epoch, counter of each grant
//	=> {code 1, holder 1, ..., code n, holder n}: code 1 released, else the refusals of
//	   renewScript (holder "" when it names none)
var releaseAllScript = redis.NewScript(luaParseLock + `
local n, holder = #KEYS - 2, ARGV[1]
local out, released = {}, {}
for i = 1, n do
  local k, r = KEYS[2 + i], ARGV[3 * i]
  local te, tc = tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  local code, who = 1, ''
  local cur = redis.call('GET', k)
  if not cur then
    code = -1
  else
    local e, c, acq, h = parse(cur)
    e, c = tonumber(e), tonumber(c)
    if te < e or (te == e and tc < c) then
      code, who = -2, h
    elseif te ~= e or tc ~= c then
      code = -3
    elseif h ~= holder then
      code, who = -4, h
    end
  end
  if code == 1 then
    redis.call('DEL', k)
    redis.call('ZREM', KEYS[1], r)
    redis.call('ZREM', KEYS[2], r)
    released[#released + 1] = r
  end
  out[#out + 1] = code
  out[#out + 1] = who
end
if #released > 0 then
  redis.call('PUBLISH', ARGV[2], table.concat(released, '\n'))
end
return out
`)
