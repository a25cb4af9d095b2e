-- ratelimit: leaky bucket as a queue. Mirrors ratelimit/_algorithms/leaky_bucket.py.
--
-- State: one string key <base> holding "<drained_at> <latest>": when the bucket will
-- have drained, and when the latest grant started leaking. A "clean" state (see the
-- fast path in _single.lua: written by a reserve that found nothing beside it) has
-- a 0 before the digits of <latest> ("-0" for a negative one): %.17g never writes a
-- 0 followed by a digit, and tonumber reads it alike.
-- A state with gaps (idle stretches still ahead, see LeakyQueue) has the same mark
-- before the digits of <drained_at> instead, and its gaps in <base>:gaps, a string
-- "<start> <end> ..." written with it; a <base>:gaps beside an unmarked state is
-- stale, and never read (compatibility: see ratelimit/_stores/redis/__init__.py).
-- Params: capacity (tokens the bucket holds), rate (tokens leaked per second).

local leaky_bucket = {}

-- A number's text with the mark (see the top of this file: <latest> of a clean state,
-- <drained_at> of one with gaps); a number %.17g does not write with a digit first
-- (inf, nan) stays as it is, unmarked.
local function leaky_clean(text)
  local first = string.byte(text, 1)
  if first == 45 then return '-0' .. string.sub(text, 2) end
  return '0' .. text
end

-- Whether a number's text has the mark: a 0 and a digit, after a '-' if any.
local function leaky_is_clean(text)
  local a, b, c = string.byte(text, 1, 3)
  if a == 45 then a, b = b, c end
  return a == 48 and b ~= nil and b >= 48 and b <= 57
end

-- See _idle in leaky_bucket.py: seconds of the state's gaps after `now`.
local function leaky_idle(state, now)
  local idle = 0.0
  for i = 3, #state, 2 do
    local stop = state[i + 1]
    if stop > now then
      local start = state[i]
      if start > now then idle = idle + (stop - start) else idle = idle + (stop - now) end
    end
  end
  return idle
end

-- See LeakyQueue.bursts: one request goes at once at most (level_members).
leaky_bucket.bursts = false

function leaky_bucket.new(base, capacity, rate)
  return {key = base, capacity = capacity, rate = rate, interval = 1.0 / rate}
end

-- See LeakyQueue.configured.
function leaky_bucket.configured(capacity, rate, slack, new_rate, burst)
  local leak = rate
  if new_rate ~= nil then
    if slack > 0 then leak = 1.0 / (1.0 / new_rate + slack) else leak = new_rate end
  end
  return burst or capacity, leak
end

-- See LeakyQueue.guarded: each token's interval grows by `seconds`.
function leaky_bucket.guarded(capacity, rate, seconds)
  return capacity, 1.0 / (1.0 / rate + seconds)
end

-- See token_bucket.rescale: the queue keeps its tokens, and leaks at the new rate;
-- its gaps are dropped (counted as queued, never less than is).
function leaky_bucket.rescale(old, new, state, now)
  if not (state[1] > now) then return state end
  return {now + (state[1] - now) * old.rate * new.interval, state[2]}
end

