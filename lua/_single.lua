-- ratelimit: driver for one limiter. This file is the body of
-- drive_single(ALG, KIND, KEYS, ARGV), run at each call: ALG the algorithm's table,
-- KIND its name. What it calls is defined once before it, in _prelude.lua, the
-- algorithm's file, _members.lua, _top.lua and _cache.lua (_cache_none.lua in a script;
-- see ratelimit/_stores/redis/scripts.py).
--
-- KEYS[1]  the limiter's base key, ratelimit:{<name>}:<algorithm>; every key the
--          algorithm touches is this one or starts with it, so all share its hash tag.
-- KEYS[2]  optional: the limit as changed at run time (`ratelimit set`), a hash
--          ratelimit:{<name>}:config with `rate` and/or `burst` (and `until`, the
--          store time it ends); read by every call, so a change holds from the next
--          decision on, in every process. Written by the 'configure' op, which
--          moves the saved state to the new limit (see `switch`), or by the 'stage'
--          op where the code's values are unknown, with `from` (see `staged`)
-- KEYS[3]  optional: what the code says, a hash ratelimit:{<name>}:code (kind, the two
--          parameters, slack, shadow), read by `inspect`/`top`; written when given, which
--          a process does at its first decision and then once a minute, not at each;
--          kept a day, a keyed budget's a minute past its state (CODE_PAST_STATE_MS)
-- <base>:slack (beside KEYS[1], as <base>:holes): the largest slack a process of this
--          budget keeps, a hash {slack, until}; see `fleet_slack` below
-- ARGV[1]  op: 'reserve' | 'refund' | 'restrict' | 'charge' | 'batch' | 'peek' | 'wait' |
--          'reset' | 'configure' | 'stage'; 'named' and 'nbatch' are 'reserve' and
--          'batch' that name a grant at once too (see at_once_name in _members.lua),
--          after a '~' when nothing is counted for `ratelimit top`, a '!' when the
--          client's database is not 0, a '^' for both (see op_of in _top.lua); a
--          keyed reserve or batch may carry its name's change after a space (see
--          `carry` below)
-- ARGV[2]  now, seconds; '' reads the server's TIME
-- ARGV[3]  tokens (reserve, refund, charge, wait); restrict: the tokens still allowed
-- ARGV[4]  reserve: max_wait in seconds, '' for no limit;
--          refund: the grant time being given back ('' for a grant already made);
--          a time still ahead withdraws that reservation (see _members.lua); or
--          "<time> <name>" for a refund that names its grant (the name reserve returned);
--          restrict: seconds from now until the restriction ends; charge: ''
-- ARGV[5], ARGV[6]  the algorithm's two parameters, as the code configured them
-- ARGV[7]  the seconds of guard (and lease) they already keep back ('0' none)
-- ARGV[8]  '1' for a shadow limiter (never enforced), else '0': said in KEYS[3]
-- ARGV[9]  reserve: '1' to be told the level after the decision too (see below)
--
-- batch (one process's concurrent acquires in one call, and its allotment; see
-- ratelimit/_stores/redis/rounds.py): ARGV[3], ARGV[4] the tokens of an ended allotment given
-- back and its grant time ('' none); ARGV[9] the allotment wanted, in tokens ('0' none);
-- ARGV[10] the smallest allotment worth taking; ARGV[11], ARGV[12], ... each request's
-- tokens and max_wait ('' no limit), in arrival order.
--
-- Returns, as strings (seconds, %.17g):
--   reserve: {signed_wait, at, name}: signed_wait >= 0 granted after that wait, at
--            store time `at`; < 0 refused, nothing recorded, -signed_wait is the wait
--            needed; the grant's name, '1' for one whose slot is known (see exact_name), '' none.
--            The fast and checked fast paths reply a grant at once (wait 0, no name) as one
--            string, the time it was granted at: "<seconds> <microseconds>" of the
--            server's TIME, or ARGV[2] as sent (see at_once_reply in _prelude.lua)
--            With ARGV[9] = '1', the level after the decision too (see level_members
--            and leveled_reply in _members.lua), `left` the whole tokens that could go
--            at once now, one after another, `micros` the microseconds until one more
--            could, rounded up (0: never at once, 'inf': never again), both whole
--            numbers: a grant at once with no name as {time, left, micros}, the time
--            as at_once_reply writes it; any other decision as
--            {signed_wait, at, name, left, micros}
--   charge: {now, named_at, name}: the time a refund names the charge by (its slot's
--            end less the tolerance: see give_back_members), '' where it has none, and
--            its grant name ('1', with the mark of the latest move: see gen_mark)
--   refund, restrict, configure, stage: {now}
--   batch: {signed_wait, at, name} per request, then {allotment tokens granted, at}
--   peek (read only, `ratelimit inspect`): {the two parameters in force, the most
--            tokens one request could take now, the wait for one token, the latest
--            grant promised, the end of a pause ('' none), now}
--   wait (read only, limiter.peek): {the wait a reserve of ARGV[3] tokens would be
--            told now without a limit on it (a refusal's: the wait it needed; 'inf'
--            for more than the limit could ever grant), now}; see peek_members
--   reset (limiter.reset): {now}; the state, holes and pause are forgotten
-- reserve, batch and a restrict that pauses also count what they decided for
-- `ratelimit top` (see `count_decided`).
-- Mirrors MemoryHandle in ratelimit/_stores/memory/backend.py: the algorithm's step, with holes.

