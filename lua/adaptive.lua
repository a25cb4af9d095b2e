-- ratelimit: a pace whose rate is learned by CUBIC from the provider's refusals. Mirrors
-- ratelimit/_algorithms/adaptive.py (Cubic) operation for operation; why it works as it
-- does is in that module's docstring. Only ever a member of a group (lua/_group.lua).
--
-- State: hash <base> with
--   t  the pace's theoretical arrival time     l  the latest grant recorded
--   p  the rate at the last cut                c  where the growth curve starts
--   f  when the reservations made before the last cut have all gone
--   s  when the budget was last used
-- A missing field is -inf (p: 0): a fresh pace, at the ceiling until its first cut.
-- Params: most (the limiter's largest request), floor, ceiling, decrease, recover.

local adaptive = {arity = 5}

do
  local QUIET = 1.0
  local IDLE = 1.0
  local MEMORY = 600.0

  function adaptive.new(base, most, floor, ceiling, decrease, recover)
    local idle = IDLE
    if 2.0 / floor > idle then idle = 2.0 / floor end
    return {key = base, most = most, floor = floor, ceiling = ceiling, decrease = decrease, recover = recover,
            idle = idle}
  end

  local function num(v, default)
    local n = tonumber(v)
    if n == nil or n ~= n then return default end
    return n
  end

  function adaptive.load(self)
    local v = redis.call('HMGET', self.key, 't', 'l', 'p', 'c', 'f', 's')
    return {tat = num(v[1], -math.huge), last = num(v[2], -math.huge), peak = num(v[3], 0.0),
            cut_at = num(v[4], -math.huge), fresh = num(v[5], -math.huge), seen = num(v[6], -math.huge)}
  end

  local function copy(state)
    return {tat = state.tat, last = state.last, peak = state.peak, cut_at = state.cut_at,
            fresh = state.fresh, seen = state.seen}
  end

  -- See Cubic.start: the last cut, moved on by the time since spent idle.
  local function start(self, state, now)
    local used = state.last
    if state.seen > used then used = state.seen end
    local idle = now - used - self.idle
    if idle > 0 and state.cut_at ~= -math.huge then return state.cut_at + idle end
    return state.cut_at
  end

  function adaptive.rate(self, state, now)
    local cut_at = start(self, state, now)
    if cut_at == -math.huge then return self.ceiling end
    local x = -1.0
    if now > cut_at then x = (now - cut_at) / self.recover - 1.0 end
    local rate = state.peak * (1.0 + (1.0 - self.decrease) * x * x * x)
    if rate < self.floor then return self.floor end
    if rate > self.ceiling then return self.ceiling end
    return rate
  end

  -- decided, at: nil when unknown.
  function adaptive.throttle(self, state, now, decided, at)
    if decided == nil or at == nil then
      if now < state.fresh + QUIET then return state end
      decided = now
    elseif at < state.fresh - EPSILON then
      return state
    end
    local when = now
    if decided < now then when = decided end
    local out = copy(state)
    out.peak = adaptive.rate(self, state, when)
    out.cut_at = now
    out.fresh = now
    if state.tat > now then out.fresh = state.tat end
    out.seen = now
    return out
  end

  function adaptive.plan(self, state, now, tokens)
    local rate = adaptive.rate(self, state, now)
    local base = now
    if state.tat > now then base = state.tat end
    local at = base + (tokens - self.most) / rate
    if at > now then return now, at end
    return now, now
  end

  function adaptive.commit(self, state, now, tokens, at)
    if not (tokens > 0) then return state end
    local out = copy(state)
    out.cut_at = start(self, state, now)
    local rate = adaptive.rate(self, state, now)
    local base = at
    if state.tat > at then base = state.tat end
    out.tat = base + tokens / rate
    if at > state.last then out.last = at end
    out.seen = now
    return out
  end

  function adaptive.refund(self, state, now, tokens, at)
    if not (tokens > 0) then return state end
    if state.last > now and at < state.last - EPSILON then return state end
    return adaptive.cancel(self, state, now, tokens, at)
  end

  function adaptive.tail(self, state, tokens, at)
    return at >= state.last - EPSILON
  end

  function adaptive.cancel(self, state, now, tokens, at)
    if not (tokens > 0) or state.seen == -math.huge then return state end
    local out = copy(state)
    out.tat = state.tat - tokens / self.ceiling
    if not (out.tat > now) then out.tat = now end
    return out
  end

  function adaptive.latest(self, state)
    return state.last
  end

  function adaptive.next_free(self, at, tokens)
    return at
  end

  function adaptive.restrict(self, state, now, remaining, untl)
    return state
  end

  function adaptive.save(self, state, now)
    if state.seen == -math.huge then return end
    local args = {'s', fmt(state.seen), 'p', fmt(state.peak)}
    for _, field in ipairs({{'t', state.tat}, {'l', state.last}, {'c', state.cut_at}, {'f', state.fresh}}) do
      if field[2] ~= -math.huge then
        args[#args + 1] = field[1]
        args[#args + 1] = fmt(field[2])
      end
    end
    redis.call('HSET', self.key, unpack(args))
    local remembered = state.seen + MEMORY
    if state.tat > remembered then remembered = state.tat end
    expire_after(self.key, remembered - now)
  end
end
