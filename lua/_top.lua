-- ratelimit: the fleet's counters, for `ratelimit top` (read by ratelimit/_stores/redis/fleet.py).
-- Loaded after _members.lua by every driver of a rate limit.
--
-- One hash per limiter and second, <base>:top:<second>, gone after TOP_KEPT_MS: a
-- single limiter's base is its state key; a composite's ratelimit:{<name>}:composite,
-- a budget with priorities' ratelimit:{<name>}:priorities (see `group_base`). Fields:
-- r requests refused, w<i> granted after a wait of at most WAIT_BOUNDS[i] seconds
-- (w<n+1>: longer; their sum is the grants), c reservations withdrawn before they were
-- due (a timeout, a cancelled task: grants that never went, which `top` takes off the
-- grants), l tokens allotted (`lease=`), p pauses fed back by a provider. The TTL is
-- set when a field is new, which it is whenever the key is.
--
-- A backend made with counters=False keeps none: its calls' op (ARGV[1] of every rate
-- limit's driver) starts with '~', and the drivers pass a nil base, which counts nothing.
--
-- Counting in memory (the function library only). A library's locals live as long as
-- it is loaded, so there the counts are held in Lua, per base, and written in bulk:
-- the first count of a base in a second is written at once (the key exists, and the
-- SCAN of `top` finds the limiter); the later counts of that second are only held; the
-- base's first call in another second writes what is held first, one HINCRBY (or
-- HINCRBYFLOAT) per field into its own second's key. So a hot limiter pays a few
-- commands a second, not one a decision. A call only ever writes the keys of the base
-- it was given (a Cluster's slots: they share the hash tag of its KEYS[1]).
-- `ratelimit top` makes the counts exact by calling <PREFIX>top_flush (lua/top_flush.lua)
-- for the bases it reads, before reading them.
-- What is held is lost with the library (FUNCTION FLUSH, a library replaced, a
-- restart, a failover): at most a second's counts per limiter, less the first.
-- A library serves every database of its server, and a call cannot tell which is its
-- own: counts are held for database 0's calls only (see top_holds_now below).
-- A script's locals die with the call: a script (a server without Functions, a
-- Cluster's client) writes every count at once. TOP_HOLDS, set just before this file
-- by ratelimit/_stores/redis/scripts.py, tells the two apart: true in the library only.

local WAIT_BOUNDS = {0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}
local TOP_KEPT_MS = '70000'
local TOP_KEPT_SECONDS = 70
-- The most bases whose counts are held at once; past it, a new base writes each count
-- at once as a script does (a keyed limiter may have millions of bases).
local TOP_HELD_MOST = 10000

-- Whether this call's counts may be held: a library's, called from database 0. A
-- library serves every database of its server, and a call cannot tell which is its
-- own, so a client of another one says so ('!' before the op, see op_of) and its
-- counts are written at once, never pooled with a name's of another database. Set
-- at every call, before it counts, by op_of.
local top_holds_now = TOP_HOLDS

-- ARGV[1] of a rate limit's driver: the op, whether the call is counted, and whether
-- its client's database is another than 0. '~' before it: counted not at all
-- (counters=False); '!': counted at once (see above); '^': both, not counted and
-- another database. (What a library caches between calls is cached for database 0's
-- calls only: see also _cache.lua.)
local function op_of(text)
  local mark = string.byte(text, 1)
  if mark == 126 then return string.sub(text, 2), false, false end
  if mark == 94 then return string.sub(text, 2), false, true end
  if mark == 33 then
    top_holds_now = false
    return string.sub(text, 2), true, true
  end
  top_holds_now = TOP_HOLDS
  return text, true, false
end

local function wait_field(wait)
  -- Most grants go at once (0): the first bound's field, with no loop and no name built.
  if wait <= EPSILON then return 'w1' end
  for i = 2, #WAIT_BOUNDS do
    if wait <= WAIT_BOUNDS[i] + EPSILON then return 'w' .. i end
  end
  return 'w' .. (#WAIT_BOUNDS + 1)
end

-- The key of the last second counted, cached between calls of the function library
-- (a script builds it each time): string.format is paid once a second, not at each
-- decision. A different base or second builds it again.
local last_base, last_second, last_key = nil, nil, nil

local function top_key(base, second)
  if second == last_second and base == last_base then return last_key end
  last_key = base .. ':top:' .. string.format('%d', second)
  last_base, last_second = base, second
  return last_key
end

-- The counts held (the library only): held[base] is {field = count} (a count written
-- is set back to 0, not removed: the table is reused from second to second), for the
-- second held_at[base], whose first count was written at once.
local held, held_at, held_bases = {}, {}, 0
-- The sweep (see `make_room`): the second of the last, and where the next starts, a
-- base still held (next() may not be given a key removed once the table has grown
-- since), or nil for the first.
local swept_at, sweep_from = nil, nil
-- The most bases one sweep looks at: a sweep of them all would stall the server
-- (its cost grows with the bases held).
local SWEEP_MOST = 500

-- One field's count into `key`; true if the field is new there (so is the key).
local function write_count(key, field, n)
  if field == 'l' then return tonumber(redis.call('HINCRBYFLOAT', key, field, fmt(n))) == n end
  -- (Text: a number is written out with %.17g on the server's side, dearer.)
  return redis.call('HINCRBY', key, field, string.format('%d', n)) == n
end

-- Writes the counts held for `base` into their second's key.
local function write_held(base)
  local counts = held[base]
  if counts == nil then return end
  local key, new = nil, false
  for field, n in pairs(counts) do
    if n ~= 0 then
      if key == nil then key = base .. ':top:' .. string.format('%d', held_at[base]) end
      if write_count(key, field, n) then new = true end
      counts[field] = 0
    end
  end
  if new then redis.call('PEXPIRE', key, TOP_KEPT_MS) end
end

-- Room for one more base, if a sweep (at most one a second, of at most SWEEP_MOST
-- bases, each from where the last stopped) makes some: it forgets the bases with
-- nothing held from an earlier second, and what is held from a second older than the
-- counters are kept (nobody could read it: its key is gone). Bases holding counts of
-- a recent second stay (only a call for that base may write them).
local function make_room(second)
  if swept_at == second then return false end
  swept_at = second
  local kept = sweep_from
  local base = next(held, sweep_from)
  for _ = 1, SWEEP_MOST do
    if base == nil then
      kept = nil
      break
    end
    local following = next(held, base)
    local at = held_at[base]
    local forget = at < second - TOP_KEPT_SECONDS
    if not forget and at ~= second then
      forget = true
      for _, n in pairs(held[base]) do
        if n ~= 0 then forget = false break end
      end
    end
    if forget then
      held[base], held_at[base] = nil, nil
      held_bases = held_bases - 1
    else
      kept = base
    end
    base = following
  end
  sweep_from = kept
  return held_bases < TOP_HELD_MOST
end

-- A base's first count in `second` is being written at once: what it held from
-- another second is written first, and from now on its counts of `second` are held
-- (if there is room).
local function hold_from(base, second)
  if held[base] ~= nil then
    write_held(base)
    held_at[base] = second
    return
  end
  if held_bases >= TOP_HELD_MOST and not make_room(second) then return end
  held[base], held_at[base] = {}, second
  held_bases = held_bases + 1
end

-- One count of one field: on a hot limiter's path, a look-up and an increment.
local function count_field(base, now, field)
  local second = math.floor(now)
  if top_holds_now then
    if held_at[base] == second then
      local counts = held[base]
      counts[field] = (counts[field] or 0) + 1
      return
    end
    hold_from(base, second)
  end
  local key = top_key(base, second)
  -- ('1' as text: a number is written out with %.17g on the server's side, dearer.)
  if redis.call('HINCRBY', key, field, '1') == 1 then redis.call('PEXPIRE', key, TOP_KEPT_MS) end
end

-- The counters' base of a limiter with several keys: its name's prefix and `what`.
-- (A name's braces are escaped, so the first '}' ends its hash tag.) The last one is
-- kept, as the last key's name above: a hot composite builds no string a call.
local group_key, group_what, group_of = nil, nil, nil

local function group_base(key, what)
  if key == group_key and what == group_what then return group_of end
  group_of = string.match(key, '^(ratelimit:{.-}:)') .. what
  group_key, group_what = key, what
  return group_of
end

-- One decision's count: the hot path, with no table built (a held count is looked
-- for here, one call less than through count_field).
local function count_one(base, now, wait)
  if base == nil then return end
  local field = 'r'
  if wait >= 0 then field = wait_field(wait) end
  if top_holds_now and held_at[base] == math.floor(now) then
    local counts = held[base]
    counts[field] = (counts[field] or 0) + 1
    return
  end
  count_field(base, now, field)
end

-- `waits`: the signed waits decided (< 0 refused); `allotted`, `pauses`: counts. Held
-- (the library, a base's later call in a second), added to what is held and no more;
-- else written, a table of the counts built first.
local function count_decided(base, now, waits, allotted, pauses)
  if base == nil then return end
  local second = math.floor(now)
  local counts = nil
  if top_holds_now and held_at[base] == second then counts = held[base] end
  local holding = counts ~= nil
  if not holding then counts = {} end
  for _, wait in ipairs(waits) do
    local field = 'r'
    if wait >= 0 then field = wait_field(wait) end
    counts[field] = (counts[field] or 0) + 1
  end
  if allotted > 0 then counts['l'] = (counts['l'] or 0) + allotted end
  if pauses > 0 then counts['p'] = (counts['p'] or 0) + pauses end
  if holding then return end
  if top_holds_now then hold_from(base, second) end
  local key = top_key(base, second)
  local new = false
  for field, n in pairs(counts) do
    if write_count(key, field, n) then new = true end
  end
  if new then redis.call('PEXPIRE', key, TOP_KEPT_MS) end
end

-- A reservation withdrawn before it was due: one field.
local function count_withdrawn(base, now)
  if base == nil then return end
  count_field(base, now, 'c')
end
