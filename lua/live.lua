-- ratelimit: the live processes of the safe mode (local_share="auto"). This file is
-- the body of drive_live(KEYS, ARGV), defined after _prelude.lua. Twin of nothing: ratelimit/_stores/redis/live.py only calls it.
--
-- KEYS[1]  the sorted set of live processes, ratelimit:live: each member a process id,
--          its score the time its heartbeat runs out.
-- ARGV[1]  op: 'beat' (this process is alive for ARGV[3] more seconds) | 'leave'
-- ARGV[2]  the process id
-- ARGV[3]  how long a beat keeps the process counted, seconds
-- ARGV[4]  now, seconds; '' reads the server's TIME
--
-- Returns the number of live processes once this call is recorded, as an integer.

local key = KEYS[1]
local op = ARGV[1]
local member = ARGV[2]
local ttl = tonumber(ARGV[3])
local now = clock(ARGV[4])

if op == 'beat' then
  redis.call('ZADD', key, fmt(now + ttl), member)
elseif op == 'leave' then
  redis.call('ZREM', key, member)
else
  return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
end
-- A process whose heartbeat ran out (it died, or lost Redis for longer than a beat's
-- ttl) is no longer counted.
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
local live = redis.call('ZCARD', key)
if live > 0 then
  -- The set goes once nobody beats: twice the ttl after the last beat.
  redis.call('PEXPIRE', key, string.format('%d', math.ceil(ttl * 2000)))
end
return live
