-- ratelimit: driver for one limiter. Loaded as _prelude.lua + <algorithm>.lua, ALG
-- bound to the algorithm's table, _members.lua, then this file (see ratelimit/_stores/scripts.py).
--
-- KEYS[1]  the limiter's base key, ratelimit:{<name>}:<algorithm>; every key the
--          algorithm touches is this one or starts with it, so all share its hash tag.
-- ARGV[1]  op: 'reserve' | 'refund' | 'restrict' | 'charge'
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  tokens (reserve, refund, charge); restrict: the tokens still allowed
-- ARGV[4]  reserve: max_wait in seconds, '' for no limit;
--          refund: the grant time being given back ('' for a grant already made);
--          a time still ahead withdraws that reservation (see _members.lua);
--          restrict: seconds from now until the restriction ends; charge: ''
-- ARGV[5], ARGV[6]  the algorithm's two parameters
--
-- Returns, as strings (seconds, %.17g):
--   reserve: {signed_wait, at}: signed_wait >= 0 granted after that wait, at store
--            time `at`; < 0 refused, nothing recorded, -signed_wait is the wait needed
--   refund, restrict, charge: {now}
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
