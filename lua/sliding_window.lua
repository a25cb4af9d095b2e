-- ratelimit: exact sliding-window log. Mirrors ratelimit/_sliding_window.py (WindowLog).
--
-- State, two keys sharing the limiter's hash tag:
--   <base>        sorted set: one member per grant, score = grant time (future-dated
--                 for reservations), member = "<seq>:<tokens>"
--   <base>:meta   hash: total (tokens in the set), seq (member counter)
-- Params: limit (tokens per window), window (seconds).
-- Only the load/prune touches the whole set when grants must age out first; the
-- common path reads the total and the newest entry.
--
-- The two keys can be lost one without the other (an evicting maxmemory-policy, a
-- DEL): load checks that they agree, for one O(1) ZCARD, and mends them (see load).
-- Losing a key only ever loses grants; it never errs or counts fewer grants than the
-- remaining members hold.

local sliding_window = {}

function sliding_window.new(base, limit, window)
  return {key = base, meta = base .. ':meta', limit = limit, window = window}
end

function sliding_window.nparams() return 2 end

-- A member that is not "<seq>:<tokens>" (not ours) weighs nothing.
local function weight(member)
  return tonumber(string.match(member, ':(.*)$')) or 0.0
end

-- The meta rebuilt from the members, when it is gone or garbled while they are not:
-- total is their sum, seq the highest one taken, so a new member never reuses the
-- name of an old one (ZADD would move that grant instead of adding this one).
local function rebuild(self)
  local all = redis.call('ZRANGE', self.key, 0, -1)
  local total, seq = 0.0, 0
  for i = 1, #all do
    total = total + weight(all[i])
    local taken = tonumber(string.match(all[i], '^(%d+):'))
    if taken ~= nil and taken > seq then seq = taken end
  end
  redis.call('HSET', self.meta, 'seq', fmt(seq))
  return {total = total, dirty = true}
end

-- The common path is one HMGET and one ZCARD. No member left (fresh, expired, or the
-- set lost) means no grant to count, whatever a surviving meta says: it is deleted
-- and the total is 0. Members left but no readable total or seq: rebuild.
function sliding_window.load(self)
  local meta = redis.call('HMGET', self.meta, 'total', 'seq')
  if redis.call('ZCARD', self.key) == 0 then
    if meta[1] or meta[2] then redis.call('DEL', self.meta) end
    return {total = 0.0}
  end
  local total, seq = tonumber(meta[1]), tonumber(meta[2])
  if total == nil or total ~= total or total == math.huge or total == -math.huge
      or seq == nil or seq ~= math.floor(seq) then
    return rebuild(self)
  end
  return {total = total}
end

-- Forget grants at or before `cutoff`, oldest first, as the Python prune does.
local function prune(self, state, cutoff)
  local old = redis.call('ZRANGEBYSCORE', self.key, '-inf', fmt(cutoff))
  if #old == 0 then return end
  for i = 1, #old do
    state.total = state.total - weight(old[i])
  end
  redis.call('ZREMRANGEBYSCORE', self.key, '-inf', fmt(cutoff))
  if redis.call('ZCARD', self.key) == 0 then state.total = 0.0 end
  state.dirty = true
end

function sliding_window.plan(self, state, now, tokens)
  prune(self, state, now - self.window)
  local newest = redis.call('ZRANGE', self.key, -1, -1, 'WITHSCORES')
  local last = now
  if #newest > 0 then last = tonumber(newest[2]) end
  local excess = state.total + tokens - self.limit
  local function latest(a, b, c)
    local m = a
    if b > m then m = b end
    if c ~= nil and c > m then m = c end
    return m
  end
  if excess <= EPSILON then return now, latest(now, last) end
  local all = redis.call('ZRANGE', self.key, 0, -1, 'WITHSCORES')
  local aged = 0.0
  for i = 1, #all, 2 do
    aged = aged + weight(all[i])
    if aged >= excess - EPSILON then
      return now, latest(now, tonumber(all[i + 1]) + self.window, last)
    end
  end
  -- Ran off the end (see WindowLog.plan): rounding left the total above the sum of
  -- the entries. The entries are the truth: the total becomes their sum, taken just
  -- now in the same order as Python takes it, and the request waits until the whole
  -- log has aged out, which is always enough.
  state.total = aged
  state.dirty = true
  local whole = last + self.window
  if now > whole then whole = now end
  return now, whole
end

