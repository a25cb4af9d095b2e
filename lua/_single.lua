-- ratelimit: driver for one limiter. Loaded as _prelude.lua + <algorithm>.lua, ALG
-- bound to the algorithm's table, _members.lua, then this file (see ratelimit/_stores/scripts.py).
--
-- KEYS[1]  the limiter's base key, ratelimit:{<name>}:<algorithm>; every key the
--          algorithm touches is this one or starts with it, so all share its hash tag.
-- ARGV[1]  op: 'reserve' | 'refund' | 'restrict' | 'charge' | 'batch'
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  tokens (reserve, refund, charge); restrict: the tokens still allowed
-- ARGV[4]  reserve: max_wait in seconds, '' for no limit;
--          refund: the grant time being given back ('' for a grant already made);
--          a time still ahead withdraws that reservation (see _members.lua);
--          restrict: seconds from now until the restriction ends; charge: ''
-- ARGV[5], ARGV[6]  the algorithm's two parameters
--
-- batch (one process's concurrent acquires in one call, and its lease; see
-- ratelimit/_stores/rounds.py): ARGV[3], ARGV[4] the tokens of an ended lease given
-- back and its grant time ('' none); ARGV[7] the lease wanted, in tokens ('0' none);
-- ARGV[8] the smallest lease worth taking; ARGV[9], ARGV[10], ... each request's
-- tokens and max_wait ('' no limit), in arrival order.
--
-- Returns, as strings (seconds, %.17g):
--   reserve: {signed_wait, at}: signed_wait >= 0 granted after that wait, at store
--            time `at`; < 0 refused, nothing recorded, -signed_wait is the wait needed
--   refund, restrict, charge: {now}
--   batch: {signed_wait, at} per request, then {lease tokens granted, at}
-- Mirrors MemoryHandle in ratelimit/_stores/memory.py: the algorithm's step, with holes.

local op = ARGV[1]
local now = clock(ARGV[2])
local tokens = tonumber(ARGV[3])
local self = ALG.new(KEYS[1], tonumber(ARGV[5]), tonumber(ARGV[6]))
local member = {alg = ALG, self = self, tokens = tokens, state = ALG.load(self)}
local holes = KEYS[1] .. ':holes'

local function dirty(s)
  return type(s) == 'table' and s.dirty
end

if op == 'reserve' then
  local max_wait = math.huge
  if ARGV[4] ~= '' then max_wait = tonumber(ARGV[4]) end
  local wait, changed = reserve_members({member}, holes, now, max_wait)
  if changed or dirty(member.state) then ALG.save(self, member.state, now) end
  return {fmt(wait), fmt(now + wait)}
elseif op == 'batch' then
  -- Exactly the requests' own reserves, one after the other, as separate calls in
  -- this order would decide them; then the lease, itself a reservation with no wait,
  -- taken only if every request went at once (a queue means no slack to lease), and
  -- halved until it fits or is not worth taking.
  local changed = false
  if ARGV[3] ~= '' then
    give_back_members({member}, holes, now, {tonumber(ARGV[3])}, tonumber(ARGV[4]))
    changed = true
  end
  local out = {}
  local slack = true
  for i = 9, #ARGV, 2 do
    member.tokens = tonumber(ARGV[i])
    local max_wait = math.huge
    if ARGV[i + 1] ~= '' then max_wait = tonumber(ARGV[i + 1]) end
    local wait, moved = reserve_members({member}, holes, now, max_wait)
    if moved then changed = true end
    if wait ~= 0 then slack = false end
    out[#out + 1] = fmt(wait)
    out[#out + 1] = fmt(now + wait)
  end
  local want, least, got = tonumber(ARGV[7]), tonumber(ARGV[8]), 0
  while slack and want >= least and want > 0 do
    member.tokens = want
    local wait, moved = reserve_members({member}, holes, now, 0)
    if wait >= 0 then
      got = want
      if moved then changed = true end
      break
    end
    want = math.floor(want / 2)
  end
  out[#out + 1] = fmt(got)
  out[#out + 1] = fmt(now)
  if changed or dirty(member.state) then ALG.save(self, member.state, now) end
  return out
elseif op == 'refund' then
  local at = nil
  if ARGV[4] ~= '' then at = tonumber(ARGV[4]) end
  give_back_members({member}, holes, now, {tokens}, at)
  ALG.save(self, member.state, now)
  return {fmt(now)}
elseif op == 'charge' then
  charge_members({member}, holes, now)
  ALG.save(self, member.state, now)
  return {fmt(now)}
elseif op == 'restrict' then
  member.state = ALG.restrict(self, member.state, now, tokens, now + tonumber(ARGV[4]))
  if tokens <= EPSILON then pause(holes, now, now + tonumber(ARGV[4])) end
  ALG.save(self, member.state, now)
  return {fmt(now)}
end
return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
