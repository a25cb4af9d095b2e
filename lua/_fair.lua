-- ratelimit: driver for a budget shared fairly among tenants (FairShare): the budget's
-- line and every active tenant's pace, decided in one call. This file is the body of
-- drive_fair(ALG, KIND, KEYS, ARGV), run at each call; what it calls is defined once
-- before it, in _prelude.lua and the algorithm's file (see ratelimit/_stores/redis/scripts.py).
--
-- KEYS[1]  the budget line's key, ratelimit:{<name>}:fair:<algorithm>
-- KEYS[2]  the active tenants' finishes: a sorted set, tenant -> finish (seconds)
-- KEYS[3]  a hash: 't<tenant>' -> the tenant's weight, '=' -> the sum of those weights
--          (one hash tag: one Cluster slot)
-- ARGV[1]  op: 'ask' | 'peek' | 'reset'
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  the tenant ('' is the tenant that tenants past the most kept are paced as)
-- ARGV[4]  the tenant's weight (ask)
-- ARGV[5]  tokens (ask, peek)
-- ARGV[6]  ask: max_wait in seconds, '' for no limit
-- ARGV[7]  ask, peek: the ticket this request presents, '' for none
-- ARGV[8]  lead: seconds a tenant's pace may run ahead of now and still be admitted
-- ARGV[9]  the most tenants paced on their own
-- ARGV[10] the budget's sustained rate (tokens per second)
-- ARGV[11..12]  the algorithm's two parameters
--
-- Returns, as strings (seconds, %.17g):
--   ask:   {wait, deferred ('1' | '0'), ticket, next_in}: see Answer in fair.py (a
--          grant's ticket is the slot it booked for the process's next request)
--   peek:  {the wait a request of the tenant's would be told now}
--   reset: {now} (the line and every pace forgotten)
-- Mirrors ratelimit/_algorithms/fair.py operation for operation.

local op = ARGV[1]
local now = clock(ARGV[2])
local line_key, finishes, weights = KEYS[1], KEYS[2], KEYS[3]
local lead = tonumber(ARGV[8])
local most_tenants = tonumber(ARGV[9])
local rate = tonumber(ARGV[10])
local self = ALG.new(line_key, tonumber(ARGV[11]), tonumber(ARGV[12]))

-- See _paced in fair.py.
local function paced(tenant)
  if redis.call('ZSCORE', finishes, tenant) or redis.call('ZCARD', finishes) < most_tenants then
    return tenant
  end
  return ''
end

if op == 'reset' then
  redis.call('DEL', line_key, finishes, weights)
  return {fmt(now)}
elseif op == 'peek' then
  local tokens = tonumber(ARGV[5])
  local slot = -math.huge
  if ARGV[7] ~= '' then
    slot = tonumber(ARGV[7])
  else
    local finish = tonumber(redis.call('ZSCORE', finishes, paced(ARGV[3])))
    if finish and finish > now then slot = finish end
  end
  local due = slot - lead
  if due - now > EPSILON then return {fmt(due - now)} end
  local admit_at, at = ALG.plan(self, ALG.load(self), now, tokens)
  return {fmt(math.abs(decide(admit_at, at, now, math.huge)))}
elseif op ~= 'ask' then
  return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
end

-- See _expire in fair.py: the tenants whose pace ended by now, the earliest first.
local total = tonumber(redis.call('HGET', weights, '=')) or 0.0
local ended = redis.call('ZRANGEBYSCORE', finishes, '-inf', fmt(now))
if #ended > 0 then
  local fields = {}
  for i = 1, #ended do
    fields[i] = 't' .. ended[i]
    total = total - (tonumber(redis.call('HGET', weights, fields[i])) or 0.0)
  end
  redis.call('ZREMRANGEBYSCORE', finishes, '-inf', fmt(now))
  -- (In pieces: unpack takes a few thousand values at most, and as many tenants may
  -- end at once.)
  for i = 1, #fields, 1000 do
    local last = i + 999
    if last > #fields then last = #fields end
    redis.call('HDEL', weights, unpack(fields, i, last))
  end
end
local kept = redis.call('ZCARD', finishes)
if kept == 0 then total = 0.0 end

-- The tenant as paced (see _paced in fair.py), and its entry: its finish and weight
-- (nil: none), read once and written once, at the end (`write`).
local tenant = ARGV[3]
local entry = tonumber(redis.call('ZSCORE', finishes, tenant))
if not entry and kept >= most_tenants then
  tenant = ''
  entry = tonumber(redis.call('ZSCORE', finishes, tenant))
end
local entry_weight = nil
if entry then
  entry_weight = tonumber(redis.call('HGET', weights, 't' .. tenant))
  -- (A finish without its weight, in keys edited by hand: no entry, never an error.)
  if not entry_weight then entry = nil end
end
local paced = false
local weight = tonumber(ARGV[4])
local tokens = tonumber(ARGV[5])

-- See _finish in fair.py: the tenant's pace moved on by `tokens`.
local function pace()
  local start, others = now, total
  if entry then
    start = entry
    others = total - entry_weight
  end
  if start < now then start = now end
  local r = rate * weight / (others + weight)
  local finish = start
  if r > 0.0 and r < math.huge then finish = start + tokens / r end
  if finish <= now then return end  -- nothing paced: nothing to keep
  if entry then
    total = total + (weight - entry_weight)
  else
    total = total + weight
  end
  entry, entry_weight, paced = finish, weight, true
end

-- What the decision changed, written: the tenant's entry and the sum, or what the
-- expiry left; the keys kept until the latest finish.
local function write()
  if paced then
    redis.call('ZADD', finishes, fmt(entry), tenant)
    redis.call('HSET', weights, 't' .. tenant, fmt(weight), '=', fmt(total))
    local last = redis.call('ZRANGE', finishes, -1, -1, 'WITHSCORES')
    local ms = idle_ms(tonumber(last[2]) - now)
    redis.call('PEXPIRE', finishes, ms)
    redis.call('PEXPIRE', weights, ms)
  elseif #ended > 0 then
    if kept == 0 then
      redis.call('DEL', weights)
    else
      redis.call('HSET', weights, '=', fmt(total))
    end
  end
end

local slot
if ARGV[7] == '' then
  slot = entry or -math.huge
else
  slot = tonumber(ARGV[7])
end
local due = slot - lead
if due - now > EPSILON then
  local max_wait = math.huge
  if ARGV[6] ~= '' then max_wait = tonumber(ARGV[6]) end
  if due - now > max_wait + EPSILON then
    write()
    return {fmt(now - due), '0', '0', '0'}
  end
  if ARGV[7] == '' then pace() end
  write()
  return {fmt(due - now), '1', fmt(slot), '0'}
end

local max_wait = math.huge
if ARGV[6] ~= '' then max_wait = tonumber(ARGV[6]) end
local state = ALG.load(self)
local admit_at, at = ALG.plan(self, state, now, tokens)
local wait = decide(admit_at, at, now, max_wait)
if wait < 0 then
  write()
  return {fmt_wait(wait), '0', '0', '0'}
end
ALG.save(self, ALG.commit(self, state, now, tokens, at), now)
if ARGV[7] == '' then pace() end
-- The slot of the asking process's next request, booked now: where the finish stands.
local booked = entry or now
pace()
write()
local following = booked - lead - now
if following < 0.0 then following = 0.0 end
return {fmt_wait(wait), '0', fmt(booked), fmt(following)}
