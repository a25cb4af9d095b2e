-- ratelimit: _cache.lua's functions for a script, caching nothing. A script's locals
-- die with the call, so it reads its arguments and asks what is beside a state at
-- each call; these do just that, and capture as little as they can (a script
-- defines every function at each call, and each capture of a local costs there). See _cache.lua for what each
-- returns.

local function tokens_of(tokens)
  return tonumber(tokens)
end

local function numbers_of(tokens, p1, p2, slack)
  -- (A second parameter that is no number is text an algorithm reads: a quota's boundaries.)
  return tonumber(tokens), tonumber(p1), tonumber(p2) or p2, tonumber(slack)
end

local function max_wait_of(text)
  if text == '' then return math.huge end
  return tonumber(text)
end

local function sides_of(base, own)
  return base .. ':slack', base .. ':holes', own and base .. own, base .. ':holes:pace', base .. ':holes:moved'
end

local function record_of(slack_text, until_text)
  return finite(slack_text), finite(until_text)
end

-- Nothing cached: every decision asks.
local function beside_found(base, now)
  return nil
end

local function found_alone(base, now, slack, untl, present)
end

local function recorded_beside(base, slack, untl)
end

local function forget_beside(base)
end
