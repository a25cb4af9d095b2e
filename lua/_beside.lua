-- ratelimit: what a limiter's state was last found beside, kept between calls of the
-- function library. Loaded after _top.lua; used by _single.lua.
--
-- A decision asks after the keys beside its state (a change, holes, the fleet's slack
-- record, the window log's caps: see `beside` in _single.lua) with an EXISTS, and
-- reads the slack record where it keeps a slack of its own, as a window does by
-- default: two commands, about a quarter of a busy window's server time. Most find
-- nothing, and every writer of those keys that runs this library is a call of it, on
-- the one Lua state its calls share. So what a decision found, nothing beside but
-- the record (as it read it), is kept here per base, and the decisions after it use
-- that instead of asking, for at most TRUSTED seconds, unless a call that may write
-- there has forgotten it since (see `forget_beside`; a record written is kept as
-- written, see `recorded_beside`).
--
-- Writers outside this library are seen within TRUSTED seconds, when it is asked
-- again: another release's library or its scripts in a rolling deploy, this
-- release's scripts (a client refused FCALL by an ACL, beside others that are not),
-- `ratelimit set` of a name no process has decided for (ratelimit/_stores/config.py
-- writes the change itself), redis-cli. A change, a restriction or a slack then
-- holds that much later than at once; the state itself is always read whole.
--
-- A script's locals die with the call: a server's scripts (no Functions, a Cluster's
-- client) keep nothing and ask at every decision, as before. A library serves every
-- database of its server and cannot tell them apart: only database 0's calls (no
-- '!' nor '^' before the op, see op_of) keep or use what was found. Times are each
-- call's `now`: one earlier than the entry's (a clock behind another's) asks again.

-- How long what was found is trusted, in seconds of the calls' clock: a hot limiter
-- asks about once per TRUSTED, not at each decision.
local TRUSTED = 0.1
-- The most bases kept; past it, all are forgotten at once (each is asked again at
-- its next decision): keyed limiters may decide for millions of bases.
local KEPT_MOST = 4096

-- found[base] = {at, slack, untl, present}: when it was asked (`now`), the record's
-- slack (false: none that holds one) and end (-math.huge: none), and whether a record
-- was there at all (present or garbled).
local found, found_count = {}, 0

-- What a decision at `now` may use for `base` instead of asking: the entry, or nil.
local function beside_found(base, now)
  local entry = found[base]
  if entry == nil then return nil end
  local at = entry[1]
  if now < at or now - at > TRUSTED then return nil end
  return entry
end

-- Nothing but the record (`slack`, `untl`, `present`) was found beside `base` at `now`.
local function found_alone(base, now, slack, untl, present)
  if not TOP_HOLDS then return end  -- a script's (see _top.lua): nothing outlives it
  local entry = found[base]
  if entry == nil then
    if found_count >= KEPT_MOST then found, found_count = {}, 0 end
    found_count = found_count + 1
    found[base] = {now, slack or false, untl, present}
    return
  end
  entry[1], entry[2], entry[3], entry[4] = now, slack or false, untl, present
end

-- The record of `base` written by this call: kept as written.
local function recorded_beside(base, slack, untl)
  local entry = found[base]
  if entry ~= nil then entry[2], entry[3], entry[4] = slack, untl, true end
end

-- A call that may write beside the state (or finds something there): the next asks.
local function forget_beside(base)
  if found[base] ~= nil then
    found[base] = nil
    found_count = found_count - 1
  end
end
