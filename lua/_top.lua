-- ratelimit: the fleet's counters, for `ratelimit top` (read by ratelimit/_stores/fleet.py).
-- Loaded after _members.lua by every driver of a rate limit.
--
-- One hash per limiter and second, <base>:top:<second>, gone after TOP_KEPT_MS: a
-- single limiter's base is its state key; a composite's ratelimit:{<name>}:composite,
-- a budget with priorities' ratelimit:{<name>}:priorities (see `group_base`). Fields:
-- r requests refused, w<i> granted after a wait of at most WAIT_BOUNDS[i] seconds
-- (w<n+1>: longer; their sum is the grants), c reservations withdrawn before they were
-- due (a timeout, a cancelled task: grants that never went, which `top` takes off the
-- grants), l tokens leased, p pauses fed back by a provider. Usually one HINCRBY a call:
-- the TTL is set only when a field is new, which it is whenever the key is.
--
-- A backend made with counters=False keeps none: its calls' op (ARGV[1] of every rate
-- limit's driver) starts with '~', and the drivers pass a nil base, which counts nothing.

local WAIT_BOUNDS = {0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}
local TOP_KEPT_MS = '70000'

-- ARGV[1] of a rate limit's driver: the op, and whether the call is counted.
local function op_of(text)
  if string.byte(text, 1) == 126 then return string.sub(text, 2), false end
  return text, true
end

local function wait_field(wait)
  -- Most grants go at once (0): the first bound's field, with no loop and no name built.
  if wait <= EPSILON then return 'w1' end
  for i = 2, #WAIT_BOUNDS do
    if wait <= WAIT_BOUNDS[i] + EPSILON then return 'w' .. i end
  end
  return 'w' .. (#WAIT_BOUNDS + 1)
end

-- The key of the last second counted, kept between calls of the function library
-- (a library's locals live as long as it is loaded; a script's die with the call, so
-- a script builds it each time): a hot limiter counts into one key for a second, and
-- string.format is paid once a second, not at each decision. Only the key's name is
-- kept, never a count; a different base or second builds it again.
local last_base, last_second, last_key = nil, nil, nil

local function top_key(base, now)
  local second = math.floor(now)
  if second == last_second and base == last_base then return last_key end
  last_key = base .. ':top:' .. string.format('%d', second)
  last_base, last_second = base, second
  return last_key
end

-- The counters' base of a limiter with several keys: its name's prefix and `what`.
-- (A name's braces are escaped, so the first '}' ends its hash tag.)
local function group_base(key, what)
  return string.match(key, '^(ratelimit:{.-}:)') .. what
end

-- One decision's count: the hot path's one command, with no table built.
local function tally_one(base, now, wait)
  if base == nil then return end
  local key = top_key(base, now)
  local field = 'r'
  if wait >= 0 then field = wait_field(wait) end
  -- ('1' as text: a number is written out with %.17g on the server's side, dearer.)
  if redis.call('HINCRBY', key, field, '1') == 1 then redis.call('PEXPIRE', key, TOP_KEPT_MS) end
end

-- `waits`: the signed waits decided (< 0 refused); `leased`, `pauses`: counts.
local function tally(base, now, waits, leased, pauses)
  if base == nil then return end
  local counts = {}
  local function add(field, n)
    if n > 0 then counts[field] = (counts[field] or 0) + n end
  end
  for _, wait in ipairs(waits) do
    if wait < 0 then add('r', 1) else add(wait_field(wait), 1) end
  end
  add('l', leased)
  add('p', pauses)
  local key = top_key(base, now)
  local new = false
  for field, n in pairs(counts) do
    local total
    if field == 'l' then total = tonumber(redis.call('HINCRBYFLOAT', key, field, fmt(n)))
    else total = redis.call('HINCRBY', key, field, string.format('%d', n)) end
    if total == n then new = true end
  end
  if new then redis.call('PEXPIRE', key, TOP_KEPT_MS) end
end

-- A reservation withdrawn before it was due: one field, one command.
local function tally_withdrawn(base, now)
  if base == nil then return end
  local key = top_key(base, now)
  if redis.call('HINCRBY', key, 'c', '1') == 1 then redis.call('PEXPIRE', key, TOP_KEPT_MS) end
end
