-- ratelimit: token bucket as GCRA. Mirrors ratelimit/_algorithms/token_bucket.py operation for operation.
--
-- State: one string key <base> holding the theoretical arrival time (TAT, seconds),
-- followed by a space when the state is "clean" (see the fast path in _single.lua:
-- written by a reserve that found nothing beside the state). Lua's tonumber reads
-- through trailing spaces, so every release reads both forms alike.
-- Params (ARGV, after the driver's own): capacity, rate (tokens per second).
--
-- At rate 0 the bucket is an allowance (Allowance in token_bucket.py): `new` marks it
-- so, the state is the tokens spent, and each function below that the arithmetic of
-- time would break (n / 0 seconds) takes its `allowance` branch first. Its state is
-- written unmarked, so the fast path never meets one.

local token_bucket = {}

-- See advanced in token_bucket.py: base + step rounded up, never down, so that a grant
-- near the server's clock moves the TAT by no less than its tokens take. The next
-- double up (Python's math.nextafter): one unit in the last place of the binade of
-- `moved` (frexp: moved = m * 2^e, 0.5 <= |m| < 1), half that below a negative power
-- of two, where the binade toward zero is finer.
local function advanced(base, step)
  local moved = base + step
  if moved - base < step then
    local m, e = math.frexp(moved)
    if m == -0.5 then return moved + 2 ^ (e - 54) end
    return moved + 2 ^ (e - 53)
  end
  return moved
end

-- See LONG_AGO in token_bucket.py: an allowance's latest grant, before any time.
local LONG_AGO = -1.7976931348623157e308

function token_bucket.new(base, capacity, rate)
  if rate == 0 then
    -- See Allowance.bound: the capacity and a rounding's worth, relative below one token.
    local least = capacity
    if least > 1.0 then least = 1.0 end
    return {key = base, capacity = capacity, rate = 0.0, allowance = true, bound = capacity + EPSILON * least}
  end
  return {key = base, capacity = capacity, rate = rate,
          interval = 1.0 / rate, tolerance = capacity / rate}
end

-- See Gcra.guarded: `seconds` more of the burst kept back. Where that leaves less
-- than a whole token (a process of another configuration kept more back, a change
-- made at run time) it keeps one: a little late jitter, never a dead bucket.
function token_bucket.guarded(capacity, rate, seconds)
  local kept = capacity - seconds * rate
  local least = 1.0
  if capacity < 1.0 then least = capacity end
  if kept > least then return kept, rate end
  return least, rate
end

-- See Gcra.configured: the limit as changed at run time (nil keeps the code's value),
-- the slack kept back from it as `guarded` keeps it.
function token_bucket.configured(capacity, rate, slack, new_rate, burst)
  local cap = burst
  if cap == nil then
    cap = capacity
    if slack > 0 then cap = cap + slack * rate end
  end
  return token_bucket.guarded(cap, new_rate or rate, slack)
end

-- A change of limit at run time (ratelimit/_stores/redis/config.py): the tokens still
-- owed keep their count, and refill at the new rate. A bucket already full stays full.
function token_bucket.rescale(old, new, state, now)
  if old.allowance then
    -- (See Allowance.rescale: the tokens spent are owed, to a bucket that refills.)
    if new.allowance or not (state > 0.0) then return state end
    return now + state * new.interval
  end
  if new.allowance then
    -- To an allowance: the tokens owed are its tokens spent.
    if state > now and old.rate < math.huge then return (state - now) * old.rate end
    return 0.0
  end
  if not (state > now) or old.rate == math.huge then return state end
  return now + (state - now) * old.rate * new.interval
end

-- A missing key (expired, evicted) or one that does not hold a finite number is a
-- fresh bucket: lost grants are forgotten, never an error or a bucket stuck for ever.
-- `raw`: the key's text where the driver has read it already (false: missing).
function token_bucket.load(self, raw)
  if raw == nil then raw = redis.call('GET', self.key) end
  local tat = tonumber(raw)
  if tat == nil or tat ~= tat or tat == math.huge then return -math.huge end
  return unbounded(tat)
end

function token_bucket.plan(self, state, now, tokens)
  if self.allowance then
    local spent = 0.0
    if state > 0.0 then spent = state end
    if spent + tokens <= self.bound or not (tokens > 0) then return now, now end  -- (see Allowance.plan)
    return math.huge, math.huge
  end
  local base = now
  if state > now then base = state end
  -- See Gcra.plan: at once decided on the sum to nearest, a wait to the TAT rounded up.
  local step = tokens * self.interval
  if base + step - self.tolerance <= now then return now, now end
  return now, advanced(base, step) - self.tolerance
end

-- See Gcra.level and Allowance.level: the tokens a request could take at once now.
function token_bucket.level(self, state, now)
  if self.allowance then
    local spent = 0.0
    if state > 0.0 then spent = state end
    return self.capacity - spent
  end
  if self.rate == math.huge then return math.huge end
  local base = now
  if state > now then base = state end
  return (now + self.tolerance - base) * self.rate
end

function token_bucket.commit(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  if self.allowance then
    if state > 0.0 then return state + tokens end
    return 0.0 + tokens
  end
  local base = at
  if state > at then base = state end
  return advanced(base, tokens * self.interval)
end

-- See Gcra.refund: only the latest reservation rolls back while others are pending.
function token_bucket.refund(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  if self.allowance then
    local left = state - tokens
    if left > 0.0 then return left end
    return 0.0
  end
  local latest = state - self.tolerance
  if latest > now and at < latest - EPSILON then return state end
  local tat = state - tokens * self.interval
  if tat > now then return tat end
  return now
end

function token_bucket.restrict(self, state, now, remaining, untl)
  if self.allowance then return state end  -- (a pause is a gate beside it: see gate in _members.lua)
  local tat = untl + self.tolerance - (remaining + 1.0) * self.interval
  if state > tat then return state end
  return tat
end

-- `clean`: marked as written by a reserve that found nothing beside the state.
function token_bucket.save(self, state, now, clean)
  if state == -math.huge then return end
  if self.allowance then
    -- Spent tokens matter for ever (idle_ms caps the TTL); none spent, a second.
    redis.call('SET', self.key, fmt_state(state), 'PX', idle_ms(token_bucket.idle_until(self, state) - now))
    return
  end
  local text = fmt_state(state)
  if clean then text = text .. ' ' end
  redis.call('SET', self.key, text, 'PX', idle_ms(state - now))
end

-- See Gcra.tail / Gcra.cancel: a reservation that waited left the TAT at exactly its
-- time + tolerance (one another limit delayed, at its time + its tokens), so it is the
-- last one if nothing pushed the TAT further.
function token_bucket.tail(self, state, tokens, at)
  if self.allowance then return true end
  local latest = state - self.tolerance
  if at <= latest + EPSILON then return at >= latest - EPSILON end
  -- (A composite's request that gave this limit nothing holds no slot in it.)
  return not (tokens > 0) or math.abs(at + tokens * self.interval - state) <= EPSILON
end

function token_bucket.cancel(self, state, now, tokens, at)
  if self.allowance then return token_bucket.refund(self, state, now, tokens, at) end
  if not (tokens > 0) then return state end
  local tat = state - tokens * self.interval
  if tat > now then return tat end
  return now
end

-- See Gcra.latest / Gcra.next_free.
function token_bucket.latest(self, state)
  if self.allowance then return LONG_AGO end
  return state - self.tolerance
end

function token_bucket.next_free(self, at, tokens)
  return at
end

-- See Gcra.room: a hole's tokens are the end of a slot up to at + tolerance, and a
-- grant at t may take the part of it still ahead of t. (An algorithm without `room`
-- takes a hole at its own time only: see hole_room in _members.lua.)
function token_bucket.room(self, at, tokens, t)
  if self.allowance then return tokens end
  local ahead = (at + self.tolerance - t) * self.rate
  if ahead >= tokens then return tokens end
  if ahead > EPSILON then return ahead end
  return 0.0
end

-- See Gcra.idle_until: a full bucket from the TAT on.
function token_bucket.idle_until(self, state)
  if self.allowance then
    if state > 0.0 then return math.huge end
    return -math.huge
  end
  return state
end

-- The fast path of a reserve (see _single.lua): `raw` is the state's text as read,
-- `p1` and `p2` the code's capacity and rate as sent (no change, no slack in force).
-- The same arithmetic as new, load, plan (plan_all), decide, commit, exact_name (and
-- at_once_name with `names`) and save, in that order, with no table: the decisions
-- are the full path's to the bit.
-- Returns the signed wait, the grant's name and the state after the decision (for
-- the level, see level_members), or nil where `raw` is not a clean state (the full
-- path decides then).
-- A clean state's text written again without the mark, its TTL kept (see the fast
-- path in _single.lua: the full path found something beside it); nil if not clean.
function token_bucket.unmarked(raw)
  if string.byte(raw, -1) ~= 32 then return nil end
  return string.sub(raw, 1, -2)
end

do
  -- The numbers of the parameters last sent, cached between calls of the function
  -- library (a script's die with the call): a pure function of their text.
  local said1, said2, capacity, interval, tolerance = nil, nil, 0.0, 0.0, 0.0
  -- The text this function wrote last and its number (see leaky_bucket.fast).
  local wrote, wrote_tat = nil, 0.0

  function token_bucket.fast(key, raw, p1, p2, now, tokens, max_wait, names)
    local tat
    if raw == wrote then
      tat = wrote_tat
    else
      if string.byte(raw, -1) ~= 32 then return nil end
      tat = tonumber(raw)
      if tat == nil or tat ~= tat or tat == math.huge or tat == -math.huge or tat == LARGEST then return nil end
    end
    if p1 ~= said1 or p2 ~= said2 then
      local c, rate = tonumber(p1), tonumber(p2)
      if not (rate > 0) then return nil end  -- an allowance: the full path (nothing kept)
      said1, said2, capacity, interval, tolerance = p1, p2, c, 1.0 / rate, c / rate
    end
    if tokens > capacity + EPSILON and interval > 0 then return -math.huge, '', tat end
    local base = tat
    if not (tat > now) then base = now end
    -- advanced(base, step) inlined where the sum needs no rounding up.
    local step = tokens * interval
    local moved = base + step
    local at = moved - tolerance  -- (at once or not, decided on the sum to nearest)
    if moved - base < step then moved = advanced(base, step) end
    if at > now then at = moved - tolerance else at = now end
    local wait = at - now
    if wait <= EPSILON then wait = 0.0
    elseif wait > max_wait + EPSILON or wait == math.huge then return -wait, '', tat
    end
    local state = tat
    if tokens > 0 then
      -- (Not committed, a request of no tokens writes the state back as it was.)
      -- Committed from the plan's own base (the usual case): the sum planned with.
      state = at
      if tat > at then state = tat end
      if state == base then state = moved else state = advanced(state, step) end
    end
    local text = string.format('%.17g ', state)
    redis.call('SET', key, text, 'PX', idle_ms(state - now))
    wrote, wrote_tat = text, state
    if wait > EPSILON and math.abs(state - tolerance - (now + wait)) <= EPSILON then return wait, '1', state end
    -- (at_once_name in _members.lua, for a limiter that gives back: `names`.)
    if names and wait <= EPSILON then return wait, 'P1:' .. fmt(state - tolerance) .. ':' .. fmt(tokens), state end
    return wait, '', state
  end
end
