-- ratelimit: a semaphore shared by every process (ConcurrencyLimit). This file is the
-- body of drive_concurrency(KEYS, ARGV), defined after _prelude.lua. Mirrors ratelimit/_algorithms/semaphore.py transition for transition.
--
-- KEYS[1]  the holders, ratelimit:{<name>}:concurrency: a sorted set, member = lease
--          id, score = when the lease runs out. Beside it, in the same hash slot:
--          <KEYS[1]>:queue   waiters, score = arrival number (their order)
--          <KEYS[1]>:expiry  waiters, score = when their place runs out
--          <KEYS[1]>:seq     the last arrival number handed out
--          <KEYS[1]>:max     ARGV[3] of the latest call, for `ratelimit inspect`/`top`
-- ARGV[1]  op: 'take' | 'release' | 'renew' | 'keep'
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  the most holders at once
-- ARGV[4]  lease, seconds
-- ARGV[5]  the channel prefix: a promoted waiter <process>:<n> is told on
--          <prefix><process>
-- ARGV[6..]  take: id, '1' to queue when no slot is free ('' to refuse);
--            release: id; renew, keep: ids
--
-- Returns:
--   take:    {outcome}          'held' | 'queued' | 'full'
--   release: {}
--   renew:   {held ids..., '|', lost ids...}
--   keep:    {ids put back...}
-- Every waiter promoted by the call (a release, or a lease that ran out) is told
-- with PUBLISH, in the same atomic step: the one round trip of the release is the
-- waiter's grant.

local holders = KEYS[1]
local queue = holders .. ':queue'
local expiry = holders .. ':expiry'
local seq = holders .. ':seq'
local op = ARGV[1]
local now = clock(ARGV[2])
local most = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local prefix = ARGV[5]

local function tell(name)
  local process = string.match(name, '^(.*):[^:]*$') or name
  redis.call('PUBLISH', prefix .. process, name)
end

-- See Semaphore._promote: the head of the queue takes each free slot.
local function promote()
  local free = most - redis.call('ZCARD', holders)
  while free > 0 do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if head == nil then return end
    redis.call('ZREM', queue, head)
    -- A place whose expiry is gone (evicted) is a place lost, not a grant. The
    -- place's expiry becomes the lease's (see Semaphore._promote).
    local untl = redis.call('ZSCORE', expiry, head)
    if untl then
      redis.call('ZREM', expiry, head)
      redis.call('ZADD', holders, untl, head)
      tell(head)
      free = free - 1
    end
  end
end

-- See Semaphore.expire.
local function expire()
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', now)
  for _, name in ipairs(gone) do
    redis.call('ZREM', queue, name)
  end
  redis.call('ZREMRANGEBYSCORE', expiry, '-inf', now)
  promote()
end

-- Every key lives a lease past the last write: by then every lease in it has run out.
-- Never shortened: a caller with a shorter lease must not cut the life of another's.
local function keep()
  local ms = tonumber(idle_ms(lease))
  for _, key in ipairs({holders, queue, expiry, seq}) do
    if redis.call('PTTL', key) < ms then expire_after(key, lease) end
  end
end

expire()
-- Shown by `ratelimit inspect`/`top`; its life never shortened, as keep() does.
local shown = math.max(redis.call('PTTL', holders .. ':max'), tonumber(idle_ms(lease)))
redis.call('SET', holders .. ':max', ARGV[3], 'PX', string.format('%d', shown))

if op == 'take' then
  local name = ARGV[6]
  local outcome
  if redis.call('ZSCORE', holders, name) then
    outcome = 'held'
  elseif redis.call('ZSCORE', queue, name) then
    outcome = 'queued'
  elseif redis.call('ZCARD', queue) == 0 and redis.call('ZCARD', holders) < most then
    redis.call('ZADD', holders, now + lease, name)
    outcome = 'held'
  elseif ARGV[7] == '1' then
    redis.call('ZADD', queue, redis.call('INCR', seq), name)
    redis.call('ZADD', expiry, now + lease, name)
    outcome = 'queued'
  else
    outcome = 'full'
  end
  keep()
  return {outcome}
elseif op == 'release' then
  local name = ARGV[6]
  redis.call('ZREM', holders, name)
  redis.call('ZREM', queue, name)
  redis.call('ZREM', expiry, name)
  promote()
  keep()
  return {}
elseif op == 'renew' then
  local held, lost = {}, {}
  for i = 6, #ARGV do
    local name = ARGV[i]
    if redis.call('ZSCORE', holders, name) then
      redis.call('ZADD', holders, now + lease, name)
      held[#held + 1] = name
    elseif redis.call('ZSCORE', queue, name) and redis.call('ZSCORE', expiry, name) then
      redis.call('ZADD', expiry, now + lease, name)
    else
      -- Half a place (one of its keys evicted) is no place: the waiter queues anew.
      redis.call('ZREM', queue, name)
      redis.call('ZREM', expiry, name)
      lost[#lost + 1] = name
    end
  end
  keep()
  held[#held + 1] = '|'
  for _, name in ipairs(lost) do held[#held + 1] = name end
  return held
elseif op == 'keep' then
  local lost = {}
  for i = 6, #ARGV do
    local name = ARGV[i]
    if not redis.call('ZSCORE', holders, name) then lost[#lost + 1] = name end
    redis.call('ZREM', queue, name)
    redis.call('ZREM', expiry, name)
    redis.call('ZADD', holders, now + lease, name)
  end
  keep()
  return lost
end
return redis.error_reply('ratelimit: unknown op ' .. tostring(op))