function sliding_window.commit(self, state, now, tokens, at)
  local seq = redis.call('HINCRBY', self.meta, 'seq', 1)
  redis.call('ZADD', self.key, fmt(at), seq .. ':' .. fmt(tokens))
  state.total = state.total + tokens
  state.dirty = true
  return state
end

-- Take `tokens` out of the members scored exactly `at` (a reservation given back),
-- then out of the oldest grants at or before `now`.
function sliding_window.refund(self, state, now, tokens, at)
  prune(self, state, now - self.window)
  local function take(members)
    for i = 1, #members do
      if tokens <= 0 then return end
      local member = members[i]
      local w = weight(member)
      local taken = w
      if tokens < taken then taken = tokens end
      local score = redis.call('ZSCORE', self.key, member)
      redis.call('ZREM', self.key, member)
      if w - taken > EPSILON then
        local seq = redis.call('HINCRBY', self.meta, 'seq', 1)
        redis.call('ZADD', self.key, score, seq .. ':' .. fmt(w - taken))
      end
      state.total = state.total - taken
      tokens = tokens - taken
      state.dirty = true
    end
  end
  if at < now then take(redis.call('ZRANGEBYSCORE', self.key, fmt(at), fmt(at))) end
  take(redis.call('ZRANGEBYSCORE', self.key, '-inf', fmt(now)))
  if redis.call('ZCARD', self.key) == 0 then state.total = 0.0 end
  return state
end

-- One placeholder grant counting until exactly `untl` (see WindowLog.restrict).
function sliding_window.restrict(self, state, now, remaining, untl)
  prune(self, state, now - self.window)
  local cutoff = untl - self.window
  local lasting = 0.0
  local all = redis.call('ZRANGEBYSCORE', self.key, '(' .. fmt(cutoff), '+inf')
  for i = 1, #all do lasting = lasting + weight(all[i]) end
  local extra = self.limit - remaining - lasting
  if extra <= EPSILON then return state end
  -- A sorted set files the entry by its score, so recording it is a plain commit.
  return sliding_window.commit(self, state, now, extra, cutoff)
end

function sliding_window.peek(self, state, now)
  prune(self, state, now - self.window)
  local newest = redis.call('ZRANGE', self.key, -1, -1, 'WITHSCORES')
  if #newest == 0 then return self.limit, 0.0 end
  local remaining = self.limit - state.total
  if remaining < 0 then remaining = 0.0 end
  return remaining, tonumber(newest[2]) + self.window - now
end

function sliding_window.save(self, state, now)
  if not state.dirty then return end
  local newest = redis.call('ZRANGE', self.key, -1, -1, 'WITHSCORES')
  if #newest == 0 then
    redis.call('DEL', self.key, self.meta)
    return
  end
  redis.call('HSET', self.meta, 'total', fmt(state.total))
  local idle = tonumber(newest[2]) + self.window - now
  expire_after(self.key, idle)
  expire_after(self.meta, idle)
end

-- See WindowLog.tail / WindowLog.cancel: the withdrawn grant is among the newest
-- entries; take its tokens from the members at the newest time.
function sliding_window.tail(self, state, tokens, at)
  local newest = redis.call('ZRANGE', self.key, -1, -1, 'WITHSCORES')
  return #newest == 0 or at >= tonumber(newest[2]) - EPSILON
end

function sliding_window.cancel(self, state, now, tokens, at)
  local newest = redis.call('ZRANGE', self.key, -1, -1, 'WITHSCORES')
  if #newest == 0 or tonumber(newest[2]) < at - EPSILON then return state end
  local members = redis.call('ZRANGEBYSCORE', self.key, newest[2], newest[2])
  local held = 0.0
  for i = 1, #members do held = held + weight(members[i]) end
  local taken = tokens
  if held < taken then taken = held end
  local left = held - taken
  state.total = state.total - taken
  redis.call('ZREM', self.key, unpack(members))
  if left <= EPSILON then
    state.total = state.total - left
  else
    local seq = redis.call('HINCRBY', self.meta, 'seq', 1)
    redis.call('ZADD', self.key, newest[2], seq .. ':' .. fmt(left))
  end
  if redis.call('ZCARD', self.key) == 0 then state.total = 0.0 end
  state.dirty = true
  return state
end

-- See WindowLog.latest / WindowLog.next_free.
function sliding_window.latest(self, state)
  local newest = redis.call('ZRANGE', self.key, -1, -1, 'WITHSCORES')
  if #newest == 0 then return -math.huge end
  return tonumber(newest[2])
end

function sliding_window.next_free(self, at, tokens)
  return at
end