-- How long what the code says stays readable once no process has decided (a day).
local CODE_KEPT_MS = '86400000'
-- A keyed budget's record (`for_key`: its hash tag holds the '%/' that only ever
-- separates a name from a key, see ratelimit/_stores/keys.py) is kept instead as long
-- as the state it describes, and this much longer: a process writes it again a minute
-- after its last write (CODE_EVERY in ratelimit/_stores/redis/handles.py), while the
-- decisions in between prolong the state alone. So keys that come and go (a client's
-- address, spoofed or random) leave nothing behind for a day.
local CODE_PAST_STATE_MS = 60000

local now, time = clock_read(ARGV[2])

-- The fast path. Most decisions are a reserve whose state is all there is: no change
-- (KEYS[2]), no holes nor pause (<base>:holes) nor pace (<base>:holes:pace) nor moves
-- (<base>:holes:moved), no slack record (<base>:slack). The
-- full path learns that with an EXISTS, and decides through the tables and closures
-- below; the fast path reads the state alone and decides with the algorithm's
-- `fast`, the same arithmetic with none of them (so the same decisions, to the bit).
--
-- Its invariant: a state written "clean" (a mark in its text, see each algorithm's
-- file) was written by a reserve that found none of those keys beside it and made
-- none, and every later writer of one of them rewrote or deleted the state in the
-- same call, without the mark:
--   configure         `switch` saves the state moved to the new limit
--   stage             (a change where the code's values are unknown) saves the state
--                     without its mark, for the next decision to move it
--   refund, batch     a give-back (holes, withdrawals) saves the state
--   restrict          (a restriction, a pause) saves the state
--   charge            saves the state (and only ever deletes holes)
--   a slack record    written by `keep_slack`, right after a save, and only by a
--                     process keeping a slack, which never takes the fast path
--   reset             deletes the state
-- So a clean state proves that nothing is beside it, and the EXISTS is skipped. A
-- missing state (fresh, expired, evicted) or one not clean takes the full path, which
-- writes it clean again when the EXISTS finds nothing. A side key outliving the state
-- meets a missing state: the full path. A state written without a mark is decided
-- on the full path (compatibility: see ratelimit/_stores/redis/__init__.py).
-- Keys written by hand (redis-cli) rewrite no state: a decision that also writes what
-- the code says (KEYS[3]: a process's first, then one a minute) takes the full path,
-- whose EXISTS finds them and drops the mark (below, `unmarked`), so such a change is
-- followed within a minute (see `set` in docs/operating.md).
--
-- A grant at once is replied as the time alone (see at_once_reply in _prelude.lua).
local raw = nil  -- the state as the fast or checked fast path read it (false: none)

-- A keyed budget's decision (a reserve or a round) carries its name's change by name
-- while one is in force or was just reset, after a space in ARGV[1]: "<op> <v> <rate>
-- <burst> <until>" ('-' for none), or "<op> <v>" for a reset; `v` (a number) orders
-- the name's changes. A key's script cannot read its name's hash (it is in a slot of
-- its own), so each process reads it once in a while (see
-- ratelimit/_stores/redis/name_changes.py) and its keys' decisions bring it here,
-- where the key takes it into its own hash (with `by` and `v`, where KEYS[2] is read
-- below): a key first used after the change follows it. Nothing is carried while no
-- change by name is in force (nor for ten minutes after a reset).
local op_text, carried = ARGV[1], nil
local space = string.find(op_text, ' ', 1, true)
if space then
  carried = string.sub(op_text, space + 1)
  op_text = string.sub(op_text, 1, space - 1)
end
local op, counted, elsewhere = op_of(op_text)
-- The change carried, in force, or a reset (see carried_of in _prelude.lua); nil for
-- none, an ended change, or garbled text.
local carry = nil
if carried then
  carry = carried_of(carried) or nil
  if carry and carry.untl and now >= carry.untl then carry = nil end
end
-- A change to take: the fast path (and what was found beside the state a moment ago)
-- cannot tell whether the key holds it, so the full path reads its hash. A reset
-- carried keeps the fast path: a clean state proves no change is beside it.
local adopting = carry ~= nil and (carry.rate ~= nil or carry.burst ~= nil)

-- A change where what the code says (KEYS[3]) is gone (an evicting maxmemory-policy
-- takes it first: it is written once a minute) or was never written: 'configure'
-- cannot move the state, which needs the code's values. 'stage' (ARGV as for
-- 'configure', ARGV[5] and ARGV[6] unused) writes the change with `from`, the limit
-- the saved state is at and when it was staged ("<rate> <burst> <time>", '-' for a
-- code's value), and drops the state's mark, so that the next decision takes the full
-- path, finds the hash and moves the state with its own code's values as of that time
-- (see `staged` below; nothing writes the state in between): a change holds from the
-- next decision whether or not KEYS[3] is there. A return to the code's values leaves
-- a hash of `from` alone, kept a day (a state idle that long has expired).
if op == 'stage' then
  local set = redis.call('HMGET', KEYS[2], 'rate', 'burst', 'from')
  local from = set[3]
  if not from then
    -- Moved already: the state is at the change in force, if any (past its end too:
    -- the first decision after the end moves it back).
    local rate, burst = valid(set[1]), valid(set[2])
    from = (rate and set[1] or '-') .. ' ' .. (burst and set[2] or '-') .. ' ' .. fmt(now)
  end
  redis.call('DEL', KEYS[2])
  local rate, burst = valid(ARGV[3]), valid(ARGV[4])
  if rate or burst then
    redis.call('HSET', KEYS[2], 'rate', ARGV[3], 'burst', ARGV[4], 'from', from)
    if ARGV[9] ~= '' then
      local seconds = tonumber(ARGV[9])
      redis.call('HSET', KEYS[2], 'until', fmt(now + seconds))
      expire_after(KEYS[2], seconds + 86400)
    end
  elseif string.sub(from, 1, 4) ~= '- - ' then
    redis.call('HSET', KEYS[2], 'from', from)
    expire_after(KEYS[2], 86400)
  end
  local state = redis.call('GET', KEYS[1])
  local plain = state and ALG.unmarked and ALG.unmarked(state)
  if plain then redis.call('SET', KEYS[1], plain, 'KEEPTTL') end
  forget_beside(KEYS[1])
  return {fmt(now)}
end

-- 'named' and 'nbatch' are 'reserve' and 'batch' for a limiter that gives back: a grant
-- at once is named too (see at_once_name in _members.lua; the fast path names it so).
local names = false
if op == 'named' then op, names = 'reserve', true
elseif op == 'nbatch' then op, names = 'batch', true end
local top_base = nil
if counted then top_base = KEYS[1] end
-- A reserve that asks for the level after it (ARGV[9]): decided as any other, then the
-- level read on the state it leaves (level_members): on the fast path from the state's
-- numbers `fast` returns, after a window's checked fast path (which keeps the state
-- in the keys alone) from the state loaded again.
local leveled = op == 'reserve' and ARGV[9] == '1'
if ALG.fast and op == 'reserve' and KEYS[2] and not KEYS[3] and not adopting
    and (ARGV[7] == '0.0' or ARGV[7] == '0') then
  raw = redis.call('GET', KEYS[1])
  if raw then
    local wait, name, s1, s2 = ALG.fast(KEYS[1], raw, ARGV[5], ARGV[6], now, tokens_of(ARGV[3]), max_wait_of(ARGV[4]), names)
    if wait then
      count_one(top_base, now, wait)
      if leveled then
        local state = s1
        if s2 ~= nil then state = {s1, s2} end
        local self = ALG.new(KEYS[1], tonumber(ARGV[5]), tonumber(ARGV[6]))
        return leveled_reply({{alg = ALG, self = self, tokens = 0.0, state = state}}, nil, now, wait, name, time, ARGV[2])
      end
      if wait == 0 and name == '' then return at_once_reply(time, ARGV[2]) end
      return {fmt_wait(wait), fmt(now + wait), name}
    end
  end
