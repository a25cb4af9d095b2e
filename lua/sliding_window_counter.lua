-- ratelimit: approximate sliding window, two counters. Mirrors
-- ratelimit/_window_counter.py (WindowCounter).
--
-- State: hash <base> with index (newest window holding grants, floor(t / window)),
-- previous and current (tokens granted in the window before it and in it), last
-- (the latest grant time, for FIFO).
-- Params: limit (tokens per window), window (seconds).

local sliding_window_counter = {}

function sliding_window_counter.new(base, limit, window)
  return {key = base, limit = limit, window = window}
end

function sliding_window_counter.nparams() return 2 end

-- A field read back: its number, or `default` when it is missing or not a finite
-- number (a hash edited by hand or by another program).
local function counter_field(value, default)
  local x = tonumber(value)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then return default end
  return x
end

-- Without a readable index nothing can be placed in time: a fresh state. A count
-- that cannot be read counts nothing: only what was lost is forgotten.
function sliding_window_counter.load(self)
  local v = redis.call('HMGET', self.key, 'index', 'previous', 'current', 'last')
  local index = counter_field(v[1], nil)
  if index == nil then return {-math.huge, 0.0, 0.0, -math.huge} end
  return {index, counter_field(v[2], 0.0), counter_field(v[3], 0.0), counter_field(v[4], -math.huge)}
end

-- The first time whose window index is `index` (see window_start in Python).
local function window_start(index, window)
  local t = index * window
  while math.floor(t / window) < index do
    t = t + math.abs(t) * 4.5e-16 + 5e-324
  end
  return t
end

function sliding_window_counter.plan(self, state, now, tokens)
  local index, previous, current, last = state[1], state[2], state[3], state[4]
  local start = now
  if last > now then start = last end
  local k = math.floor(start / self.window)
  if k >= index + 2 then return now, start end
  if k == index + 1 then previous, current = current, 0.0 end
  if current + tokens - self.limit > EPSILON then
    k = k + 1
    start = window_start(k, self.window)
    previous, current = current, 0.0
  end
  local room = self.limit - tokens - current
  if previous - room <= EPSILON then return now, start end
  local fraction = 1.0 - room / previous
  local t = k * self.window + fraction * self.window
  if start > t then return now, start end
  return now, t
end

function sliding_window_counter.commit(self, state, now, tokens, at)
  local index, previous, current, last = state[1], state[2], state[3], state[4]
  local k = math.floor(at / self.window)
  if k == index then
    local latest = last
    if at > last then latest = at end
    return {index, previous, current + tokens, latest}
  end
  if k == index + 1 then return {k, current, tokens, at} end
  return {k, 0.0, tokens, at}
end

function sliding_window_counter.refund(self, state, now, tokens, at)
  local index, previous, current, last = state[1], state[2], state[3], state[4]
  local k = math.floor(at / self.window)
  if k == index or k == index + 1 then
    local left = current - tokens
    if left < 0 then left = 0.0 end
    return {index, previous, left, last}
  end
  if k == index - 1 then
    local left = previous - tokens
    if left < 0 then left = 0.0 end
    return {index, left, current, last}
  end
  return state
end

function sliding_window_counter.peek(self, state, now)
  local index, previous, current = state[1], state[2], state[3]
  local k = math.floor(now / self.window)
  if k >= index + 2 then return self.limit, 0.0 end
  local fraction = now / self.window - k
  local used
  if k == index + 1 then
    used = current * (1.0 - fraction)
  elseif k == index then
    used = current + previous * (1.0 - fraction)
  else
    used = self.limit
  end
  local remaining = self.limit - used
  if remaining < 0 then remaining = 0.0 end
  return remaining, (index + 2) * self.window - now
end

-- Approximate (see WindowCounter.restrict).
function sliding_window_counter.restrict(self, state, now, remaining, untl)
  local grantable = sliding_window_counter.peek(self, state, now)
  local extra = grantable - remaining
  if extra > EPSILON then
    local start = now
    if state[4] > now then start = state[4] end
    state = sliding_window_counter.commit(self, state, now, extra, start)
  end
  if remaining <= EPSILON then
    local last = state[4]
    if untl > last then last = untl end
    state = {state[1], state[2], state[3], last}
  end
  return state
end

function sliding_window_counter.save(self, state, now)
  if state[1] == -math.huge then return end
  redis.call('HSET', self.key, 'index', fmt(state[1]), 'previous', fmt(state[2]),
             'current', fmt(state[3]), 'last', fmt(state[4]))
  -- A pause is held in `last`, which can reach past the counted windows.
  local fresh = (state[1] + 2) * self.window
  if state[4] > fresh then fresh = state[4] end
  expire_after(self.key, fresh - now)
end

-- See WindowCounter.tail / WindowCounter.cancel.
function sliding_window_counter.tail(self, state, tokens, at)
  return at >= state[4] - EPSILON
end

function sliding_window_counter.cancel(self, state, now, tokens, at)
  return sliding_window_counter.refund(self, state, now, tokens, at)
end

-- See WindowCounter.latest / WindowCounter.next_free.
function sliding_window_counter.latest(self, state)
  return state[4]
end

function sliding_window_counter.next_free(self, at, tokens)
  return at
end
