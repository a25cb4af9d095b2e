-- ratelimit: a circuit breaker shared by every process. Loaded after _prelude.lua.
-- Mirrors allow() and record() in ratelimit/_breaker_state.py, line for line.
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

local raw = redis.call('HMGET', key, 'mode', 'opened_at', 'gen', 'probes', 'probe_at')
local s = {
  mode = tonumber(raw[1]) or CLOSED,
  opened_at = tonumber(raw[2]) or 0,
  gen = tonumber(raw[3]) or 0,
  probes = tonumber(raw[4]) or 0,
  probe_at = tonumber(raw[5]) or 0,
}
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
    local index = tonumber(got[1])
    if index and index > current - buckets and index <= current then
      calls = calls + tonumber(got[2])
      failures = failures + tonumber(got[3])
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
  if tonumber(redis.call('HGET', key, i)) ~= current then
    redis.call('HSET', key, i, fmt(current), c, 0, f, 0)
  end
  redis.call('HINCRBY', key, c, 1)
  if ok == '0' then redis.call('HINCRBY', key, f, 1) end
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
