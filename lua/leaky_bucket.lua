-- ratelimit: leaky bucket as a queue. Mirrors ratelimit/_leaky_bucket.py.
--
-- State: one string key <base> holding the time the bucket will have drained.
-- Params: capacity (tokens the bucket holds), rate (tokens leaked per second).

local leaky_bucket = {}

function leaky_bucket.new(base, capacity, rate)
  return {key = base, capacity = capacity, rate = rate, interval = 1.0 / rate}
end

function leaky_bucket.nparams() return 2 end

function leaky_bucket.load(self)
  return tonumber(redis.call('GET', self.key)) or -math.huge
end

function leaky_bucket.plan(self, state, now, tokens)
  local start = now
  if state > now then start = state end
  local overflow = (start - now) * self.rate + tokens - self.capacity
  if overflow > EPSILON then
    return now + overflow * self.interval, start
  end
  return now, start
end

function leaky_bucket.commit(self, state, now, tokens, at)
  local base = at
  if state > at then base = state end
  return base + tokens * self.interval
end

function leaky_bucket.refund(self, state, now, tokens, at)
  local drained = state - tokens * self.interval
  if drained > now then return drained end
  return now
end

function leaky_bucket.restrict(self, state, now, remaining, untl)
  local drained = untl - remaining * self.interval
  if state > drained then return state end
  return drained
end

function leaky_bucket.peek(self, state, now)
  local drained = now
  if state > now then drained = state end
  return self.capacity - (drained - now) * self.rate, drained - now
end

function leaky_bucket.save(self, state, now)
  if state == -math.huge then return end
  redis.call('SET', self.key, fmt(state), 'PX', idle_ms(state - now))
end
