-- ratelimit: the function library's registrations. Loaded last, after every piece and
-- every driver (see ratelimit/_stores/redis/scripts.py), once per server with FUNCTION LOAD;
-- PREFIX, set just before this file, is the library's name and an underscore:
-- ratelimit_p<protocol>_ (docs/protocol.md); PROTOCOL and REVISION (the revision of
-- this text within the protocol, lua/protocol.json) are set with it.
--
-- Each function takes the KEYS and ARGV its driver's file documents and returns what
-- it says:
--   <PREFIX><kind>         one limiter of algorithm <kind> (lua/_single.lua)
--   <PREFIX>follow_<kind>  the same: what a key's decision that carries its name's change
--                          calls, so that a server holding a revision without it loads
--                          this one (see `carry` in lua/_single.lua)
--   <PREFIX>lanes_<kind>   a budget with priorities, two lanes of <kind> (lua/_lanes.lua)
--   <PREFIX>fair_<kind>    a budget shared fairly among tenants, of <kind> (lua/_fair.lua)
--   <PREFIX>group          a composite (lua/_group.lua)
--   <PREFIX>breaker        a shared circuit breaker (lua/breaker.lua)
--   <PREFIX>concurrency    a shared semaphore, ConcurrencyLimit (lua/concurrency.lua)
--   <PREFIX>live           the safe mode's heartbeat (lua/live.lua)
--   <PREFIX>top_flush      writes the counts held for `ratelimit top` (lua/top_flush.lua)
--   <PREFIX>revision       {protocol, revision}, no keys; its description says
--                          "ratelimit protocol <P> revision <N>", which a client reads
--                          in FUNCTION LIST to load its library only over an older one

-- Written out one by one: while a library loads, Redis lets it call nothing but
-- redis.register_function (not even pairs), so no loop over the kinds.
local function single_of(alg, kind)
  return function(keys, args) return drive_single(alg, kind, keys, args) end
end
local function lanes_of(alg, kind)
  return function(keys, args) return drive_lanes(alg, kind, keys, args) end
end
local function fair_of(alg, kind)
  return function(keys, args) return drive_fair(alg, kind, keys, args) end
end

redis.register_function(PREFIX .. 'token_bucket', single_of(token_bucket, 'token_bucket'))
redis.register_function(PREFIX .. 'leaky_bucket', single_of(leaky_bucket, 'leaky_bucket'))
redis.register_function(PREFIX .. 'sliding_window', single_of(sliding_window, 'sliding_window'))
redis.register_function(PREFIX .. 'sliding_window_counter', single_of(sliding_window_counter, 'sliding_window_counter'))
redis.register_function(PREFIX .. 'quota', single_of(quota, 'quota'))
redis.register_function(PREFIX .. 'follow_token_bucket', single_of(token_bucket, 'token_bucket'))
redis.register_function(PREFIX .. 'follow_leaky_bucket', single_of(leaky_bucket, 'leaky_bucket'))
redis.register_function(PREFIX .. 'follow_sliding_window', single_of(sliding_window, 'sliding_window'))
redis.register_function(PREFIX .. 'follow_sliding_window_counter', single_of(sliding_window_counter, 'sliding_window_counter'))
redis.register_function(PREFIX .. 'follow_quota', single_of(quota, 'quota'))
redis.register_function(PREFIX .. 'lanes_token_bucket', lanes_of(token_bucket, 'token_bucket'))
redis.register_function(PREFIX .. 'lanes_leaky_bucket', lanes_of(leaky_bucket, 'leaky_bucket'))
redis.register_function(PREFIX .. 'lanes_sliding_window', lanes_of(sliding_window, 'sliding_window'))
redis.register_function(PREFIX .. 'lanes_sliding_window_counter', lanes_of(sliding_window_counter, 'sliding_window_counter'))
redis.register_function(PREFIX .. 'fair_token_bucket', fair_of(token_bucket, 'token_bucket'))
redis.register_function(PREFIX .. 'fair_leaky_bucket', fair_of(leaky_bucket, 'leaky_bucket'))
redis.register_function(PREFIX .. 'fair_sliding_window', fair_of(sliding_window, 'sliding_window'))
redis.register_function(PREFIX .. 'fair_sliding_window_counter', fair_of(sliding_window_counter, 'sliding_window_counter'))
redis.register_function(PREFIX .. 'group', drive_group)
redis.register_function(PREFIX .. 'breaker', drive_breaker)
redis.register_function(PREFIX .. 'concurrency', drive_concurrency)
redis.register_function(PREFIX .. 'live', drive_live)
redis.register_function(PREFIX .. 'top_flush', drive_top_flush)
redis.register_function{
  function_name = PREFIX .. 'revision',
  callback = function() return {PROTOCOL, REVISION} end,
  flags = {'no-writes'},
  description = 'ratelimit protocol ' .. PROTOCOL .. ' revision ' .. REVISION,
}
