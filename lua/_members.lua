-- ratelimit: what one limiter and a composite share: deciding a group of limits
-- together, charging them, and reusing the holes that withdrawn reservations leave.
-- Loaded after the algorithms and before a driver. Mirrors plan_all/commit_all/charge_all
-- in ratelimit/_algorithms/algorithm.py and reserve/give_back in ratelimit/_algorithms/holes.py.
--
-- A member is {alg = <algorithm table>, self = <its instance>, tokens = n, state = s};
-- one limiter is a group of one.
--
-- Holes: a sorted set <KEYS[1]>:holes (the group's hash tag), score = the time the
-- withdrawn grant was due, member = "<time>|<tokens>,<tokens>,..." with one number
-- per limit of the group. At most one hole per time (within EPSILON). The member
-- "pause", scored with the end of the latest pause from the provider, is no hole.

local HOLE_SCAN = 16

local function plan_all(members, now)
  local admit_at, at = now, now
  for _, m in ipairs(members) do
    local admit, grant = m.alg.plan(m.self, m.state, now, m.tokens)
    if admit > admit_at then admit_at = admit end
    if grant > at then at = grant end
  end
  return admit_at, at
end

local function commit_all(members, now, at)
  for _, m in ipairs(members) do
    m.state = m.alg.commit(m.self, m.state, now, m.tokens, at)
  end
end

local function hole_tokens(member)
  local out = {}
  for piece in string.gmatch(string.match(member, '|(.*)$'), '[^,]+') do
    out[#out + 1] = tonumber(piece)
  end
  return out
end

local function hole_member(at, tokens)
  local parts = {}
  for i, n in ipairs(tokens) do parts[i] = fmt(n) end
  return fmt(at) .. '|' .. table.concat(parts, ',')
end

local function hole_fits(have, members)
  -- A hole of another shape belongs to another composite of the same name.
  if #have ~= #members then return false end
  for i, m in ipairs(members) do
    if have[i] == nil or m.tokens > have[i] + EPSILON then return false end
  end
  return true
end

local function add_hole(holes, now, at, tokens)
  local near = redis.call('ZRANGEBYSCORE', holes, fmt(at - EPSILON), fmt(at + EPSILON), 'WITHSCORES', 'LIMIT', 0, 2)
  if near[1] == 'pause' then table.remove(near, 1); table.remove(near, 1) end
  if #near > 0 then
    local have = hole_tokens(near[1])
    local hole_at = tonumber(near[2])
    for i = 1, #tokens do have[i] = have[i] + tokens[i] end
    redis.call('ZREM', holes, near[1])
    redis.call('ZADD', holes, fmt(hole_at), hole_member(hole_at, have))
  else
    redis.call('ZADD', holes, fmt(at), hole_member(at, tokens))
  end
  local last = redis.call('ZRANGE', holes, -1, -1, 'WITHSCORES')
  expire_after(holes, tonumber(last[2]) - now)
end

-- Grant the members' tokens of a hole at its time; keep the rest where it still fits
-- (later in a queue; given up where the limits disagree on where). See _take.
local function take_hole(members, holes, now, hole)
  redis.call('ZREM', holes, hole.member)
  local rest, empty = {}, true
  local moved, agree = nil, true
  for i, m in ipairs(members) do
    rest[i] = hole.have[i] - m.tokens
    if rest[i] > EPSILON then empty = false end
    local t = m.alg.next_free(m.self, hole.at, m.tokens)
    if moved == nil then moved = t elseif t ~= moved then agree = false end
  end
  if not empty and agree then add_hole(holes, now, moved, rest) end
end

-- See _latest in holes.py: the limit that set the latest grant knows it exactly.
local function group_latest(members)
  local latest = -math.huge
  for _, m in ipairs(members) do
    local t = m.alg.latest(m.self, m.state)
    if t > latest then latest = t end
  end
  return latest
end

-- charge: the members' tokens taken whatever the budget, at the latest grant any of
-- them recorded if that is still ahead, else now (see charge_all in algorithm.py).
-- The holes are void, the pause kept (see void in holes.py).
local function charge_members(members, holes, now)
  local at = group_latest(members)
  if not (at > now) then at = now end
  commit_all(members, now, at)
  local paused = redis.call('ZSCORE', holes, 'pause')
  if redis.call('DEL', holes) == 1 and paused then
    redis.call('ZADD', holes, paused, 'pause')
    expire_after(holes, tonumber(paused) - now)
  end
end

-- See plan in holes.py: the plan of the members with the earliest of the first
-- HOLE_SCAN holes the request fits in, which wins when it comes before the
-- algorithms' own plan (or they would not admit it now). Returns admit_at, at, and
-- the hole to take (nil: the algorithms' own plan).
local function plan_members(members, holes, now)
  -- The common path has no holes at all: EXISTS is the cheapest way to learn it
  -- (about 0.5 us in a ~20 us script). Read by rank, then drop past holes (they sort
  -- first) only if there are any.
  -- One entry more than the scan: the pause, if any, is among them and is no hole.
  local found = {}
  if redis.call('EXISTS', holes) == 1 then
    found = redis.call('ZRANGE', holes, 0, HOLE_SCAN, 'WITHSCORES')
  end
  local hole = nil
  if #found > 0 and tonumber(found[2]) < now - EPSILON then
    redis.call('ZREMRANGEBYSCORE', holes, '-inf', '(' .. fmt(now - EPSILON))
    found = redis.call('ZRANGE', holes, 0, HOLE_SCAN, 'WITHSCORES')
  end
  local scanned = 0
  for i = 1, #found, 2 do
    if found[i] ~= 'pause' then
      scanned = scanned + 1
      if scanned > HOLE_SCAN then break end
      local have = hole_tokens(found[i])
      if hole_fits(have, members) then
        hole = {member = found[i], at = tonumber(found[i + 1]), have = have}
        break
      end
    end
  end
  local admit_at, at = plan_all(members, now)
  if hole ~= nil and hole.at > group_latest(members) + EPSILON then
    -- Every hole is before a grant still reserved: not so, the state was evicted,
    -- and the holes with it are void. (The pause goes too: it was the state's.)
    redis.call('DEL', holes)
    hole = nil
  end
  if hole ~= nil and (admit_at - now > EPSILON or hole.at < at) then
    return now, hole.at, hole
  end
  return admit_at, at, nil
end

-- See settle in holes.py: decide what plan_members planned and, if granted, record
-- it. Returns the signed wait and whether the members' states changed.
local function settle_members(members, holes, now, admit_at, at, hole, max_wait)
  local wait = decide(admit_at, at, now, max_wait)
  if wait < 0 then return wait, false end
  if hole ~= nil then
    take_hole(members, holes, now, hole)
    return wait, false
  end
  commit_all(members, now, at)
  return wait, true
end

local function reserve_members(members, holes, now, max_wait)
  local admit_at, at, hole = plan_members(members, holes, now)
  return settle_members(members, holes, now, admit_at, at, hole, max_wait)
end

local function tail_all(members, tokens, at)
  for i, m in ipairs(members) do
    if not m.alg.tail(m.self, m.state, tokens[i], at) then return false end
  end
  return true
end

local function cancel_all(members, now, tokens, at)
  for i, m in ipairs(members) do
    m.state = m.alg.cancel(m.self, m.state, now, tokens[i], at)
  end
end

-- A provider's pause until `untl`: forget the holes before it, and take no more
-- until then (see pause in holes.py).
local function pause(holes, now, untl)
  redis.call('ZREMRANGEBYSCORE', holes, '-inf', '(' .. fmt(untl))
  local before = tonumber(redis.call('ZSCORE', holes, 'pause'))
  if before == nil or untl > before then redis.call('ZADD', holes, fmt(untl), 'pause') end
  local last = redis.call('ZRANGE', holes, -1, -1, 'WITHSCORES')
  expire_after(holes, tonumber(last[2]) - now)
end

-- The latest real hole (the pause, if any, is not one), or nil.
local function last_hole(holes)
  local top = redis.call('ZREVRANGE', holes, 0, 1, 'WITHSCORES')
  for i = 1, #top, 2 do
    if top[i] ~= 'pause' then return top[i], tonumber(top[i + 1]) end
  end
  return nil
end

-- In a composite a token bucket does not see a grant another limit delayed past its
-- own plan; the limit that set it does. See _reserved_after.
local function reserved_after(members, now, when)
  local latest = group_latest(members)
  return latest > now and when < latest - EPSILON
end

-- give back: a plain refund once the grant's time has come (`at` nil or past);
-- otherwise withdraw the reservation: roll it back if it is the last one (and the
-- holes that are then at the end), or leave a hole.
local function give_back_members(members, holes, now, tokens, at)
  local paused = tonumber(redis.call('ZSCORE', holes, 'pause')) or -math.huge
  if at == nil or at <= now + EPSILON then
    local when = at or now
    if now < paused or (#members > 1 and reserved_after(members, now, when)) then return end
    for i, m in ipairs(members) do
      m.state = m.alg.refund(m.self, m.state, now, tokens[i], when)
    end
    return
  end
  if at < paused then return end  -- its place is inside a pause: lost
  if not tail_all(members, tokens, at) then
    add_hole(holes, now, at, tokens)
    return
  end
  cancel_all(members, now, tokens, at)
  while true do
    local member, hole_at = last_hole(holes)
    if member == nil then break end
    if hole_at < now - EPSILON then
      -- sorted: every hole is past (and so is any pause before them)
      redis.call('ZREMRANGEBYSCORE', holes, '-inf', fmt(hole_at))
      break
    end
    local left = hole_tokens(member)
    if not tail_all(members, left, hole_at) then break end
    redis.call('ZREM', holes, member)
    cancel_all(members, now, left, hole_at)
  end
  if paused > now then
    -- See give_back in holes.py: rolled back, the state must hold the pause itself.
    for _, m in ipairs(members) do
      m.state = m.alg.restrict(m.self, m.state, now, 0.0, paused)
    end
  end
end
