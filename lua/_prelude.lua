-- ratelimit: shared prelude, first in the function library and in every script (see
-- ratelimit/_stores/redis/scripts.py). Definitions only: a library may call nothing while
-- it loads, and what is defined here is defined once per server.
--
-- Times are seconds as doubles. A script reads the server's clock (TIME) unless the
-- caller passes `now` (tests, and the client-clock mode for services that refuse TIME
-- in scripts). Numbers go back to the client as strings formatted with %.17g, which
-- round-trips a double exactly: a Lua number returned as such would be truncated to
-- an integer reply.

local EPSILON = 1e-9

local function clock(arg)
  if arg == nil or arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) + tonumber(t[2]) / 1000000
  end
  return tonumber(arg)
end

-- clock(), and the TIME reply it read (nil: the time was given).
local function clock_read(arg)
  if arg == nil or arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) + tonumber(t[2]) / 1000000, t
  end
  return tonumber(arg), nil
end

-- A grant at once, replied as the time alone, in text the client reads back to the
-- same double with no string.format (a dear step): "<seconds> <microseconds>" of
-- the TIME reply `t` (read as clock reads it), or `arg`, the time as the client sent
-- it. See at_once in ratelimit/_stores/redis/replies.py.
local function at_once_reply(t, arg)
  if t then return t[1] .. ' ' .. t[2] end
  return arg
end

-- The decision of step() in ratelimit/_algorithms/algorithm.py, from a plan's admit and grant
-- times: the signed wait (>= 0 granted after it; < 0 refused, -wait was needed).
local function decide(admit_at, at, now, max_wait)
  if admit_at - now > EPSILON then return now - admit_at end
  local wait = at - now
  if wait <= EPSILON then return 0.0 end
  -- (A grant never due is no grant, whatever the caller would wait.)
  if wait > max_wait + EPSILON or wait == math.huge then return -wait end
  return wait
end

-- A whole number below 1e14 (a count, a sum of tokens, a TTL's milliseconds) is
-- written by tostring, whose %.14g gives it the same digits as %.17g: a string.format
-- is among the dearest steps of a decision.
local function fmt(x)
  if x % 1 == 0 and x < 1e14 and x > -1e14 then return tostring(x) end
  return string.format('%.17g', x)
end

-- A state as a key keeps it: a debt charged past the largest double (an allowance spent
-- past it, a TAT moved past it) is infinite in process, and is written as the largest
-- double, which the loads read back as infinite (`unbounded`): 'inf' would be read back
-- as no state, a bucket whole again. (The fast paths leave such a state to the loads.)
local LARGEST = 1.7976931348623157e308

local function fmt_state(x)
  if x == math.huge then return fmt(LARGEST) end
  return fmt(x)
end

local function unbounded(x)
  if x == LARGEST then return math.huge end
  return x
end

-- A decision's signed wait as a reply: most are +0 (granted at once), which %.17g
-- writes '0', with no string.format. (-0, '-0', is left to fmt.)
local function fmt_wait(wait)
  if wait == 0 and 1 / wait > 0 then return '0' end
  return fmt(wait)
end

-- What the drivers read back from keys anyone may edit. (Defined here, once, not in a
-- driver, whose body runs at every call: each closure made there is made per call.)

-- A run-time change's value, as MIN_SET and MAX_SET in ratelimit/_stores/redis/config.py:
-- a value outside (hand-written, garbled) is ignored, never a stuck or exploding limit.
local function valid(text)
  local x = tonumber(text)
  if x and x >= 1e-6 and x <= 1e12 then return x end
  return nil
end

-- A finite number, or nil.
local function finite(text)
  local x = tonumber(text)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then return nil end
  return x
end

-- The change by name a keyed decision carries after its op (see `carry` in
-- _single.lua): "<v> <rate> <burst> <until>" ('-' for none) as {v, vtext, rate, burst,
-- untl, text = {rate, burst} as written ('' for none)}; "<v>" (a reset) as {v}; false
-- if garbled or of no limit. The last text's is kept (between the function library's
-- calls), as the decisions of a name's keys carry the same text until it changes.
local carried_last, carried_parsed = nil, false
local function carried_of(text)
  if text == carried_last then return carried_parsed end
  local parsed = false
  local v, rate, burst, untl = string.match(text, '^(%S+) (%S+) (%S+) (%S+)$')
  if v then
    if (valid(rate) or valid(burst)) and finite(v) then
      local texts = {rate, burst}
      for i = 1, 2 do if texts[i] == '-' then texts[i] = '' end end
      parsed = {v = finite(v), vtext = v, rate = valid(rate), burst = valid(burst), untl = finite(untl), text = texts}
    end
  elseif finite(text) then
    parsed = {v = finite(text)}
  end
  carried_last, carried_parsed = text, parsed
  return parsed
end

-- Keys vanish once idle: at the moment their state would be "fresh" anyway, plus a
-- margin, so that TTLs never cut short a state that still matters. The milliseconds
-- go to Redis as text: Lua writes a number of 1e14 or more in exponent form, which
-- PX and PEXPIRE refuse, so the TTL is capped at 1e13 ms (317 years; the limiters
-- refuse configurations whose state matters longer, see ratelimit/_validate.py, so
-- only a queue of reservations piled that far ahead is cut short) and written out.
local MAX_IDLE_MS = 1e13

-- The last TTL written out, cached between calls of the function library: a bucket
-- granting below its limit asks the same TTL at each decision (its state one grant
-- ahead of now), and a string.format is a sizeable part of a fast-path decision.
local said_ms, said_ms_text = nil, nil

local function idle_ms(seconds)
  local ms = math.ceil((seconds + 1) * 1000)
  if ms < 1000 then ms = 1000 end
  if not (ms < MAX_IDLE_MS) then ms = MAX_IDLE_MS end
  if ms ~= said_ms then said_ms, said_ms_text = ms, tostring(ms) end  -- (whole, < 1e14: see fmt)
  return said_ms_text
end

local function expire_after(key, seconds)
  redis.call('PEXPIRE', key, idle_ms(seconds))
end

-- The fleet's slack record (see `fleet_slack` in _single.lua) after a decision with a
-- slack in force: recorded until the state has been idle (from `idle`) for that
-- slack, written ahead by as much again so that a busy budget rewrites it about once
-- per slack, not at every decision. Returns the record as it now stands.
local function record_slack(key, slack, idle, now, recorded_slack, recorded_until)
  if idle < now then idle = now end
  local needed = idle + slack
  if recorded_slack == slack and recorded_until >= needed then return recorded_slack, recorded_until end
  local untl = needed + slack
  redis.call('HSET', key, 'slack', fmt(slack), 'until', fmt(untl))
  expire_after(key, untl - now)
  return slack, untl
end