-- A missing key (expired, evicted) or one that is not two finite numbers is an
-- empty bucket: lost grants are forgotten, never an error or a queue stuck for ever.
-- `raw`: the key's text where the driver has read it already (false: missing).
-- Gaps that are not pairs of finite numbers are forgotten: the time counts as queued.
function leaky_bucket.load(self, raw)
  local value = raw
  if value == nil then value = redis.call('GET', self.key) end
  if not value then return {-math.huge, -math.huge} end
  local d, l = string.match(value, '^(%S+) (%S+)$')
  local drained, latest = tonumber(d), tonumber(l)
  if drained == nil or latest == nil or drained ~= drained or latest ~= latest
      or drained == math.huge or latest == math.huge then
    return {-math.huge, -math.huge}
  end
  drained, latest = unbounded(drained), unbounded(latest)
  local state = {drained, latest}
  if leaky_is_clean(d) then
    local gaps = redis.call('GET', self.key .. ':gaps')
    if gaps then
      for piece in string.gmatch(gaps, '%S+') do
        local x = finite(piece)
        if x == nil then return {drained, latest} end
        state[#state + 1] = x
      end
      if #state % 2 == 1 then return {drained, latest} end
    end
  end
  return state
end

function leaky_bucket.plan(self, state, now, tokens)
  -- See LeakyQueue.plan: a member given 0 waits for nothing.
  if not (tokens > 0) then return now, now end
  local start = now
  if state[1] > now then start = state[1] end
  local queued = start - now
  if #state > 2 then queued = queued - leaky_idle(state, now) end
  local overflow = queued * self.rate + tokens - self.capacity
  if overflow > EPSILON then
    return now + overflow * self.interval, start
  end
  return now, start
end

-- See LeakyQueue.level: a request goes at once only once the queue has drained.
function leaky_bucket.level(self, state, now)
  if state[1] > now then return 0.0 end
  return self.capacity
end

-- See LeakyQueue.commit: a grant later than the queue would have it leaves a gap.
function leaky_bucket.commit(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  local drained = state[1]
  local start = at
  if drained > at then start = drained end
  local out = {start + tokens * self.interval, start}
  if #state == 2 and not (at > drained) then return out end
  for i = 3, #state, 2 do
    if state[i + 1] > now then
      out[#out + 1] = state[i]
      out[#out + 1] = state[i + 1]
    end
  end
  local idle_from = now
  if drained > now then idle_from = drained end
  if at - idle_from > EPSILON then
    out[#out + 1] = idle_from
    out[#out + 1] = at
  end
  return out
end

-- The state {drained, latest} with the gaps of `state` after them.
local function leaky_with_gaps(drained, latest, state)
  local out = {drained, latest}
  for i = 3, #state do out[i] = state[i] end
  return out
end

-- See LeakyQueue.refund: only the latest grant gives its place back.
function leaky_bucket.refund(self, state, now, tokens, at)
  local drained, latest = state[1], state[2]
  if at < latest - EPSILON or not (tokens > 0) then return state end
  drained = drained - tokens * self.interval
  local floor = now
  if latest > now then floor = latest end
  if drained > floor then return leaky_with_gaps(drained, latest, state) end
  return leaky_with_gaps(floor, latest, state)
end

function leaky_bucket.restrict(self, state, now, remaining, untl)
  local drained, latest = state[1], state[2]
  local target = untl - remaining * self.interval
  if drained >= target then return state end
  if target > latest then return leaky_with_gaps(target, target, state) end
  return leaky_with_gaps(target, latest, state)
end

-- `clean`: marked as written by a reserve that found nothing beside the state (a
-- state with gaps never is: they are beside it).
function leaky_bucket.save(self, state, now, clean)
  if state[1] == -math.huge then return end
  if #state > 2 then
    local ms = idle_ms(state[1] - now)
    local gaps = {}
    for i = 3, #state do gaps[i - 2] = fmt(state[i]) end
    redis.call('SET', self.key, leaky_clean(fmt_state(state[1])) .. ' ' .. fmt_state(state[2]), 'PX', ms)
    redis.call('SET', self.key .. ':gaps', table.concat(gaps, ' '), 'PX', ms)
    return
  end
  local latest = fmt_state(state[2])
  if clean and state[2] == state[2] and state[2] ~= math.huge and state[2] ~= -math.huge then
    latest = leaky_clean(latest)
  end
  redis.call('SET', self.key, fmt_state(state[1]) .. ' ' .. latest, 'PX', idle_ms(state[1] - now))
end

-- See LeakyQueue.tail / LeakyQueue.cancel: the last grant is the one whose tokens
-- drain last; withdrawn, the queue ends where it started.
function leaky_bucket.tail(self, state, tokens, at)
  return at + tokens * self.interval >= state[1] - EPSILON
end

function leaky_bucket.cancel(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  local latest = state[2]
  if latest < at then return leaky_with_gaps(at, latest, state) end
  return leaky_with_gaps(at, at, state)
end

-- See LeakyQueue.latest / LeakyQueue.next_free: a grant leaks for tokens / rate.
function leaky_bucket.latest(self, state)
  return state[2]
end

function leaky_bucket.next_free(self, at, tokens)
  return at + tokens * self.interval
end

-- See LeakyQueue.idle_until: an empty queue from when it drains.
function leaky_bucket.idle_until(self, state)
  return state[1]
end

-- See token_bucket.unmarked.
function leaky_bucket.unmarked(raw)
  local d, l = string.match(raw, '^(%S+) (%S+)$')
  if l == nil or not leaky_is_clean(l) then return nil end
  if string.byte(l, 1) == 45 then return d .. ' -' .. string.sub(l, 3) end
  return d .. ' ' .. string.sub(l, 2)
end

-- The fast path of a reserve (see _single.lua and token_bucket.fast): the same
-- arithmetic as new, load, plan (plan_all), decide, commit and save, with no table.
-- Returns the signed wait, the grant's name (never one: no `room`) and the state's two
-- times after the decision (for the level, see level_members), or nil where `raw` is
-- not a clean state.
do
  local said1, said2, capacity, rate, interval = nil, nil, 0.0, 0.0, 0.0
  -- The text this function wrote last and its two numbers: a hot bucket reads back
  -- what it wrote, and a text's numbers are a pure function of it, so the match and
  -- the two conversions are skipped (the strings are interned: one comparison).
  local wrote, wrote_drained, wrote_latest = nil, 0.0, 0.0

  function leaky_bucket.fast(key, raw, p1, p2, now, tokens, max_wait)
    local drained, latest
    if raw == wrote then
      drained, latest = wrote_drained, wrote_latest
    else
      local d, l = string.match(raw, '^(%S+) (%S+)$')
      if l == nil or not leaky_is_clean(l) then return nil end
      drained, latest = tonumber(d), tonumber(l)
      if drained == nil or latest == nil or drained ~= drained or latest ~= latest
          or drained == math.huge or latest == math.huge or drained == -math.huge or latest == -math.huge
          or drained == LARGEST or latest == LARGEST then
        return nil
      end
    end
    if p1 ~= said1 or p2 ~= said2 then
      said1, said2, capacity, rate = p1, p2, tonumber(p1), tonumber(p2)
      interval = 1.0 / rate
    end
    if tokens > capacity + EPSILON then return -math.huge, '', drained, latest end
    local admit_at, at = now, now
    if tokens > 0 then
      local start = now
      if drained > now then start = drained end
      local overflow = (start - now) * rate + tokens - capacity
      if overflow > EPSILON then
        local admit = now + overflow * interval
        if admit > admit_at then admit_at = admit end
      end
      if start > at then at = start end
    end
    local wait = decide(admit_at, at, now, max_wait)
    if wait < 0 then return wait, '', drained, latest end
    if tokens > 0 then
      local start = at
      if drained > at then start = drained end
      drained, latest = start + tokens * interval, start
    end
    local text
    if latest < 0 or (latest == 0 and 1 / latest < 0) then text = string.format('%.17g -0%.17g', drained, -latest)
    else text = string.format('%.17g 0%.17g', drained, latest) end
    redis.call('SET', key, text, 'PX', idle_ms(drained - now))
    wrote, wrote_drained, wrote_latest = text, drained, latest
    return wait, '', drained, latest
  end
end
