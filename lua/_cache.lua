-- ratelimit: what the function library caches between calls, for _single.lua. Loaded
-- after _top.lua, in the library only: a script's locals die with the call, and a
-- script is composed with _cache_none.lua instead, the same functions caching nothing
-- (what is cached is read at each call there anyway; caching it would only cost).
--
-- Read again only when it changes: a limiter sends the same texts at each decision
-- (its parameters, its tokens), its keys name the same side keys, and reading a
-- number or joining a key name is a sizeable part of a fast-path decision. A text is
-- compared by reference (Lua's strings are interned), so a hit costs a comparison.

-- The numbers of a driver's ARGV[3], ARGV[5], ARGV[6], ARGV[7] (tokens, the two
-- parameters, the slack), as the texts last read.
local said_tokens, said_p1, said_p2, said_slack = nil, nil, nil, nil
local read_tokens, read_p1, read_p2, read_slack = nil, nil, nil, nil

-- A reserve's tokens (ARGV[3]) alone, as numbers_of reads them.
local function tokens_of(tokens)
  if tokens ~= said_tokens then said_tokens, read_tokens = tokens, tonumber(tokens) end
  return read_tokens
end

local function numbers_of(tokens, p1, p2, slack)
  tokens_of(tokens)
  if p1 ~= said_p1 or p2 ~= said_p2 or slack ~= said_slack then
    said_p1, said_p2, said_slack = p1, p2, slack
    -- (A second parameter that is no number is text an algorithm reads: a quota's boundaries.)
    read_p1, read_p2, read_slack = tonumber(p1), tonumber(p2) or p2, tonumber(slack)
  end
  return read_tokens, read_p1, read_p2, read_slack
end

-- A reserve's max_wait (ARGV[4]): its number, math.huge for '' (no limit), as last read.
local said_wait, read_wait = '', 1 / 0  -- (math.huge: no global may be read while a library loads)

local function max_wait_of(text)
  if text ~= said_wait then
    said_wait = text
    if text == '' then read_wait = math.huge else read_wait = tonumber(text) end
  end
  return read_wait
end

-- A base key's side keys: <base>:slack, <base>:holes, <base><own> (`own` nil: none),
-- the provider's pace, <base>:holes:pace, and the queue's moves, <base>:holes:moved,
-- as last joined.
local sides_base, sides_own, sides_slack, sides_holes, sides_mine, sides_pace, sides_moved =
  nil, nil, nil, nil, nil, nil, nil

local function sides_of(base, own)
  if base ~= sides_base or own ~= sides_own then
    sides_base, sides_own = base, own
    sides_slack, sides_holes, sides_pace = base .. ':slack', base .. ':holes', base .. ':holes:pace'
    sides_moved = base .. ':holes:moved'
    sides_mine = own and base .. own
  end
  return sides_slack, sides_holes, sides_mine, sides_pace, sides_moved
end

-- finite() of a slack record's two fields, as last read: a busy budget's record is
-- rewritten once per slack, and read at each decision.
local record_texts_1, record_texts_2, record_1, record_2 = false, false, nil, nil

local function record_of(slack_text, until_text)
  if slack_text ~= record_texts_1 or until_text ~= record_texts_2 then
    record_texts_1, record_texts_2 = slack_text, until_text
    record_1, record_2 = finite(slack_text), finite(until_text)
  end
  return record_1, record_2
end

-- What a limiter's state was last found beside.
--
-- A decision asks after the keys beside its state (a change, holes, the fleet's slack
-- record, the window log's caps: see `beside` in _single.lua) with an EXISTS, and
-- reads the slack record where it keeps a slack of its own, as a window does by
-- default: two commands, about a quarter of a busy window's server time. Most find
-- nothing, and every writer of those keys that runs this library is a call of it, on
-- the one Lua state its calls share. So what a decision found, nothing beside but
-- the record (as it read it), is cached here per base, and the decisions after it use
-- that instead of asking, for at most TRUSTED seconds, unless a call that may write
-- there has forgotten it since (see `forget_beside`; a record written is cached as
-- written, see `recorded_beside`).
--
-- Writers outside this library are seen within TRUSTED seconds, when it is asked
-- again: another release's library or its scripts in a rolling deploy, this
-- release's scripts (a client refused FCALL by an ACL, beside others that are not),
-- redis-cli. A change, a restriction or a slack then
-- holds that much later than at once; the state itself is always read whole.
--
-- Scripts (no Functions, a Cluster's client) cache nothing and ask at every decision.
-- A library serves every
-- database of its server and cannot tell them apart: only database 0's calls (no
-- '!' nor '^' before the op, see op_of) cache or use what was found. Times are each
-- call's `now`: one earlier than the entry's (a clock behind another's) asks again.

-- How long what was found is trusted, in seconds of the calls' clock: a hot limiter
-- asks about once per TRUSTED, not at each decision.
local TRUSTED = 0.1
-- The most bases cached; past it, all are forgotten at once (each is asked again at
-- its next decision): keyed limiters may decide for millions of bases.
local CACHED_MOST = 4096

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
  local entry = found[base]
  if entry == nil then
    if found_count >= CACHED_MOST then found, found_count = {}, 0 end
    found_count = found_count + 1
    found[base] = {now, slack or false, untl, present}
    return
  end
  entry[1], entry[2], entry[3], entry[4] = now, slack or false, untl, present
end

-- The record of `base` written by this call: cached as written.
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
