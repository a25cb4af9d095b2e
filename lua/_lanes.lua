-- ratelimit: driver for a budget with priorities, two lanes of one algorithm decided
-- in one call. This file is the body of drive_lanes(ALG, KIND, KEYS, ARGV), run at each
-- call; what it calls is defined once before it, in _prelude.lua, the algorithm's
-- file, _members.lua and _top.lua (see ratelimit/_stores/redis/scripts.py).
--
-- KEYS[1]  the high lane's base key, ratelimit:{<name>}:hi:<algorithm>
-- KEYS[2]  the low lane's base key, ratelimit:{<name>}:lo:<algorithm>
--          (one hash tag: one Cluster slot). Each lane's holes: <base>:holes.
-- ARGV[1]  op: 'reserve' | 'refund' | 'restrict' | 'charge' | 'wait' | 'reset', after a
--          '~' when nothing is counted for `ratelimit top` (see _top.lua)
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  tokens (reserve, refund, wait); charge: the high lane's part; restrict: the
--          tokens still allowed, both lanes
-- ARGV[4]  reserve: max_wait in seconds, '' for no limit; refund: the grant time
--          being given back ('' for a grant already made); restrict: seconds from
--          now until the restriction ends; charge: the low lane's part
-- ARGV[5]  reserve, wait: the request's priority; refund: the lane to give back to;
--          charge: unused ('hi' | 'lo')
-- ARGV[6]  keep: the high lane's tokens a borrowing low request must leave; '' for
--          lows that never borrow
-- ARGV[7]  low_share, to split a restriction's tokens as the limit was split
-- ARGV[8..10]   the high lane: its largest request (Algorithm.most), its two parameters
-- ARGV[11..13]  the low lane: the same
--
-- Returns, as strings (seconds, %.17g):
--   reserve: {signed_wait, at, lane}: as the single driver's, and the lane taken
--            ('hi' | 'lo'; for a refusal, the one it would have queued in)
--   wait (read only, limiter.peek): {the wait a reserve would be told now without a
--            limit on it, its lane chosen as reserve chooses, holes not offered; now}
--   refund, restrict, charge, reset (both lanes forgotten): {now}
-- Mirrors ratelimit/_algorithms/lanes.py operation for operation.

local HIGH, LOW = 1, 2
local NAMES = {'hi', 'lo'}

local op, counted = op_of(ARGV[1])
-- Where its counters for `ratelimit top` go (nil: none, see _top.lua).
local top_base = nil
if counted then top_base = group_base(KEYS[1], 'priorities') end
local now = clock(ARGV[2])
local tokens = tonumber(ARGV[3])
local lanes = {}
for i = 1, 2 do
  local j = 5 + 3 * i
  local self = ALG.new(KEYS[i], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]))
  lanes[i] = {
    member = {alg = ALG, self = self, tokens = tokens, state = ALG.load(self)},
    holes = KEYS[i] .. ':holes',
    most = tonumber(ARGV[j]),
    changed = false,
  }
end

local function save(lane, only_dirty)
  local m = lanes[lane].member
  if not only_dirty or lanes[lane].changed or (type(m.state) == 'table' and m.state.dirty) then
    ALG.save(m.self, m.state, now)
  end
end

local function plan_lane(lane)
  local admit_at, at, hole, paced, moved = plan_members({lanes[lane].member}, lanes[lane].holes, now)
  return {admit_at, at, hole, paced, moved}
end

-- See _now and _when in lanes.py.
local function grants_now(planned)
  return decide(planned[1], planned[2], now, 0.0) >= 0
end

local function plan_when(planned)
  if planned[1] > planned[2] then return planned[1] end
  return planned[2]
end

local function settle(lane, planned, max_wait)
  local l = lanes[lane]
  local wait, changed = settle_members({l.member}, l.holes, now, planned[1], planned[2], planned[3], max_wait,
                                        planned[4], false, planned[5])
  l.changed = changed
  return wait, lane
end

