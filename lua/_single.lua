-- ratelimit: driver for one limiter. Loaded as _prelude.lua + <algorithm>.lua + this
-- file, with ALG bound to the algorithm's table (see ratelimit/_scripts.py).
--
-- KEYS[1]  the limiter's base key, ratelimit:{<name>}:<algorithm>; every key the
--          algorithm touches is this one or starts with it, so all share its hash tag.
-- ARGV[1]  op: 'reserve' | 'refund' | 'restrict' | 'peek'
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  tokens (reserve, refund); restrict: the tokens still allowed
-- ARGV[4]  reserve: max_wait in seconds, '' for no limit;
--          refund: the grant time being given back, '' for now;
--          restrict: seconds from now until the restriction ends
-- ARGV[5], ARGV[6]  the algorithm's two parameters
--
-- Returns, as strings (seconds, %.17g):
--   reserve: {signed_wait, at}: signed_wait >= 0 granted after that wait, at store
--            time `at`; < 0 refused, nothing recorded, -signed_wait is the wait needed
--   refund, restrict: {now}
--   peek:    {remaining_tokens, reset_after, now}
-- Mirrors step() in ratelimit/_algorithm.py.

local op = ARGV[1]
local now = clock(ARGV[2])
local tokens = tonumber(ARGV[3])
local self = ALG.new(KEYS[1], tonumber(ARGV[5]), tonumber(ARGV[6]))
local state = ALG.load(self)

local function dirty(s)
  return type(s) == 'table' and s.dirty
end

if op == 'reserve' then
  local max_wait = math.huge
  if ARGV[4] ~= '' then max_wait = tonumber(ARGV[4]) end
  local admit_at, at = ALG.plan(self, state, now, tokens)
  local wait = decide(admit_at, at, now, max_wait)
  if wait >= 0 then state = ALG.commit(self, state, now, tokens, at) end
  if wait >= 0 or dirty(state) then ALG.save(self, state, now) end
  return {fmt(wait), fmt(now + wait)}
elseif op == 'refund' then
  local at = now
  if ARGV[4] ~= '' then at = tonumber(ARGV[4]) end
  state = ALG.refund(self, state, now, tokens, at)
  ALG.save(self, state, now)
  return {fmt(now)}
elseif op == 'restrict' then
  state = ALG.restrict(self, state, now, tokens, now + tonumber(ARGV[4]))
  ALG.save(self, state, now)
  return {fmt(now)}
elseif op == 'peek' then
  local remaining, reset_after = ALG.peek(self, state, now)
  if dirty(state) then ALG.save(self, state, now) end
  return {fmt(remaining), fmt(reset_after), fmt(now)}
end
return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