end

local tokens, code1, code2, slack = numbers_of(ARGV[3], ARGV[5], ARGV[6], ARGV[7])

-- Processes of one budget may keep different slacks: a rollout of `lease=` runs
-- allotting and plain processes side by side, and an allotted token may be sent `lease`
-- seconds after its grant. A process keeping less back than another would grant
-- what the other's late tokens still need, and the two together exceed the limit.
-- So the largest slack in use is recorded here, until the state has been idle for
-- that long after the last decision made with it (every token granted under it has
-- gone by then), and every process decides with the larger of its own and it.
local fleet_slack, holes, own, paced, moves = sides_of(KEYS[1], ALG.beside)
-- A change (KEYS[2]) and holes are rare, and so is the record where no process keeps a
-- slack: most decisions find none of them, which one EXISTS tells for less than
-- reading any one. A process with a slack of its own keeps the record itself, so it
-- reads it and asks only after the others.
-- An algorithm with a key of its own that is absent almost always (`ALG.beside`, the
-- window log's caps) has it asked after in the same EXISTS: found none, `load` is told
-- so (raw = false) and reads nothing more.
-- What was found beside the state a moment ago, cached by the library (see
-- _cache.lua): used instead of asking by the calls that write nothing there (a
-- reserve, a batch giving nothing back, the ops that only read); forgotten by every
-- other, which may. Not where the process keeps no slack and a record was found: the
-- EXISTS counts the record, which keeps such a state from being written clean.
local keeps = not elsewhere and KEYS[2] ~= nil and not adopting
  and (op == 'reserve' or op == 'peek' or op == 'wait' or (op == 'batch' and ARGV[3] == ''))
-- What the ops that only read find is not kept: a process's peek may come before its
-- first decision (which writes what the code says), and a `set` meanwhile finds no
-- code and stages the change ('stage', which a script beside the library may run:
-- a client refused FCALL), which the next decision must then see at once.
local stores = keeps and op ~= 'peek' and op ~= 'wait'
-- (A state is written clean only by a call that asked: see the reserve below.)
local kept = nil
if keeps and not KEYS[3] then  -- (a decision that writes what the code says asks: see above)
  kept = beside_found(KEYS[1], now)
  if kept and slack == 0 and kept[4] then kept = nil end
else
  forget_beside(KEYS[1])  -- (forgetting is always safe, whatever the database)
end
local beside = 1
if kept then
  beside = 0
  if own then raw = false end
elseif KEYS[2] then
  if slack > 0 then
    if own then beside = redis.call('EXISTS', KEYS[2], holes, paced, moves, own)
    else beside = redis.call('EXISTS', KEYS[2], holes, paced, moves) end
  elseif own then beside = redis.call('EXISTS', fleet_slack, KEYS[2], holes, paced, moves, own)
  else beside = redis.call('EXISTS', fleet_slack, KEYS[2], holes, paced, moves) end
  if beside == 0 and own then raw = false end
end
if adopting and KEYS[2] and beside == 0 then beside = 1 end  -- (its hash is read below)
-- Something beside a clean state (a change or a record written by hand, see the fast
-- path): the state loses its mark here, so that every process takes the full path
-- from now on. (Not by the ops that only read: they write nothing.)
if beside > 0 and ALG.unmarked and op ~= 'peek' and op ~= 'wait' then
  if raw == nil then raw = redis.call('GET', KEYS[1]) end
  local plain = raw and ALG.unmarked(raw)
  if plain then redis.call('SET', KEYS[1], plain, 'KEEPTTL') end
end
-- A record that does not hold a slack a limiter could keep (guard <= 1e9 s, lease <= 60
-- s) and a finite end, hand-edited or garbled, is ignored, as a garbled change is.
local recorded_slack, recorded_until = nil, -math.huge
if kept then
  recorded_slack, recorded_until = kept[2] or nil, kept[3]
elseif beside > 0 or slack > 0 then
  local recorded = redis.call('HMGET', fleet_slack, 'slack', 'until')
  recorded_slack, recorded_until = record_of(recorded[1], recorded[2])
  recorded_until = recorded_until or -math.huge
  if recorded_slack and not (recorded_slack > 0 and recorded_slack <= 2e9) then recorded_slack = nil end
  if beside == 0 and stores then
    found_alone(KEYS[1], now, recorded_slack, recorded_until, recorded[1] ~= false or recorded[2] ~= false)
  end
elseif beside == 0 and stores then
  found_alone(KEYS[1], now, nil, -math.huge, false)  -- (the EXISTS asked after the record too)
end
if beside > 0 then forget_beside(KEYS[1]) end
-- The slack the saved state was decided with: the one recorded, or none.
local prior = 0.0
if recorded_slack and now < recorded_until then prior = recorded_slack end

-- The checked fast path: a reserve that the EXISTS found alone with its state, under the
-- slack its state was decided with, is decided as the full path below decides it,
-- without defining its closures: by the algorithm's `checked_fast` where it has one (the
-- sliding window counter's, with none of its tables either), else by reserve_members;
-- then the slack is recorded as `keep_slack` records it.
if beside == 0 and op == 'reserve' and not KEYS[3]
    and not (prior > slack + EPSILON) and not (slack > prior + EPSILON) then
  local max_wait = max_wait_of(ARGV[4])
  local self = ALG.new(KEYS[1], code1, code2)
  local wait, name, idle
  local member = nil
  if ALG.checked_fast then
    wait, name, idle = ALG.checked_fast(self, now, tokens, max_wait, time ~= nil)
    -- Nothing: the full path decides, on what the checked fast path read where it says so.
    if not wait and name ~= nil then raw = name end
    -- The level read on the state as saved (`raw` says what the EXISTS found beside it).
    if wait and leveled then member = {alg = ALG, self = self, tokens = tokens, state = ALG.load(self, raw)} end
  else
    -- The full path's reserve (below) with none of its closures: no change is in
    -- force, no holes are there, and the slack is the state's.
    wait, name = -math.huge, ''
    member = {alg = ALG, self = self, tokens = tokens, state = ALG.load(self, raw)}
    local changed = false
    if not (tokens > code1 + EPSILON) or code2 == math.huge then  -- (as too_big, below)
      wait, changed, name = reserve_members({member}, holes, now, max_wait, true, names)
    end
    if changed or dirty(member.state) then
      ALG.save(self, member.state, now, slack == 0 and not kept)
      idle = ALG.idle_until(self, member.state)
    end
  end
  if wait then
    if idle and slack > 0 then
      recorded_slack, recorded_until = record_slack(fleet_slack, slack, idle, now, recorded_slack, recorded_until)
      if not elsewhere then recorded_beside(KEYS[1], recorded_slack, recorded_until) end
    end
    count_one(top_base, now, wait)
    if leveled then return leveled_reply({member}, holes, now, wait, name, time, ARGV[2]) end
    if wait == 0 and name == '' then return at_once_reply(time, ARGV[2]) end
    return {fmt_wait(wait), fmt(now + wait), name}
  end
end

if prior > slack + EPSILON then
  code1, code2 = ALG.guarded(code1, code2, prior - slack)
  slack = prior
end

-- The parameters in force under a change {rate, burst} (nil: the code's).
local function effective(change)
  if change == nil then return code1, code2 end
  return ALG.configured(code1, code2, slack, change.rate, change.burst)
end

-- Move the saved state from one limit to another: the tokens owed keep their count
-- (a bucket's backlog is kept in time, which a new rate would otherwise rescale).
-- `when`: the time of the change, where the state is moved later (a staged change;
-- nothing wrote the state since), else now.
local function switch(from, to, when)
  if not ALG.rescale then return end
  local before = ALG.new(KEYS[1], effective(from))
  local after = ALG.new(KEYS[1], effective(to))
  if not (when and when < now) then when = now end
  ALG.save(after, ALG.rescale(before, after, ALG.load(before, raw), when), now)
  raw = nil  -- written since
end

-- What `switch` would save, for the ops that read only (peek, wait): a staged change
-- is told as the next decision will find it, and nothing is written.
local moved = nil
local function switched(from, to, when)
  if not ALG.rescale then return end
  local before = ALG.new(KEYS[1], effective(from))
  local after = ALG.new(KEYS[1], effective(to))
  if not (when and when < now) then when = now end
  moved = ALG.rescale(before, after, ALG.load(before, raw), when)
end

-- A `from` (see 'stage'): the limit the state is at (nil: the code's, else {rate,
-- burst}) and the time it was staged (nil if garbled: now).
local function limit_of(text)
  local rate, burst, staged_at = string.match(text, '^(%S+) (%S+) (%S+)$')
  rate, burst = valid(rate), valid(burst)
  staged_at = finite(staged_at)
  if rate or burst then return {rate = rate, burst = burst}, staged_at end
  return nil, staged_at
end

local change = nil
-- The limit the saved state is at: the change in force, or a `from` the 'stage' op
-- wrote beside a state it could not move (`staged`), which this call moves.
local at = nil
local staged, staged_at = false, nil
if KEYS[2] and beside > 0 then
  local set = redis.call('HMGET', KEYS[2], 'rate', 'burst', 'until', 'from', 'by', 'v')
  local rate, burst = valid(set[1]), valid(set[2])
  if rate or burst then change = {rate = rate, burst = burst} end
  at = change
  if set[4] then
    staged = true
    at, staged_at = limit_of(set[4])
  end
  if change then
    -- A change set for a while ends here, at the first decision after its end, so
    -- that the state moves back to the code's limit atomically with it.
    local untl = tonumber(set[3])
    if untl and now >= untl and op ~= 'configure' then
      if op ~= 'peek' and op ~= 'wait' then  -- the ops that read only
        switch(at, nil, staged_at)
        redis.call('DEL', KEYS[2])
        at, staged = nil, false
      end
      change = nil
    end
  end
  if staged and op ~= 'peek' and op ~= 'wait' then
    switch(at, change, staged_at)
    if change then redis.call('HDEL', KEYS[2], 'from') else redis.call('DEL', KEYS[2]) end
    at = change
  elseif staged then
    switched(at, change, staged_at)
  end
  -- A change by name carried (see `carry` above), followed by a call that writes: the
  -- key takes a change newer than the one it holds of its name (its `v`), and goes
  -- back to the code's values at a reset newer than it; a key's own change (no `by`)
  -- prevails. The state moves as under 'configure'.
  if carry and op ~= 'peek' and op ~= 'wait' and op ~= 'configure' and not (change and not set[5]) then
    local held = finite(set[6])
    if adopting and not (held and held >= carry.v) then
      switch(at, carry)
      redis.call('DEL', KEYS[2])
      redis.call('HSET', KEYS[2], 'rate', carry.text[1], 'burst', carry.text[2], 'by', 'name', 'v', carry.vtext)
      if carry.untl then
        redis.call('HSET', KEYS[2], 'until', fmt(carry.untl))
        expire_after(KEYS[2], carry.untl - now + 86400)
      end
      change, at = {rate = carry.rate, burst = carry.burst}, carry
    elseif not adopting and set[5] and not (held and held >= carry.v) then
      switch(at, nil)
      redis.call('DEL', KEYS[2])
      change, at = nil, nil
    end
  end
end
-- Given by each process at its first decision and then once a minute: a fleet rolling
-- a shadow out shows within a minute what its latest decisions were, and a decision
-- pays nothing for it in between. A keyed budget's record is written after the ops
-- (below), once the op has saved the state whose TTL it takes.
local keyed_code = KEYS[3] ~= nil and string.find(KEYS[3], '%/', 1, true) ~= nil
if KEYS[3] and not keyed_code then
  redis.call('HSET', KEYS[3], 'kind', KIND, 'p1', ARGV[5], 'p2', ARGV[6], 'slack', ARGV[7], 'shadow', ARGV[8])
  redis.call('PEXPIRE', KEYS[3], CODE_KEPT_MS)
end

if op == 'configure' then
  -- ARGV[3], ARGV[4]: the new rate and burst ('' keeps the code's; both '': back to
  -- the code); ARGV[9]: the seconds it lasts ('' until reset).
  local rate, burst = valid(ARGV[3]), valid(ARGV[4])
  local to = nil
  if rate or burst then to = {rate = rate, burst = burst} end
  switch(at, to)
  redis.call('DEL', KEYS[2])
  if to then
    redis.call('HSET', KEYS[2], 'rate', ARGV[3], 'burst', ARGV[4])
    if ARGV[9] ~= '' then
      local seconds = tonumber(ARGV[9])
      redis.call('HSET', KEYS[2], 'until', fmt(now + seconds))
      -- Kept a day past its end: the first decision after it moves the state back.
      expire_after(KEYS[2], seconds + 86400)
    end
  end
  return {fmt(now)}
end

local p1, p2 = effective(change)
local self = ALG.new(KEYS[1], p1, p2)
-- A request the limit as changed could never hold (the code checked it against its
-- own): refused for ever (an AcquireTimeout whose retry_after is infinite), as a
-- bucket must not grant more at once than its capacity.
local function too_big(t)
  -- (A token bucket refilled at an infinite rate grants any weight.)
  return t > p1 + EPSILON and p2 ~= math.huge
end
local loaded = moved
if loaded == nil then loaded = ALG.load(self, raw) end
local member = {alg = ALG, self = self, tokens = tokens, state = loaded}
-- Holes are made only by give-backs and restrictions, never by a reserve: none found
-- before this call's first one, none are there for any reserve of it that follows.
local no_holes = beside == 0

-- After a decision with a slack in force: recorded until the state has been idle for
-- that slack, written ahead by as much again so that a busy budget rewrites it about
-- once per slack, not at every decision.
local function keep_slack(state)
  if not (slack > 0) then return end
  recorded_slack, recorded_until = record_slack(fleet_slack, slack, ALG.idle_until(self, state), now,
                                                recorded_slack, recorded_until)
  if not elsewhere then recorded_beside(KEYS[1], recorded_slack, recorded_until) end
end

-- A process keeping more slack than the state was decided with: a window counter cuts
-- its sub-windows by the window's length, so the state is cut again for this one
-- (the other algorithms keep times, read alike under any slack), and from now on the
-- record says so.
if slack > prior + EPSILON and ALG.relayout then
  member.state = ALG.relayout(self, member.state, slack - prior)
  if op ~= 'peek' and op ~= 'wait' then
    ALG.save(self, member.state, now)
    keep_slack(member.state)
  end
end

local reply = nil
if op == 'reserve' then
  local max_wait = math.huge
  if ARGV[4] ~= '' then max_wait = tonumber(ARGV[4]) end
  local wait, changed, name = -math.huge, false, ''
  if not too_big(tokens) then
    wait, changed, name = reserve_members({member}, holes, now, max_wait, no_holes, names)
  end
  if changed or dirty(member.state) then
    -- Clean (see the fast path) when nothing was found beside the state: no change,
    -- no holes, and no slack record, which the EXISTS asked after where none is kept.
    -- Asked in this call, not kept from an earlier one, so a writer beside the library
    -- is followed at once (compatibility: see ratelimit/_stores/redis/__init__.py).
    ALG.save(self, member.state, now, no_holes and slack == 0 and not kept)
    keep_slack(member.state)
  end
  count_one(top_base, now, wait)
  if leveled then reply = leveled_reply({member}, holes, now, wait, name, time, ARGV[2])
  else reply = {fmt_wait(wait), fmt(now + wait), name} end
elseif op == 'batch' then
  -- Exactly the requests' own reserves, one after the other, as separate calls in
  -- this order would decide them; then the allotment, itself a reservation with no wait,
  -- taken only if every request went at once (a queue means no slack to allot), and
  -- halved until it fits or is not worth taking.
  local changed = false
  if ARGV[3] ~= '' then
    give_back_members({member}, holes, now, {tonumber(ARGV[3])}, tonumber(ARGV[4]))
    changed = true
    no_holes = false
  end
  local out = {}
  local waits = {}
  local room = true
  for i = 11, #ARGV, 2 do
    member.tokens = tonumber(ARGV[i])
    local max_wait = math.huge
    if ARGV[i + 1] ~= '' then max_wait = tonumber(ARGV[i + 1]) end
    local wait, moved, name = -math.huge, false, ''
    if not too_big(member.tokens) then
      wait, moved, name = reserve_members({member}, holes, now, max_wait, no_holes, names)
    end
    if moved then changed = true end
    if wait ~= 0 then room = false end
    waits[#waits + 1] = wait
    out[#out + 1] = fmt_wait(wait)
    out[#out + 1] = fmt(now + wait)
    out[#out + 1] = name
  end
  local want, least, got = tonumber(ARGV[9]), tonumber(ARGV[10]), 0
  while room and want >= least and want > 0 do
    member.tokens = want
    local wait, moved = reserve_members({member}, holes, now, 0, no_holes)
    if wait >= 0 then
      got = want
      if moved then changed = true end
      break
    end
    want = math.floor(want / 2)
  end
  out[#out + 1] = fmt(got)
  out[#out + 1] = fmt(now)
  count_decided(top_base, now, waits, got, 0)
  if changed or dirty(member.state) then
    ALG.save(self, member.state, now)
    keep_slack(member.state)
  end
  reply = out
elseif op == 'refund' then
  local at, exact = nil, nil
  if ARGV[4] ~= '' then
    local time, name = string.match(ARGV[4], '^(%S+) (%S+)$')
    at, exact = tonumber(time or ARGV[4]), name
  end
  give_back_members({member}, holes, now, {tokens}, at, exact)
  ALG.save(self, member.state, now)
  if at and at > now + EPSILON then count_withdrawn(top_base, now) end
  reply = {fmt(now)}
elseif op == 'charge' then
  charge_members({member}, holes, now)
  ALG.save(self, member.state, now)
  keep_slack(member.state)
  local named_at, name = '', ''
  if ALG.room then
    named_at = fmt(ALG.latest(self, member.state))
    -- (The mark of the latest move, as a reserve's name has it: see gen_mark.)
    name = '1' .. gen_mark(moves_of(holes, now))
  end
  reply = {fmt(now), named_at, name}
elseif op == 'peek' then
  -- The largest request that would go now, by bisection on the plan (which changes
  -- nothing saved): holes are left out, they only ever add to it.
  local function goes(t)
    local admit_at, at = ALG.plan(self, member.state, now, t)
    return admit_at - now <= EPSILON and at - now <= EPSILON
  end
  local low, high = 0.0, p1
  if goes(high) then low = high else
    for _ = 1, 60 do
      local mid = (low + high) / 2
      if goes(mid) then low = mid else high = mid end
    end
  end
  local admit_at, at = ALG.plan(self, member.state, now, 1.0)
  if admit_at > at then at = admit_at end
  local paused = redis.call('ZSCORE', holes, 'pause')
  if paused and tonumber(paused) <= now then paused = false end
  if not paused and self.allowance then
    -- An allowance's pause is a gate (see gate in _members.lua): a pace whose next
    -- slot is its end.
    local gated = pace_of(paced, now)
    if gated and gated.at >= gated.untl then paused = fmt(gated.untl) end
  end
  -- (A quota's second parameter is the text of its boundaries: said as sent.)
  if type(p2) == 'string' then p2 = ARGV[6] else p2 = fmt(p2) end
  return {fmt(p1), p2, fmt(low), fmt(math.max(at - now, 0.0)),
          fmt(ALG.latest(self, member.state)), paused or '', fmt(now)}
elseif op == 'wait' then
  if too_big(tokens) then return {'inf', fmt(now)} end
  reply = {fmt(math.max(peek_members({member}, now), pace_wait(holes, now))), fmt(now)}
elseif op == 'reset' then
  forget_members({member}, holes)
  reply = {fmt(now)}
elseif op == 'restrict' then
  local untl = now + tonumber(ARGV[4])
  restricted(holes, now, untl)
  if tokens >= 1.0 then
    -- One or more left: a pace every grant keeps (see pace in holes.py), the state
    -- saved unmarked so that the next decision asks what is beside it.
    pace(holes, now, tokens, untl)
  elseif self.allowance then
    -- A state that holds no time (see gate in holes.py): the pause kept beside it.
    gate(holes, now, untl)
    if tokens <= EPSILON then count_decided(top_base, now, {}, 0, 1) end
  else
    member.state = ALG.restrict(self, member.state, now, tokens, untl)
    if tokens <= EPSILON then
      pause(holes, now, untl)
      count_decided(top_base, now, {}, 0, 1)
    end
  end
  ALG.save(self, member.state, now)
  keep_slack(member.state)  -- a window counter's placeholders are grants ahead
  reply = {fmt(now)}
end
if reply == nil then return redis.error_reply('ratelimit: unknown op ' .. tostring(op)) end
-- A keyed budget's record: its state's TTL and the margin (no state left, a reset's
-- or a refusal's of a fresh one: the margin alone; a state kept without a TTL, which
-- no algorithm writes: a day).
if keyed_code then
  redis.call('HSET', KEYS[3], 'kind', KIND, 'p1', ARGV[5], 'p2', ARGV[6], 'slack', ARGV[7], 'shadow', ARGV[8])
  local ms = redis.call('PTTL', KEYS[1])
  if ms == -1 then redis.call('PEXPIRE', KEYS[3], CODE_KEPT_MS)
  else redis.call('PEXPIRE', KEYS[3], math.max(ms, 0) + CODE_PAST_STATE_MS) end
end
return reply
