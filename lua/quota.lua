-- ratelimit: a calendar quota, at most `limit` tokens per period of local time (a minute,
-- an hour, a day, an ISO week, a month of an IANA zone). Mirrors
-- ratelimit/_algorithms/quota.py operation for operation.
--
-- Lua has no time-zone database: the client sends the periods' boundaries around its own
-- time, and the functions here pick the period by the time they are given (the server's).
-- State: one string key <base> holding "<first> <used>": the earliest time a grant may go
-- in the latest period holding grants (its start, or where a pause ends in it) and the
-- tokens granted in it; it expires once that period is over.
-- Params (ARGV, after the driver's own): limit, and a text of numbers, space-separated:
-- the period's usual length in seconds, then the boundaries, Unix seconds, ascending:
-- the starts of BEFORE periods before the client's, its own period's start and end,
-- and the ends of AHEAD periods after it (see Calendar.boundaries).

local quota = {}

-- See AHEAD and BEFORE in quota.py.
local QUOTA_AHEAD = 2

do
  -- The boundaries of the text last read, cached between calls of the function library
  -- (a script's die with the call): a pure function of the text.
  local said, bounds = nil, nil

  function quota.new(base, limit, text)
    if text ~= said then
      local read = {}
      for word in string.gmatch(text, '%S+') do read[#read + 1] = tonumber(word) end
      table.remove(read, 1)  -- (the usual length: see quota.configured)
      said, bounds = text, read
    end
    local least = limit
    if least > 1.0 then least = 1.0 end
    return {key = base, limit = limit, bounds = bounds, bound = limit + EPSILON * least}
  end
end

-- The index i of the period [b[i], b[i+1]) holding `t`, and its start and end. Outside
-- the boundaries sent (a client clock more than a period off the server's) the periods
-- run on at the length of the nearest one sent.
local function period(self, t)
  local b = self.bounds
  local n = #b
  if t < b[1] then return 0, b[1] - (b[2] - b[1]), b[1] end
  if t >= b[n] then return n, b[n], b[n] + (b[n] - b[n - 1]) end
  local lo, hi = 1, n - 1
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if b[mid] <= t then lo = mid else hi = mid - 1 end
  end
  return lo, b[lo], b[lo + 1]
end

-- See CalendarQuota._open: the period a request at `now` fills first.
local function open(self, state, now)
  local _, begin, finish = period(self, now)
  local first, used = state[1], state[2]
  if first < begin then return begin, finish, 0.0 end
  if first < finish then return first, finish, used end
  local _, _, e = period(self, first)
  return first, e, used
end

-- See CalendarQuota._same: whether `at` falls in the period of a state first at `first`.
local function same(self, at, first)
  if first == -math.huge then return false end
  local _, a = period(self, at)
  local _, f = period(self, first)
  return a == f
end

-- See CalendarQuota._reach: the start of the first period a reservation may not take.
local function reach(self, now)
  local i = period(self, now)
  local j = i + 1 + QUOTA_AHEAD
  local b = self.bounds
  if i >= 1 and j <= #b then return b[j] end
  local _, _, finish = period(self, now)
  for _ = 1, QUOTA_AHEAD do
    local _, _, e = period(self, finish)
    finish = e
  end
  return finish
end

-- See CalendarQuota.guarded / configured / rescale: no time to keep back; a change's
-- rate is tokens a second over the period's usual length (the text's first number);
-- the tokens used keep their count.
function quota.guarded(limit, text, seconds)
  return limit, text
end

function quota.configured(limit, text, slack, new_rate, burst)
  if new_rate == nil then return limit, text end
  return new_rate * tonumber(string.match(text, '^%S+')), text
end

function quota.rescale(old, new, state, now)
  return state
end

-- A missing key (expired, evicted) or one that does not hold two finite numbers is a
-- new quota.
function quota.load(self, raw)
  if raw == nil then raw = redis.call('GET', self.key) end
  if raw then
    local s, u = string.match(raw, '^(%S+) (%S+)$')
    s, u = finite(s), finite(u)
    if s and u then return {s, u} end
  end
  return {-math.huge, 0.0}
end

function quota.plan(self, state, now, tokens)
  if not (tokens > 0) then return now, now end
  local first, finish, used = open(self, state, now)
  if used + tokens <= self.bound then
    if first > now then return now, first end
    return now, now
  end
  if tokens > self.bound then return now, math.huge end
  if finish >= reach(self, now) then return finish, finish end  -- (past the queue's reach)
  return now, finish
end

function quota.commit(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  local first, finish, used = open(self, state, now)
  if at < finish then return {first, used + tokens} end
  local _, s = period(self, at)
  return {s, tokens}
end

function quota.refund(self, state, now, tokens, at)
  if not (tokens > 0) then return state end
  if not same(self, at, state[1]) then return state end
  local left = state[2] - tokens
  if left > 0.0 then return {state[1], left} end
  return {state[1], 0.0}
end

function quota.tail(self, state, tokens, at)
  return same(self, at, state[1])
end

function quota.cancel(self, state, now, tokens, at)
  return quota.refund(self, state, now, tokens, at)
end

function quota.latest(self, state)
  if state[2] > 0.0 then
    local _, s = period(self, state[1])
    return s
  end
  return -math.huge
end

function quota.next_free(self, at, tokens)
  return at
end

function quota.idle_until(self, state)
  if state[1] == -math.huge then return -math.huge end
  local _, _, e = period(self, state[1])
  return e
end

function quota.restrict(self, state, now, remaining, untl)
  local first, finish, used = open(self, state, now)
  if untl <= first then return state end
  if untl < finish then return {untl, used} end
  return {untl, 0.0}
end

function quota.save(self, state, now)
  if state[1] == -math.huge then return end
  redis.call('SET', self.key, fmt(state[1]) .. ' ' .. fmt(state[2]),
             'PX', idle_ms(quota.idle_until(self, state) - now))
end
