-- ratelimit: driver for a composite, several limits granted all-or-nothing in one
-- call. This file is the body of drive_group(KEYS, ARGV), run at each call; what it
-- calls is defined once before it, in _prelude.lua, every algorithm's file,
-- _members.lua and _top.lua (see ratelimit/_stores/redis/scripts.py).
--
-- KEYS[i]  member i's base key, ratelimit:{<composite name>}:<i>:<algorithm>: all
--          members share the composite's hash tag, so this works on Redis Cluster.
-- ARGV[1]  op: 'reserve' | 'refund' | 'restrict' | 'charge' | 'throttle' | 'rate' | 'batch' |
--          'wait' (read only, limiter.peek: {wait, now}) | 'reset' (limiter.reset: {now}) |
--          'member' (a member's change at run time, below);
--          'named' and 'nbatch' are 'reserve' and 'batch' that name a grant at once too,
--          after a '~' when nothing is counted for `ratelimit top` (see _top.lua)
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  reserve: max_wait, '' for no limit; refund: the grant time ('' for a grant
--          already made; a time still ahead withdraws that reservation), or
--          "<time> <name>" for a refund that names its grant (the name reserve returned);
--          restrict: seconds from now until the restriction ends (the members'
--          "tokens" are then the tokens each still allows); charge: ''
--          (a member's tokens may be 0: nothing is recorded in it)
-- then for each member i: algorithm, tokens, and the algorithm's parameters (two; the
-- adaptive pace's table says how many it takes in `arity`)
--
-- batch (one process's concurrent acquires in one call; see ratelimit/_stores/redis/rounds.py):
-- the members' own tokens are 0; after the members, each request's max_wait ('' no
-- limit) and one weight per member, in arrival order. Returns {signed_wait, at, name}
-- per request, then {0, now} (a group takes no lease), as _single.lua's batch does.
--
-- reserve: a '1' after the members asks for the level after the decision too (the
-- tightest member's): {signed_wait, at, name, left, micros}, as _single.lua replies a
-- decision other than a grant at once with ARGV[9] = '1'.
--
-- member: ARGV[3] the member (from 0), ARGV[4] and ARGV[5] its new rate and burst
-- ('' keeps the code's; both '': back to the code's), ARGV[6] the seconds it lasts
-- ('' until reset); KEYS[1] any key of the composite's hash tag. Writes the fields
-- "<i>:rate", "<i>:burst", "<i>:until" of ratelimit:{<name>}:members:config, which
-- every other op reads (and "<i>:was", the change the member's state is at); returns
-- {now, '1' if a change of the member was in force, else '0'}.
--
-- Otherwise returns as the single-limiter driver does. Mirrors MemoryGroupHandle in
-- ratelimit/_stores/memory/backend.py: every member plans; the grant happens at the latest of their
-- times, or nowhere; the group's holes are kept beside its first member's key, at
-- <KEYS[1]>:holes:<algorithm>,<algorithm>,... (one set per list of algorithms).

local ALGORITHMS = {
  token_bucket = token_bucket,
  leaky_bucket = leaky_bucket,
  sliding_window = sliding_window,
  sliding_window_counter = sliding_window_counter,
  quota = quota,
  adaptive = adaptive,
}

local op, counted = op_of(ARGV[1])
-- 'named' and 'nbatch': 'reserve' and 'batch' that name a grant at once too (see _single.lua).
local names = false
if op == 'named' then op, names = 'reserve', true
elseif op == 'nbatch' then op, names = 'batch', true end
-- Where its counters for `ratelimit top` go (nil: none, see _top.lua).
local top_base = nil
if counted then top_base = group_base(KEYS[1], 'composite') end
local now = clock(ARGV[2])
-- Where a member's change at run time is kept (see follow_member_changes in _members.lua).
local changes = members_config(KEYS[1])
if op == 'member' then
  -- ARGV[3]: the member (from 0); ARGV[4], ARGV[5]: its new rate and burst ('' keeps
  -- the code's; both '': back to the code's); ARGV[6]: the seconds it lasts ('' until
  -- reset). KEYS[1]: any key of the composite's hash tag. The state moves at the next
  -- call that writes, whose code values this op does not know. Returns {now, '1' if a
  -- change of the member was in force, else '0'}.
  local p = ARGV[3] .. ':'
  local set = redis.call('HMGET', changes, p .. 'rate', p .. 'burst', p .. 'until')
  local untl = tonumber(set[3])
  local was = (valid(set[1]) or valid(set[2])) and not (untl and now >= untl)
  redis.call('HDEL', changes, p .. 'rate', p .. 'burst', p .. 'until')
  if ARGV[4] ~= '' then redis.call('HSET', changes, p .. 'rate', ARGV[4]) end
  if ARGV[5] ~= '' then redis.call('HSET', changes, p .. 'burst', ARGV[5]) end
  if ARGV[6] ~= '' and (ARGV[4] ~= '' or ARGV[5] ~= '') then
    redis.call('HSET', changes, p .. 'until', fmt(now + tonumber(ARGV[6])))
  end
  keep_member_changes(changes, now)
  if was then return {fmt(now), '1'} end
  return {fmt(now), '0'}
end
local members = {}
local kinds = {}
local j = 4
for i = 1, #KEYS do
  local alg = ALGORITHMS[ARGV[j]]
  if alg == nil then return redis.error_reply('ratelimit: unknown algorithm ' .. tostring(ARGV[j])) end
  local arity = alg.arity or 2
  local params = {}
  -- (A parameter that is no number is text the algorithm reads: a quota's boundaries.)
  for k = 1, arity do params[k] = tonumber(ARGV[j + 1 + k]) or ARGV[j + 1 + k] end
  local self = alg.new(KEYS[i], unpack(params))
  members[i] = {alg = alg, self = self, tokens = tonumber(ARGV[j + 1]), state = alg.load(self), params = params}
  kinds[i] = ARGV[j]
  j = j + 2 + arity
end

local function save_all(only_dirty)
  for _, m in ipairs(members) do
    if not only_dirty or (type(m.state) == 'table' and m.state.dirty) then
      m.alg.save(m.self, m.state, now)
    end
  end
end

-- Composites of one name share their limits' states; a hole, though, is paid for by
-- every limit of the composite that left it: one set of holes per list of algorithms.
local holes = KEYS[1] .. ':holes:' .. table.concat(kinds, ',')

-- A decision asks after the holes, the pace and the members' changes in one EXISTS:
-- with none of them, nothing more is read (`none`, see plan_members).
local none = nil
if op == 'reserve' or op == 'batch' then
  if redis.call('EXISTS', holes, holes .. ':pace', holes .. ':moved', changes) == 0 then
    none = true
  else
    follow_member_changes(members, KEYS, changes, now, true)
  end
elseif op ~= 'reset' then
  follow_member_changes(members, KEYS, changes, now, op ~= 'wait' and op ~= 'rate')
end

if op == 'reserve' then
  local max_wait = math.huge
  if ARGV[3] ~= '' then max_wait = tonumber(ARGV[3]) end
  local wait, changed, name = -math.huge, false, ''
  if not member_too_big(members) then
    wait, changed, name = reserve_members(members, holes, now, max_wait, none, names)
  end
  save_all(not changed)
  count_one(top_base, now, wait)
  if ARGV[j] == '1' then return leveled_reply(members, holes, now, wait, name) end
  return {fmt_wait(wait), fmt(now + wait), name}
elseif op == 'batch' then
  -- The requests' own reserves, one after the other, as separate calls in this
  -- order would decide them.
  local changed = false
  local out = {}
  local waits = {}
  local k = j
  while k <= #ARGV do
    local max_wait = math.huge
    if ARGV[k] ~= '' then max_wait = tonumber(ARGV[k]) end
    for i, m in ipairs(members) do m.tokens = tonumber(ARGV[k + i]) end
    local wait, moved, name = -math.huge, false, ''
    if not member_too_big(members) then
      wait, moved, name = reserve_members(members, holes, now, max_wait, none, names)
    end
    if moved then changed = true end
    out[#out + 1] = fmt_wait(wait)
    out[#out + 1] = fmt(now + wait)
    out[#out + 1] = name
    waits[#waits + 1] = wait
    k = k + 1 + #members
  end
  save_all(not changed)
  count_decided(top_base, now, waits, 0, 0)
  out[#out + 1] = '0'
  out[#out + 1] = fmt(now)
  return out
elseif op == 'wait' then
  if member_too_big(members) then return {'inf', fmt(now)} end
  return {fmt(math.max(peek_members(members, now), pace_wait(holes, now))), fmt(now)}
elseif op == 'reset' then
  forget_members(members, holes)
  return {fmt(now)}
elseif op == 'restrict' then
  local untl = now + tonumber(ARGV[3])
  local paused = true
  for _, m in ipairs(members) do
    if m.tokens > EPSILON then paused = false end
  end
  local paced, timeless = true, true
  for _, m in ipairs(members) do
    if not (m.tokens >= 1.0) then paced = false end
    if not m.self.allowance then timeless = false end
  end
  restricted(holes, now, untl)
  if paced then
    -- (Counted in the first member's tokens, which a grant weighs in.)
    pace(holes, now, members[1].tokens, untl)
  elseif timeless then
    -- Allowances only, whose states hold no time (see gate in holes.py).
    gate(holes, now, untl)
    if paused then count_decided(top_base, now, {}, 0, 1) end
  else
    if paused then
      pause(holes, now, untl)
      count_decided(top_base, now, {}, 0, 1)
    end
    for _, m in ipairs(members) do
      m.state = m.alg.restrict(m.self, m.state, now, m.tokens, untl)
    end
  end
  save_all(false)
  return {fmt(now)}
elseif op == 'charge' then
  charge_members(members, holes, now)
  save_all(false)
  return {fmt(now)}
elseif op == 'throttle' then
  -- ARGV[3]: "<decided> <at>" of the refused request, or '' when unknown.
  local decided, at = string.match(ARGV[3], '^(%S+) (%S+)$')
  for _, m in ipairs(members) do
    if m.alg.throttle ~= nil then
      m.state = m.alg.throttle(m.self, m.state, now, tonumber(decided), tonumber(at))
      m.alg.save(m.self, m.state, now)
    end
  end
  return {fmt(now)}
elseif op == 'rate' then
  for _, m in ipairs(members) do
    if m.alg.rate ~= nil then return {fmt(m.alg.rate(m.self, m.state, now))} end
  end
  return redis.error_reply('ratelimit: no learned rate in this group')
elseif op == 'refund' then
  local at, exact = nil, nil
  if ARGV[3] ~= '' then
    local time, name = string.match(ARGV[3], '^(%S+) (%S+)$')
    at, exact = tonumber(time or ARGV[3]), name
  end
  local tokens = {}
  for i, m in ipairs(members) do tokens[i] = m.tokens end
  give_back_members(members, holes, now, tokens, at, exact)
  save_all(false)
  if at and at > now + EPSILON then count_withdrawn(top_base, now) end
  return {fmt(now)}
end
return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
