-- ratelimit: a circuit breaker shared by every process. This file is the body of
-- drive_breaker(KEYS, ARGV), defined after _prelude.lua (see ratelimit/_stores/redis/scripts.py).
-- Mirrors allow() and record() in ratelimit/_resilience/breaker_state.py, line for line.
--
-- KEYS[1]  the breaker's hash, ratelimit:{<name>}:breaker. Fields: mode (0 closed,
--          1 open, 2 half-open), opened_at, gen, probes, probe_at, and per bucket slot
--          s (0-based): i<s> (the bucket index it holds), c<s> calls, f<s> failures.
-- ARGV[1]  op: 'allow' | 'record' | 'peek'
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3..9]  failure_threshold, min_calls, window, buckets, cooldown,
--             half_open_probes, probe_timeout
-- ARGV[10..12]  record: the ticket's generation, '1' if it was a probe, and the
--               outcome: '1' success, '0' failure, '' neither
--
-- Returns:
--   allow:  {admitted 0|1, probe 0|1, generation, retry_after, previous mode, mode}
--   record: {previous mode, mode}
--   peek:   {mode as a call now would find it, calls in window, failures in window}

local key = KEYS[1]
local op = ARGV[1]
local now = clock(ARGV[2])
local threshold = tonumber(ARGV[3])
local min_calls = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local buckets = tonumber(ARGV[6])
local cooldown = tonumber(ARGV[7])
local max_probes = tonumber(ARGV[8])
local probe_timeout = tonumber(ARGV[9])

local CLOSED, OPEN, HALF_OPEN = 0, 1, 2

-- A field read back: its number, or `default` when it is missing or not a finite
-- number of the right kind (the hash evicted, or edited by hand). State that cannot
-- be read is lost, as if the key had expired: never an error, never a breaker stuck.
local function field(value, default, integer)
  local x = tonumber(value)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then return default end
  if integer and x ~= math.floor(x) then return default end
  return x
end

local raw = redis.call('HMGET', key, 'mode', 'opened_at', 'gen', 'probes', 'probe_at')
local s = {
  mode = field(raw[1], CLOSED, true),
  opened_at = field(raw[2], 0),
  gen = field(raw[3], 0, true),
  probes = field(raw[4], 0, true),
  probe_at = field(raw[5], 0),
}
if s.mode ~= OPEN and s.mode ~= HALF_OPEN then s.mode = CLOSED end
local changed = {}
local cleared = false

local function set(field, value)
  s[field] = value
  changed[#changed + 1] = field
end

local function clear()
  cleared = true
end

local function open()
  set('mode', OPEN)
  set('opened_at', now)
  set('gen', s.gen + 1)
  set('probes', 0)
  clear()
end

local function save()
  local fields = {}
  for _, field in ipairs(changed) do
    fields[#fields + 1] = field
    fields[#fields + 1] = fmt(s[field])
  end
  if cleared then
    local stale = {}
    for slot = 0, buckets - 1 do
      stale[#stale + 1] = 'i' .. slot
      stale[#stale + 1] = 'c' .. slot
      stale[#stale + 1] = 'f' .. slot
    end
    redis.call('HDEL', key, unpack(stale))
  end
  if #fields > 0 then redis.call('HSET', key, unpack(fields)) end
  expire_after(key, window + cooldown + probe_timeout)
end

local function window_counts(current)
  local calls, failures = 0, 0
  for slot = 0, buckets - 1 do
    local got = redis.call('HMGET', key, 'i' .. slot, 'c' .. slot, 'f' .. slot)
    local index = field(got[1], nil, true)
    if index and index > current - buckets and index <= current then
      calls = calls + field(got[2], 0, true)
      failures = failures + field(got[3], 0, true)
    end
  end
  return calls, failures
end

local function current_bucket()
  return math.floor(now / (window / buckets))
end

if op == 'allow' then
  local previous = s.mode
  if s.mode == OPEN then
    local reopen = s.opened_at + cooldown
    if reopen - now > EPSILON then
      return {0, 0, fmt(s.gen), fmt(reopen - now), previous, OPEN}
    end
    set('mode', HALF_OPEN)
    set('probes', 0)
  end
  if s.mode == HALF_OPEN then
    if s.probes >= max_probes then
      local free_at = s.probe_at + probe_timeout
      if free_at - now > EPSILON then
        if #changed > 0 then save() end
        return {0, 0, fmt(s.gen), fmt(free_at - now), previous, s.mode}
      end
      set('probes', 0)
    end
    set('probes', s.probes + 1)
    set('probe_at', now)
    save()
    return {1, 1, fmt(s.gen), '0', previous, s.mode}
  end
  return {1, 0, fmt(s.gen), '0', previous, s.mode}
elseif op == 'record' then
  local previous = s.mode
  local generation = tonumber(ARGV[10])
  local probe = ARGV[11] == '1'
  local ok = ARGV[12]
  if generation ~= s.gen then return {previous, s.mode} end
  if probe then
    if s.mode ~= HALF_OPEN then return {previous, s.mode} end
    local left = s.probes - 1
    if left < 0 then left = 0 end
    set('probes', left)
    if ok == '1' then
      set('mode', CLOSED)
      set('probes', 0)
      clear()
    elseif ok == '0' then
      open()
    end
    save()
    return {previous, s.mode}
  end
  if s.mode ~= CLOSED or ok == '' then return {previous, s.mode} end
  local current = current_bucket()
  local slot = current % buckets
  local i, c, f = 'i' .. slot, 'c' .. slot, 'f' .. slot
  -- Counted here rather than with HINCRBY, which fails on a count it cannot read.
  local got = redis.call('HMGET', key, i, c, f)
  local slot_calls, slot_failures = 0, 0
  if field(got[1], nil, true) == current then
    slot_calls, slot_failures = field(got[2], 0, true), field(got[3], 0, true)
  end
  slot_calls = slot_calls + 1
  if ok == '0' then slot_failures = slot_failures + 1 end
  redis.call('HSET', key, i, fmt(current), c, fmt(slot_calls), f, fmt(slot_failures))
  local calls, failures = window_counts(current)
  if calls >= min_calls and failures > 0 and failures >= threshold * calls - EPSILON then open() end
  save()
  return {previous, s.mode}
elseif op == 'peek' then
  local mode = s.mode
  if mode == OPEN and s.opened_at + cooldown - now <= EPSILON then mode = HALF_OPEN end
  if mode ~= CLOSED then return {mode, 0, 0} end
  local calls, failures = window_counts(current_bucket())
  return {mode, calls, failures}
end
return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
