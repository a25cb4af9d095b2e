-- ratelimit: leaky bucket as a queue. Mirrors ratelimit/_algorithms/leaky_bucket.py.
--
-- State: one string key <base> holding "<drained_at> <latest>": when the bucket will
-- have drained, and when the latest grant started leaking.
-- Params: capacity (tokens the bucket holds), rate (tokens leaked per second).

local leaky_bucket = {}

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

-- See token_bucket.rescale: the queue keeps its tokens, and leaks at the new rate.
function leaky_bucket.rescale(old, new, state, now)
  if not (state[1] > now) then return state end
  return {now + (state[1] - now) * old.rate * new.interval, state[2]}
end

-- A missing key (expired, evicted) or one that is not two finite numbers is an
-- empty bucket: lost grants are forgotten, never an error or a queue stuck for ever.
function leaky_bucket.load(self)
  local value = redis.call('GET', self.key)
  if not value then return {-math.huge, -math.huge} end
  local drained, latest = string.match(value, '^(%S+) (%S+)$')
  drained, latest = tonumber(drained), tonumber(latest)
  if drained == nil or latest == nil or drained ~= drained or latest ~= latest
      or drained == math.huge or latest == math.huge then
    return {-math.huge, -math.huge}
  end
  return {drained, latest}
end

function leaky_bucket.plan(self, state, now, tokens)
  -- See LeakyQueue.plan: a member given 0 waits for nothing.
  if not (tokens > 0) then return now, now end
  local start = now
  if state[1] > now then start = state[1] end
  local overflow = (start - now) * self.rate + tokens - self.capacity
  if overflow > EPSILON then
    return now + overflow * self.interval, start
  end
  return now, start
end

function leaky_bucket.commit(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  local start = at
  if state[1] > at then start = state[1] end
  return {start + tokens * self.interval, start}
end

-- See LeakyQueue.refund: only the latest grant gives its place back.
function leaky_bucket.refund(self, state, now, tokens, at)
  local drained, latest = state[1], state[2]
  if at < latest - EPSILON or not (tokens > 0) then return state end
  drained = drained - tokens * self.interval
  local floor = now
  if latest > now then floor = latest end
  if drained > floor then return {drained, latest} end
  return {floor, latest}
end

function leaky_bucket.restrict(self, state, now, remaining, untl)
  local drained, latest = state[1], state[2]
  local target = untl - remaining * self.interval
  if drained >= target then return state end
  if target > latest then return {target, target} end
  return {target, latest}
end

function leaky_bucket.save(self, state, now)
  if state[1] == -math.huge then return end
  redis.call('SET', self.key, fmt(state[1]) .. ' ' .. fmt(state[2]), 'PX', idle_ms(state[1] - now))
end

-- See LeakyQueue.tail / LeakyQueue.cancel: the last grant is the one whose tokens
-- drain last; withdrawn, the queue ends where it started.
function leaky_bucket.tail(self, state, tokens, at)
  return at + tokens * self.interval >= state[1] - EPSILON
end

function leaky_bucket.cancel(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  local latest = state[2]
  if latest < at then return {at, latest} end
  return {at, at}
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