-- See reserve in lanes.py.
local function reserve(max_wait, low, keep)
  if low then
    local planned = plan_lane(LOW)
    local high = lanes[HIGH].member
    -- (Not from a high lane a provider's pace holds: see reserve in lanes.py.)
    if not grants_now(planned) and keep ~= nil and tokens + keep <= lanes[HIGH].most + EPSILON
        and not pace_of(lanes[HIGH].holes .. ':pace', now) then
      local admit_at, at = ALG.plan(high.self, high.state, now, tokens + keep)
      if decide(admit_at, at, now, 0.0) >= 0 then
        high.state = ALG.commit(high.self, high.state, now, tokens, at)
        lanes[HIGH].changed = true
        return 0.0, HIGH
      end
    end
    return settle(LOW, planned, max_wait)
  end
  local planned = plan_lane(HIGH)
  if not grants_now(planned) and tokens <= lanes[LOW].most + EPSILON then
    local other = plan_lane(LOW)
    if grants_now(other) or plan_when(other) < plan_when(planned) then
      return settle(LOW, other, max_wait)
    end
  end
  return settle(HIGH, planned, max_wait)
end

if op == 'reserve' then
  local max_wait = math.huge
  if ARGV[4] ~= '' then max_wait = tonumber(ARGV[4]) end
  local keep = nil
  if ARGV[6] ~= '' then keep = tonumber(ARGV[6]) end
  local wait, lane = reserve(max_wait, ARGV[5] == 'lo', keep)
  save(HIGH, true)
  save(LOW, true)
  count_one(top_base, now, wait)
  return {fmt_wait(wait), fmt(now + wait), NAMES[lane]}
elseif op == 'wait' then
  -- Defined here, not above: a reserve makes no closure it does not use.
  -- The lane's own plan, no earlier than now, its holes not offered (see _bare in lanes.py).
  local function bare(lane, t)
    local m = lanes[lane].member
    local admit_at, at = ALG.plan(m.self, m.state, now, t)
    if admit_at < now then admit_at = now end
    if at < now then at = now end
    return {admit_at, at}
  end

  -- See peek in lanes.py.
  local function peek(low, keep)
    local planned
    if low then
      planned = bare(LOW, tokens)
      if not grants_now(planned) and keep ~= nil and tokens + keep <= lanes[HIGH].most + EPSILON then
        if grants_now(bare(HIGH, tokens + keep)) then return 0.0 end
      end
    else
      planned = bare(HIGH, tokens)
      if not grants_now(planned) and tokens <= lanes[LOW].most + EPSILON then
        local other = bare(LOW, tokens)
        if grants_now(other) or plan_when(other) < plan_when(planned) then planned = other end
      end
    end
    return math.abs(decide(planned[1], planned[2], now, math.huge))
  end
  local keep = nil
  if ARGV[6] ~= '' then keep = tonumber(ARGV[6]) end
  return {fmt(peek(ARGV[5] == 'lo', keep)), fmt(now)}
elseif op == 'reset' then
  for lane = 1, 2 do forget_members({lanes[lane].member}, lanes[lane].holes) end
  return {fmt(now)}
elseif op == 'refund' then
  local lane = HIGH
  if ARGV[5] == 'lo' then lane = LOW end
  local at = nil
  if ARGV[4] ~= '' then at = tonumber(ARGV[4]) end
  local l = lanes[lane]
  give_back_members({l.member}, l.holes, now, {tokens}, at)
  save(lane, false)
  if at and at > now + EPSILON then count_withdrawn(top_base, now) end
  return {fmt(now)}
elseif op == 'charge' then
  -- See charge in lanes.py: ARGV[3] and ARGV[4] are the high and the low lane's parts
  -- (split as the lanes' rates are); each lane charged has its holes voided.
  local parts = {tonumber(ARGV[3]), tonumber(ARGV[4])}
  for lane = 1, 2 do
    if parts[lane] > 0 then
      local l = lanes[lane]
      l.member.tokens = parts[lane]
      charge_members({l.member}, l.holes, now)
      save(lane, false)
    end
  end
  return {fmt(now)}
elseif op == 'restrict' then
  -- See shares and restrict in lanes.py.
  local untl = now + tonumber(ARGV[4])
  local low_part = math.floor(tokens * tonumber(ARGV[7]) + EPSILON)
  local parts = {tokens - low_part, low_part}
  if tokens <= EPSILON then count_decided(top_base, now, {}, 0, 1) end
  for lane = 1, 2 do
    local m = lanes[lane].member
    restricted(lanes[lane].holes, now, untl)
    if parts[lane] >= 1.0 then
      pace(lanes[lane].holes, now, parts[lane], untl)
    else
      m.state = ALG.restrict(m.self, m.state, now, parts[lane], untl)
      if parts[lane] <= EPSILON then pause(lanes[lane].holes, now, untl) end
    end
    save(lane, false)
  end
  return {fmt(now)}
end
return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
