-- ratelimit: what one limiter and a composite share: deciding a group of limits
-- together, charging them, and reusing the holes that withdrawn reservations leave.
-- Loaded after the algorithms and before a driver. Mirrors plan_all/commit_all/charge_all
-- in ratelimit/_algorithms/algorithm.py and reserve/give_back in ratelimit/_algorithms/holes.py.
--
-- A member is {alg = <algorithm table>, self = <its instance>, tokens = n, state = s};
-- one limiter is a group of one.
--
-- Holes: a sorted set <KEYS[1]>:holes (the group's hash tag), score = the time the
-- withdrawn grant was due, member = "<time>|<tokens>,<tokens>,..." with one number
-- per limit of the group. At most one hole per time (within EPSILON). The member
-- "pause", scored with the end of the latest pause from the provider, is no hole.
-- The provider's pace (see pace in holes.py) is kept beside them, at <holes>:pace,
-- and the moves of the queue up into lasting holes (see _move_up in holes.py) at
-- <holes>:moved (moves_of). A token bucket's hole stays good past its time for the
-- part of its slot still ahead (`room`), and a refund that names a grant leaves one;
-- see the docstring of holes.py.

local HOLE_SCAN = 16

-- A member's state written by its plan (a table-valued state marks it), which is
-- saved even if the request is refused.
local function dirty(state)
  return type(state) == 'table' and state.dirty
end

local function plan_all(members, now)
  local admit_at, at = now, now
  for _, m in ipairs(members) do
    local admit, grant = m.alg.plan(m.self, m.state, now, m.tokens)
    if admit > admit_at then admit_at = admit end
    if grant > at then at = grant end
  end
  return admit_at, at
end

-- What limiter.peek says: the wait a request of the members' tokens would be told
-- now, read only; the magnitude of decide with no limit on the wait (a refusal's is
-- the wait it needed), planned on the states alone (holes are not offered). Mirrors
-- peek_all in ratelimit/_algorithms/algorithm.py.
local function peek_members(members, now)
  local admit_at, at = plan_all(members, now)
  return math.abs(decide(admit_at, at, now, math.huge))
end

-- What limiter.reset does: forget the members' usage, which is their state (each
-- algorithm's key; a window log's also <key>:caps and <key>:meta, a leaky bucket's
-- <key>:gaps), their holes and pause, and the restriction mark beside them. A change
-- set by an operator (the config hash) and what the code says are not usage, and stay.
local function forget_members(members, holes)
  for _, m in ipairs(members) do
    redis.call('DEL', m.self.key, m.self.key .. ':caps', m.self.key .. ':meta', m.self.key .. ':gaps')
  end
  redis.call('DEL', holes, holes .. ':restricted', holes .. ':pace', holes .. ':moved')
end

local function commit_all(members, now, at)
  for _, m in ipairs(members) do
    m.state = m.alg.commit(m.self, m.state, now, m.tokens, at)
  end
end

local function hole_tokens(member)
  local out = {}
  for piece in string.gmatch(string.match(member, '|(.*)$'), '[^,]+') do
    out[#out + 1] = tonumber(piece)
  end
  return out
end

-- A lasting hole (see Hole in holes.py) is written with an 'L' before its time.
local function hole_member(at, tokens, lasting)
  local parts = {}
  for i, n in ipairs(tokens) do parts[i] = fmt(n) end
  local member = fmt(at) .. '|' .. table.concat(parts, ',')
  if lasting then return 'L' .. member end
  return member
end

local function is_lasting(member)
  return string.sub(member, 1, 1) == 'L'
end

-- The holes key lives as long as its holes may be taken: a lasting hole until its slot
-- is past, which can be later than the latest hole's time, so it is never shortened.
local function hold(holes, seconds)
  local ms = idle_ms(seconds)
  if redis.call('PTTL', holes) < tonumber(ms) then redis.call('PEXPIRE', holes, ms) end
end

-- See _room in holes.py: the tokens of a hole left for time `at` that a grant at t
-- may take; past its time only a lasting hole's, of an algorithm with `room`.
local function hole_room(m, at, tokens, t, lasting)
  if lasting and m.alg.room then return m.alg.room(m.self, at, tokens, t) end
  if t <= at + EPSILON then return tokens end
  return 0.0
end

-- See _when in holes.py: when a request could take the hole (its time, or now if
-- that is past), each member finding its tokens in the hole's room or granting them
-- by itself by then, at least one from the hole; nil if it cannot.
local function hole_when(members, plans, now, at, have, lasting)
  -- A hole of another shape belongs to another composite of the same name.
  if #have ~= #members then return nil end
  local t = now
  if at > now then t = at end
  local taken = false
  for i, m in ipairs(members) do
    if m.tokens <= hole_room(m, at, have[i], t, lasting) + EPSILON then
      if m.tokens > 0 then taken = true end
    elseif plans[i][1] - now > EPSILON or plans[i][2] > t + EPSILON then
      return nil
    end
  end
  if taken then return t end
  return nil
end

-- See _add in holes.py: withdrawals of one moment make one hole; a lasting hole is
-- never merged.
local function add_hole(holes, now, at, tokens, lasting)
  local near = {}
  if not lasting then
    near = redis.call('ZRANGEBYSCORE', holes, fmt(at - EPSILON), fmt(at + EPSILON), 'WITHSCORES', 'LIMIT', 0, 4)
  end
  local merged = false
  for k = 1, #near, 2 do
    if not merged and near[k] ~= 'pause' and not is_lasting(near[k]) then
      local have = hole_tokens(near[k])
      local hole_at = tonumber(near[k + 1])
      for i = 1, #tokens do have[i] = have[i] + tokens[i] end
      redis.call('ZREM', holes, near[k])
      redis.call('ZADD', holes, fmt(hole_at), hole_member(hole_at, have, false))
      merged = true
    end
  end
  if not merged then redis.call('ZADD', holes, fmt(at), hole_member(at, tokens, lasting)) end
  local last = redis.call('ZRANGE', holes, -1, -1, 'WITHSCORES')
  hold(holes, tonumber(last[2]) - now)
end

-- See _piece_end in holes.py: where a piece taken from the left of a hole's room ends,
-- less the tolerance.
local function piece_end(m, at, room, tokens)
  return at - (room - tokens) / m.self.rate
end

-- See GrantTime in holes.py: a grant taken from holes is named by its pieces,
-- "P<member>:<at>:<tokens>;..." ('' for none).
local function pieces_name(pieces)
  if #pieces == 0 then return '' end
  local parts = {}
  for k, p in ipairs(pieces) do parts[k] = p[1] .. ':' .. fmt(p[2]) .. ':' .. fmt(p[3]) end
  return 'P' .. table.concat(parts, ';')
end

-- See _take in holes.py: grant the members' tokens at t, from the hole where it holds
-- them and from their states otherwise; keep the rest where it still fits (later in
-- a queue; given up where the limits disagree on where).
local function take_hole(members, holes, now, hole, t)
  redis.call('ZREM', holes, hole.member)
  local rest, where, agree = {}, nil, true
  local pieces = {}
  for i, m in ipairs(members) do
    local room = hole_room(m, hole.at, hole.have[i], t, hole.lasting)
    local left, place
    if m.tokens <= room + EPSILON then
      left = 0.0
      if room > m.tokens then left = room - m.tokens end
      place = m.alg.next_free(m.self, hole.at, m.tokens)
      if hole.lasting and m.alg.room and m.tokens > 0 then
        pieces[#pieces + 1] = {i, piece_end(m, hole.at, room, m.tokens), m.tokens}
      end
    else
      m.state = m.alg.commit(m.self, m.state, now, m.tokens, t)
      left, place = room, hole.at
    end
    rest[i] = left
    if left > EPSILON then
      if where == nil then where = place elseif place ~= where then agree = false end
    end
  end
  if where ~= nil and agree then add_hole(holes, now, where, rest, hole.lasting) end
  return pieces
end

-- See _latest in holes.py: the limit that set the latest grant knows it exactly.
local function group_latest(members)
  local latest = -math.huge
  for _, m in ipairs(members) do
    local t = m.alg.latest(m.self, m.state)
    if t > latest then latest = t end
  end
  return latest
end

-- See _reach in holes.py: the latest a grant recorded may be due at (`moved`: the
-- moves as moves_of read them, nil for none).
local function group_reach(members, moved)
  local latest = group_latest(members)
  if moved and moved.reach > latest then return moved.reach end
  return latest
end

-- The provider's pace (see pace in holes.py), kept at <holes>:pace as
-- "<interval> <at> <until>"; nil where there is none, or it is over.
local function pace_of(key, now)
  local text = redis.call('GET', key)
  if not text then return nil end
  local interval, at, untl = string.match(text, '^(%S+) (%S+) (%S+)$')
  interval, at, untl = tonumber(interval), tonumber(at), tonumber(untl)
  if not (interval and at and untl) or untl <= now then return nil end
  return {key = key, interval = interval, at = at, untl = untl}
end

local function pace_save(p, now)
  redis.call('SET', p.key, fmt(p.interval) .. ' ' .. fmt(p.at) .. ' ' .. fmt(p.untl), 'PX', idle_ms(p.untl - now))
end

-- See Move in holes.py: the queues moved up, kept at <holes>:moved as
-- "<gen> <reach>" and then ";<gen> <member> <lo> <hi> <d> <until>" per move, oldest
-- first. Read as {gen, reach, list}, without the moves whose grants are all behind
-- and the reach once it is past (see _forget_moves).
local function moves_of(holes, now)
  local out = {gen = 0, reach = -math.huge, list = {}}
  local text = redis.call('GET', holes .. ':moved')
  if not text then return out end
  local gen, reach, rest = string.match(text, '^(%S+) ([^;]+)(.*)$')
  gen, reach = tonumber(gen), tonumber(reach)
  -- A key garbled (by a hand, another program) is read as no moves, as one evicted is:
  -- never an error at every decision until it expires.
  if gen == nil or reach == nil or gen ~= gen or reach ~= reach or gen == math.huge or gen == -math.huge then
    return out
  end
  out.gen, out.reach = gen, reach
  local field = '([^;%s]+)'
  local one = ';' .. field .. ' ' .. field .. ' ' .. field .. ' ' .. field .. ' ' .. field .. ' ' .. field
  for g, j, lo, hi, d, u in string.gmatch(rest, one) do
    local m = {tonumber(g), tonumber(j), tonumber(lo), tonumber(hi), tonumber(d), tonumber(u)}
    local whole = true
    for i = 1, 6 do
      if m[i] == nil or m[i] ~= m[i] then whole = false end
    end
    if whole and m[6] > now then out.list[#out.list + 1] = m end
  end
  if not (out.reach > now) then out.reach = -math.huge end
  return out
end

-- A move's number as the names and the key write it (a whole number).
local function gen_text(gen)
  return string.format('%d', gen)
end

local function moves_save(holes, moved, now)
  local parts, last = {gen_text(moved.gen) .. ' ' .. fmt(moved.reach)}, now
  if moved.reach > last then last = moved.reach end
  for _, m in ipairs(moved.list) do
    parts[#parts + 1] = gen_text(m[1]) .. ' ' .. m[2] .. ' ' .. fmt(m[3]) .. ' ' .. fmt(m[4]) .. ' '
      .. fmt(m[5]) .. ' ' .. fmt(m[6])
    if m[6] > last then last = m[6] end
  end
  redis.call('SET', holes .. ':moved', table.concat(parts, ';'), 'PX', idle_ms(last - now))
end

-- See _moved in holes.py: where a slot of member j named `at` before move gen + 1
-- ends now (less the tolerance).
local function moved_at(moved, j, at, gen)
  for _, m in ipairs(moved.list) do
    if m[1] > gen and m[2] == j and m[3] + EPSILON < at and at <= m[4] + EPSILON then at = at - m[5] end
  end
  return at
end

-- A name's mark of the latest move when it was given ('' for none).
local function gen_mark(moved)
  if moved and moved.gen > 0 then return 'g' .. gen_text(moved.gen) end
  return ''
end

-- charge: the members' tokens taken whatever the budget, at the latest grant any of
-- them recorded if that is still ahead, else now (see charge_all in algorithm.py).
-- The holes are void, the pause kept (see void in holes.py).
local function charge_members(members, holes, now)
  local at = group_latest(members)
  if not (at > now) then at = now end
  commit_all(members, now, at)
  -- See pace_charge in holes.py: the charge takes its place in the provider's pace.
  local p = pace_of(holes .. ':pace', now)
  if p then
    local t = p.at
    if not (t > now) then t = now end
    p.at = t + members[1].tokens * p.interval
    pace_save(p, now)
  end
  local paused = redis.call('ZSCORE', holes, 'pause')
  if redis.call('DEL', holes) == 1 and paused then
    redis.call('ZADD', holes, paused, 'pause')
    expire_after(holes, tonumber(paused) - now)
  end
end

-- See _drop_spent in holes.py: of the holes past their time only a lasting one may still
-- hold room, for a member with `room`; drop the rest, every one of them.
local function drop_spent(members, holes, now)
  local past = redis.call('ZRANGEBYSCORE', holes, '-inf', '(' .. fmt(now - EPSILON), 'WITHSCORES')
  local dropped = false
  for i = 1, #past, 2 do
    if past[i] ~= 'pause' then
      local at = tonumber(past[i + 1])
      local have, keep = hole_tokens(past[i]), false
      local lasting = is_lasting(past[i]) and #have == #members
      for j, m in ipairs(members) do
        if lasting and hole_room(m, at, have[j], now, true) > EPSILON then keep = true end
      end
      if not keep then
        redis.call('ZREM', holes, past[i])
        dropped = true
      end
    end
  end
  return dropped
end

-- See _due in holes.py: the first HOLE_SCAN holes whose time has come, of this
-- group's shape. `found` is a ZRANGE WITHSCORES reply.
local function due_holes(members, now, found)
  local due = {}
  local scanned = 0
  for i = 1, #found, 2 do
    if found[i] ~= 'pause' then
      scanned = scanned + 1
      if scanned > HOLE_SCAN then break end
      local at = tonumber(found[i + 1])
      if at > now + EPSILON then break end
      local have = hole_tokens(found[i])
      if #have == #members then
        due[#due + 1] = {member = found[i], at = at, have = have, lasting = is_lasting(found[i])}
      end
    end
  end
  return due
end

-- See _from_due in holes.py: whether member j takes its tokens from the due holes'
-- room, added up.
local function from_due(m, j, due, now)
  if not m.alg.room then return false end
  local sum = 0
  for _, h in ipairs(due) do sum = sum + hole_room(m, h.at, h.have[j], now, h.lasting) end
  return m.tokens <= sum + EPSILON
end

-- See _pooled in holes.py: whether the request can go now on the room of the holes
-- already due, added up, each member from there (slotted) or by itself.
local function pooled(members, plans, due, now)
  if #due == 0 then return false end
  local taken = false
  for j, m in ipairs(members) do
    if m.tokens > 0 then
      if from_due(m, j, due, now) then
        taken = true
      elseif plans[j][1] - now > EPSILON or plans[j][2] > now + EPSILON then
        return false
      end
    end
  end
  return taken
end

-- See _take_pooled in holes.py: the earliest holes' room first, the rest of each kept,
-- cut to what is ahead.
local function take_pooled(members, holes, now, due)
  local need, pieces = {}, {}
  for j, m in ipairs(members) do
    need[j] = 0.0
    if m.tokens > 0 then
      if from_due(m, j, due, now) then
        need[j] = m.tokens
      else
        m.state = m.alg.commit(m.self, m.state, now, m.tokens, now)
      end
    end
  end
  for _, h in ipairs(due) do
    local rest, left_any = {}, false
    for j, m in ipairs(members) do
      local room = hole_room(m, h.at, h.have[j], now, h.lasting)
      local take = room
      if need[j] < room then take = need[j] end
      need[j] = need[j] - take
      if take > EPSILON and h.lasting then pieces[#pieces + 1] = {j, piece_end(m, h.at, room, take), take} end
      local left = room - take
      if left > EPSILON then left_any = true else left = 0.0 end
      rest[j] = left
    end
    redis.call('ZREM', holes, h.member)
    if left_any then redis.call('ZADD', holes, fmt(h.at), hole_member(h.at, rest, h.lasting)) end
  end
  return pieces
end

-- See pace in holes.py: at most `remaining` (one or more) before `untl`, spread
-- evenly, the first an interval from now; a pace still in force keeps its next slot.
local function pace(holes, now, remaining, untl)
  local interval = (untl - now) / remaining
  local key = holes .. ':pace'
  local old = pace_of(key, now)
  local at = now + interval
  if old then at = old.at end
  pace_save({key = key, interval = interval, at = at, untl = untl}, now)
end

-- See gate in holes.py: a provider's pause for members whose states hold no time (an
-- allowance), kept as a pace whose next slot is its end; a pace in force keeps its
-- interval and goes on from the later of its next slot and the pause's end.
local function gate(holes, now, untl)
  local key = holes .. ':pace'
  local old = pace_of(key, now)
  if old then
    if untl > old.at then old.at = untl end
    if untl > old.untl then old.untl = untl end
    pace_save(old, now)
  else
    pace_save({key = key, interval = 0.0, at = untl, untl = untl}, now)
  end
end

-- See pace_wait in holes.py: the wait the provider's pace alone puts on a request now.
local function pace_wait(holes, now)
  local p = pace_of(holes .. ':pace', now)
  if not p or not (p.at > now + EPSILON) then return 0.0 end
  local gate = p.untl
  if p.at < gate then gate = p.at end
  local wait = gate - now
  if wait > EPSILON then return wait end
  return 0.0
end

-- See LEVEL_MOST in algorithm.py: what a limit that never limits is said to hold.
local LEVEL_MOST = 1e9

-- The largest request a member could ever be granted (Algorithm.most).
local function member_most(m)
  local s = m.self
  if s.most then return s.most end
  if s.limit then return s.limit end
  if s.rate == math.huge then return math.huge end
  return s.capacity
end

-- See _bisected in algorithm.py: the largest whole request a member without `level`
-- grants at once now, by bisection on its plan, up to LEVEL_MOST (past it doubles are
-- more than one apart and the midpoint would round to an end).
local function bisected(m, now, most)
  if most > LEVEL_MOST then most = LEVEL_MOST end
  local low, high = 0.0, math.floor(most + EPSILON)
  local kept = m.tokens
  local function goes(t)
    m.tokens = t
    local admit_at, at = plan_all({m}, now)
    return admit_at - now <= EPSILON and at - now <= EPSILON
  end
  if high < 1.0 or goes(high) then
    m.tokens = kept
    return high
  end
  while high - low > 1.0 do
    local mid = math.floor((low + high) / 2.0)
    if goes(mid) then low = mid else high = mid end
  end
  m.tokens = kept
  return low
end

-- What is left of the members now, read only: the whole tokens that could go at once
-- as requests of one token one after another, and the seconds until one more could
-- (0: never at once). Mirrors level_all in ratelimit/_algorithms/algorithm.py (each
-- algorithm's `level`, what its plan grants at once) and level in holes.py (a pace
-- in force claims none); `holes` nil where nothing can be beside the state (a fast
-- path's).
local function level_members(members, holes, now)
  local most, left = LEVEL_MOST, LEVEL_MOST
  for _, m in ipairs(members) do
    local top = member_most(m)
    if m.alg.bursts == false and top > 1.0 then top = 1.0 end
    if top < most then most = top end
    local here
    if m.alg.level then here = m.alg.level(m.self, m.state, now) else here = bisected(m, now, top) end
    if here < left then left = here end
  end
  local high = math.floor(most + EPSILON)
  if high < 1.0 then return 0.0, 0.0 end
  local whole = math.floor(left + EPSILON)
  local more = 0.0
  if whole >= high then
    whole = high
  else
    if whole < 0.0 then whole = 0.0 end
    local kept = {}
    for j, m in ipairs(members) do
      kept[j] = m.tokens
      m.tokens = whole + 1.0
    end
    local admit_at, at = plan_all(members, now)
    for j, m in ipairs(members) do m.tokens = kept[j] end
    if admit_at > at then at = admit_at end
    more = at - now
    if not (more > 0.0) then more = 0.0 end
  end
  if holes and pace_of(holes .. ':pace', now) then
    local wait = pace_wait(holes, now)
    if whole >= 1.0 then more = 0.0 end
    whole = 0.0
    if wait > more then more = wait end
  end
  return whole, more
end

-- A reserve's reply with the level after it (see level_members): the tokens left and
-- the microseconds until one more, rounded up (a whole number: no string.format),
-- after {signed_wait, at, name} as `reserve` replies them; a grant at once with no
-- name replied as its time alone, as at_once_reply writes it, where `t` or `arg` is
-- given (the single driver's).
local function leveled_reply(members, holes, now, wait, name, t, arg)
  local left, more = level_members(members, holes, now)
  if (t or arg) and wait == 0 and name == '' then
    return {at_once_reply(t, arg), fmt(left), fmt(math.ceil(more * 1000000))}
  end
  return {fmt_wait(wait), fmt(now + wait), name, fmt(left), fmt(math.ceil(more * 1000000))}
end

-- See _put in holes.py: the freed end of a slot that ends at `place` + tolerance, a
-- lasting hole where some of it is still ahead; only one hole a moment, made once (a
-- grant named twice, or beside another hole of its moment, could free a slot twice).
local function put_hole(members, holes, now, place, hole)
  local horizon = nil
  for j, m in ipairs(members) do
    if hole[j] > 0 and hole_room(m, place, hole[j], now, true) > EPSILON then
      local far = place + m.self.tolerance
      if horizon == nil or far > horizon then horizon = far end
    end
  end
  if horizon == nil then return end
  local near = redis.call('ZRANGEBYSCORE', holes, fmt(place - EPSILON), fmt(place + EPSILON), 'LIMIT', 0, 2)
  if #near == 0 or (#near == 1 and near[1] == 'pause') then
    redis.call('ZADD', holes, fmt(place), hole_member(place, hole, true))
    hold(holes, horizon - now)
  end
end

local MOVES = 16

-- See _moving in holes.py: how the queue would move up into the lasting holes: {j, steps,
-- state, reach} (j the one slotted member every lasting hole holds tokens of, each step
-- a hole the queue moves into, the latest first, with the tokens it takes of it), or
-- nil where nothing moves. `moved`: moves_of's; `paced`: the pace in force, if any.
local function moving(members, holes, now, moved, paced)
  local all = redis.call('ZRANGE', holes, 0, -1, 'WITHSCORES')
  local lasting, j = {}, nil
  for k = 1, #all, 2 do
    if all[k] ~= 'pause' and is_lasting(all[k]) then
      local have = hole_tokens(all[k])
      if #have == #members then
        for i, n in ipairs(have) do
          if n > 0 then
            if j == nil then j = i elseif i ~= j then return nil end  -- holes of several limits
          end
        end
        lasting[#lasting + 1] = {member = all[k], at = tonumber(all[k + 1]), have = have}
      end
    end
  end
  if j == nil or not members[j].alg.room then return nil end
  local m = members[j]
  local reach = group_reach(members, moved)
  if paced and paced.untl > reach then reach = paced.untl end
  if now > reach then reach = now end
  local state, steps, count = m.state, {}, #moved.list
  for k = #lasting, 1, -1 do
    if count >= MOVES then break end
    local h = lasting[k]
    if m.alg.latest(m.self, state) > h.at + EPSILON then
      local room = m.alg.room(m.self, h.at, h.have[j], now)
      local slack = m.alg.room(m.self, h.at, math.huge, reach)
      local give = slack
      if room < slack then give = room end
      if give > EPSILON then
        state = m.alg.cancel(m.self, state, now, give, m.alg.latest(m.self, state))
        steps[#steps + 1] = {hole = h, give = give}
        count = count + 1
      end
    end
  end
  if #steps == 0 then return nil end
  return {j = j, steps = steps, state = state, reach = reach}
end

-- See _move_up in holes.py: move the queue up as `plan` (moving's) says: each hole's
-- line behind it moves up by what the hole gives, the lasting holes there with it, what
-- is left of the hole stays one where it now ends, and each move is recorded.
local function move_up(members, holes, now, plan, moved)
  local j = plan.j
  local m = members[j]
  for _, step in ipairs(plan.steps) do
    local h = step.hole
    local before = m.state
    local hi = m.alg.latest(m.self, before)
    local room = m.alg.room(m.self, h.at, h.have[j], now)
    m.state = m.alg.cancel(m.self, before, now, step.give, hi)
    local d = hi - m.alg.latest(m.self, m.state)
    redis.call('ZREM', holes, h.member)
    local after = redis.call('ZRANGEBYSCORE', holes, '(' .. fmt(h.at + EPSILON), '+inf', 'WITHSCORES')
    for k = 1, #after, 2 do
      if after[k] ~= 'pause' and is_lasting(after[k]) then
        local at = tonumber(after[k + 1]) - d
        redis.call('ZREM', holes, after[k])
        redis.call('ZADD', holes, fmt(at), hole_member(at, hole_tokens(after[k]), true))
      end
    end
    local left = {}
    for k = 1, #members do left[k] = 0.0 end
    left[j] = room - step.give
    put_hole(members, holes, now, h.at - d, left)
    local untl = m.alg.idle_until(m.self, before)
    if plan.reach > untl then untl = plan.reach end
    local gen = math.floor(now * 1e6)
    if moved.gen + 1 > gen then gen = moved.gen + 1 end
    moved.gen = gen
    moved.list[#moved.list + 1] = {gen, j, h.at, hi, d, untl}
    if plan.reach > moved.reach then moved.reach = plan.reach end
  end
  moves_save(holes, moved, now)
end

-- See plan in holes.py: the plan of the members with the earliest of the first
-- HOLE_SCAN holes the request can take, which wins when it comes before the
-- algorithms' own plan (or they would not admit it now). Returns admit_at, at, the
-- hole to take (nil: the algorithms' own plan) and the provider's pace (nil: none).
-- `none`: the caller knows there are no holes nor pace.
local function plan_members(members, holes, now, none)
  -- The common path has no holes at all: EXISTS is the cheapest way to learn it.
  -- Read by rank, then drop spent holes (they sort
  -- first) only if there are any past.
  -- One entry more than the scan: the pause, if any, is among them and is no hole.
  if none then
    local admit_at, at = plan_all(members, now)
    return admit_at, at, nil, nil, nil
  end
  local key = holes .. ':pace'
  local present = redis.call('EXISTS', holes, key, holes .. ':moved')
  if present == 0 then
    local admit_at, at = plan_all(members, now)
    return admit_at, at, nil, nil, nil
  end
  local moved = moves_of(holes, now)
  local paced = pace_of(key, now)
  if paced and paced.at > now + EPSILON then
    -- The provider's next slot is ahead: no grant before it, nor a hole's.
    local admit_at, at = plan_all(members, now)
    local gate = paced.untl
    if paced.at < gate then gate = paced.at end
    if gate > at then at = gate end
    return admit_at, at, nil, paced, moved
  end
  for _, m in ipairs(members) do
    if m.alg.room and m.alg.latest(m.self, m.state) == -math.huge then
      -- See plan in holes.py: a slotted limit's state is gone (an evicted key), and
      -- its holes and pause with it.
      redis.call('DEL', holes)
      local admit_at, at = plan_all(members, now)
      return admit_at, at, nil, paced, moved
    end
  end
  local found = redis.call('ZRANGE', holes, 0, HOLE_SCAN, 'WITHSCORES')
  if #found > 0 and tonumber(found[2]) < now - EPSILON and drop_spent(members, holes, now) then
    found = redis.call('ZRANGE', holes, 0, HOLE_SCAN, 'WITHSCORES')
  end
  local plans = {}
  local admit_at, at = now, now
  for i, m in ipairs(members) do
    local admit, grant = m.alg.plan(m.self, m.state, now, m.tokens)
    plans[i] = {admit, grant}
    if admit > admit_at then admit_at = admit end
    if grant > at then at = grant end
  end
  local due = due_holes(members, now, found)
  if pooled(members, plans, due, now) then
    local latest = group_reach(members, moved)
    local void = false
    for _, h in ipairs(due) do
      if h.at > latest + EPSILON then void = true end
    end
    if void then
      -- The state was lost, and the holes with it (see below).
      redis.call('DEL', holes)
      found = {}
    elseif admit_at - now > EPSILON or at > now + EPSILON then
      return now, now, {pooled = due}, paced, moved
    end
  end
  local hole = nil
  local scanned = 0
  for i = 1, #found, 2 do
    if found[i] ~= 'pause' then
      scanned = scanned + 1
      if scanned > HOLE_SCAN then break end
      local have = hole_tokens(found[i])
      local hole_at = tonumber(found[i + 1])
      local lasting = is_lasting(found[i])
      local t = hole_when(members, plans, now, hole_at, have, lasting)
      if t ~= nil then
        hole = {member = found[i], at = hole_at, have = have, t = t, lasting = lasting}
        break
      end
    end
  end
  if hole ~= nil and hole.at > group_reach(members, moved) + EPSILON then
    -- Every hole is before a grant still reserved: not so, the state was evicted,
    -- and the holes with it are void. (The pause goes too: it was the state's.)
    redis.call('DEL', holes)
    hole = nil
    found = {}
  end
  if hole ~= nil and (admit_at - now > EPSILON or hole.t < at) then
    return now, hole.t, hole, paced, moved
  end
  local any = false
  for i = 1, #found, 2 do
    if found[i] ~= 'pause' then any = true end
  end
  if at > now + EPSILON and any then
    -- Larger than the holes: the queue moved up into them (move_up) may let it go
    -- sooner, at the line's end.
    local plan = moving(members, holes, now, moved, paced)
    if plan then
      local admit_moved, at_moved = now, now
      for i, m in ipairs(members) do
        local state = m.state
        if i == plan.j then state = plan.state end
        local admit, grant = m.alg.plan(m.self, state, now, m.tokens)
        if admit > admit_moved then admit_moved = admit end
        if grant > at_moved then at_moved = grant end
      end
      if at_moved < at - EPSILON and admit_moved <= admit_at + EPSILON then
        return admit_moved, at_moved, {move = plan}, paced, moved
      end
    end
  end
  return admit_at, at, nil, paced, moved
end

-- See exact in holes.py: the name of a grant just recorded at `at`, as the members
-- whose slot it ends exactly ('1') or not ('0'); '' when none does.
local function exact_name(members, at)
  -- (One limiter, the common case: no table.)
  if #members == 1 then
    local m = members[1]
    if m.alg.room and math.abs(m.alg.latest(m.self, m.state) - at) <= EPSILON then return '1' end
    return ''
  end
  local flags, any = {}, false
  for i, m in ipairs(members) do
    if m.alg.room and math.abs(m.alg.latest(m.self, m.state) - at) <= EPSILON then
      flags[i] = '1'
      any = true
    else
      flags[i] = '0'
    end
  end
  if any then return table.concat(flags) end
  return ''
end

-- See at_once in holes.py: the name of a grant just recorded at once, as the pieces
-- it ends the slotted members' lines with (their latest), '' where none took any.
local function at_once_name(members)
  local parts = {}
  for j, m in ipairs(members) do
    if m.alg.room and m.tokens > 0 then
      parts[#parts + 1] = j .. ':' .. fmt(m.alg.latest(m.self, m.state)) .. ':' .. fmt(m.tokens)
    end
  end
  if #parts == 0 then return '' end
  return 'P' .. table.concat(parts, ';')
end

-- See settle in holes.py: decide what plan_members planned and, if granted, record
-- it. Returns the signed wait, whether the members' states changed, and the grant's
-- name for a refund (exact_name for a grant that waited; with `names`, at_once_name
-- for one that went at once). `paced`: the pace plan_members found in force, if any.
local function settle_members(members, holes, now, admit_at, at, hole, max_wait, paced, names, moved)
  local wait = decide(admit_at, at, now, max_wait)
  if wait < 0 then return wait, false, '' end
  if paced and now + wait < paced.untl then
    -- (A pace counts in the first member's tokens, as holes.settle does.)
    local t = now + wait
    if paced.at > t then t = paced.at end
    paced.at = t + members[1].tokens * paced.interval
    pace_save(paced, now)
  end
  local name
  if hole ~= nil and not hole.move then
    if hole.pooled then
      name = pieces_name(take_pooled(members, holes, now, hole.pooled))
    else
      name = pieces_name(take_hole(members, holes, now, hole, at))
    end
    -- See settle in holes.py: a grant from a hole sets the reach.
    if moved and now + wait > moved.reach then
      moved.reach = now + wait
      moves_save(holes, moved, now)
    end
  else
    if hole ~= nil then move_up(members, holes, now, hole.move, moved) end
    commit_all(members, now, at)
    if wait > EPSILON then name = exact_name(members, now + wait)
    elseif names then name = at_once_name(members)
    else return wait, true, '' end
  end
  -- (A name says which moves came after it: see GrantTime in holes.py.)
  if name ~= '' and moved then name = name .. gen_mark(moved) end
  return wait, true, name
end

local function reserve_members(members, holes, now, max_wait, none, names)
  local admit_at, at, hole, paced, moved = plan_members(members, holes, now, none)
  return settle_members(members, holes, now, admit_at, at, hole, max_wait, paced, names, moved)
end

local function tail_all(members, tokens, at, moved)
  -- See _tail in holes.py: behind a grant a move left due later, it is not the last.
  if at < moved.reach - EPSILON then return false end
  for i, m in ipairs(members) do
    if not m.alg.tail(m.self, m.state, tokens[i], at) then return false end
  end
  return true
end

local function cancel_all(members, now, tokens, at)
  for i, m in ipairs(members) do
    m.state = m.alg.cancel(m.self, m.state, now, tokens[i], at)
  end
end

-- A provider's pause until `untl`: forget the holes before it, and take no more
-- until then (see pause in holes.py).
local function pause(holes, now, untl)
  redis.call('ZREMRANGEBYSCORE', holes, '-inf', '(' .. fmt(untl))
  local before = tonumber(redis.call('ZSCORE', holes, 'pause'))
  if before == nil or untl > before then redis.call('ZADD', holes, fmt(untl), 'pause') end
  local last = redis.call('ZRANGE', holes, -1, -1, 'WITHSCORES')
  hold(holes, tonumber(last[2]) - now)
end

-- The latest real hole (the pause, if any, is not one), or nil.
local function last_hole(holes)
  local top = redis.call('ZREVRANGE', holes, 0, 1, 'WITHSCORES')
  for i = 1, #top, 2 do
    if top[i] ~= 'pause' then return top[i], tonumber(top[i + 1]) end
  end
  return nil
end

-- In a composite a token bucket does not see a grant another limit delayed past its
-- own plan; the limit that set it does. See _reserved_after.
local function reserved_after(members, now, when, moved)
  local latest = group_reach(members, moved)
  return latest > now and when < latest - EPSILON
end

-- See forget_late in holes.py: drop the holes whose time has passed.
local function forget_late(holes, now)
  local first = redis.call('ZRANGE', holes, 0, 1, 'WITHSCORES')
  if #first > 0 and tonumber(first[2]) < now - EPSILON then
    -- (A pause that has ended goes with them: it holds nothing back any more.)
    redis.call('ZREMRANGEBYSCORE', holes, '-inf', '(' .. fmt(now - EPSILON))
  end
end

-- See restricted in holes.py: a provider's word on what is left until `untl`; until
-- then a named refund leaves no hole (kept in <holes>:restricted, read by refunds only).
local function restricted(holes, now, untl)
  forget_late(holes, now)
  local mark = holes .. ':restricted'
  local before = tonumber(redis.call('GET', mark))
  if before == nil or untl > before then
    redis.call('SET', mark, fmt(untl), 'PX', idle_ms(untl - now))
  end
end

-- See _named in holes.py: where a named grant's tokens sit, member by member, from
-- its time and its name ('0'/'1' per member, or the pieces "P<member>:<at>:<tokens>;...").
local function named_pieces(members, at, exact, moved)
  local out = {}
  for j = 1, #members do out[j] = {} end
  if exact == nil or at == nil then return out end
  -- "g<number>" at the end: the latest move when it was given (see moved_at).
  local gen = 0
  local body, mark = string.match(exact, '^([^g]*)g(%d+)$')
  if body then exact, gen = body, tonumber(mark) end
  if string.sub(exact, 1, 1) == 'P' then
    for j, p, n in string.gmatch(string.sub(exact, 2), '(%d+):([^:;]+):([^:;]+)') do
      local k = tonumber(j)
      if out[k] then table.insert(out[k], {moved_at(moved, k, tonumber(p), gen), tonumber(n)}) end
    end
    return out
  end
  for j = 1, #members do
    if string.sub(exact, j, j) == '1' then table.insert(out[j], {moved_at(moved, j, at, gen), math.huge}) end
  end
  return out
end

-- See _refund in holes.py: unnamed, tokens of a grant whose time has come go back into
-- the states where nothing is reserved after it, and otherwise free nothing; named,
-- a member rolls back what sits at the end of its line, and what sits elsewhere and
-- is still ahead becomes a hole at its place.
local function refund_members(members, holes, now, tokens, at, exact, paused, moved)
  local when = at or now
  if now < paused then return end
  if exact ~= nil then
    local untl = tonumber(redis.call('GET', holes .. ':restricted'))
    if untl ~= nil and now < untl then exact = nil end
  end
  local named = named_pieces(members, at, exact, moved)
  local queued = (#members > 1 or moved.reach > now) and reserved_after(members, now, when, moved)
  local freed, places = {}, {}
  local lowered = false
  for j, m in ipairs(members) do
    local n = tokens[j]
    if n > 0 then
      if #named[j] > 0 then
        local pieces = named[j]
        -- The latest pieces first: most of them is still ahead.
        table.sort(pieces, function(a, b)
          if a[1] ~= b[1] then return a[1] > b[1] end
          return a[2] > b[2]
        end)
        local left = n
        for _, piece in ipairs(pieces) do
          local give = piece[2]
          if left < give then give = left end
          left = left - give
          if give > EPSILON then
            if m.alg.tail(m.self, m.state, give, piece[1]) then
              m.state = m.alg.cancel(m.self, m.state, now, give, piece[1])
            else
              if freed[piece[1]] == nil then
                local zeros = {}
                for k = 1, #members do zeros[k] = 0.0 end
                freed[piece[1]] = zeros
                places[#places + 1] = piece[1]
              end
              freed[piece[1]][j] = freed[piece[1]][j] + give
            end
          end
        end
      elseif not queued then
        local before = m.state
        m.state = m.alg.refund(m.self, m.state, now, n, when)
        if m.alg.room and m.state ~= before then lowered = true end
      end
    end
  end
  if lowered then forget_late(holes, now) end
  table.sort(places)
  for _, place in ipairs(places) do put_hole(members, holes, now, place, freed[place]) end
end

-- give back: a refund once the grant's time has come (`at` nil or past; `exact` names
-- the grant, nil for an unnamed refund); otherwise withdraw the reservation: roll it
-- back if it is the last one (and the holes that are then at the end), or leave a hole.
local function give_back_members(members, holes, now, tokens, at, exact)
  local paused = tonumber(redis.call('ZSCORE', holes, 'pause')) or -math.huge
  local moved = moves_of(holes, now)
  if at == nil or at <= now + EPSILON then
    refund_members(members, holes, now, tokens, at, exact, paused, moved)
    return
  end
  if at < paused then return end  -- its place is inside a pause: lost
  if not tail_all(members, tokens, at, moved) then
    add_hole(holes, now, at, tokens)
    return
  end
  cancel_all(members, now, tokens, at)
  while true do
    local member, hole_at = last_hole(holes)
    if member == nil then break end
    if hole_at < now - EPSILON then
      -- sorted: every hole is past (and so is any pause before them)
      redis.call('ZREMRANGEBYSCORE', holes, '-inf', fmt(hole_at))
      break
    end
    local left = hole_tokens(member)
    if not tail_all(members, left, hole_at, moved) then break end
    redis.call('ZREM', holes, member)
    cancel_all(members, now, left, hole_at)
  end
  if paused > now then
    -- See give_back in holes.py: rolled back, the state must hold the pause itself.
    for _, m in ipairs(members) do
      m.state = m.alg.restrict(m.self, m.state, now, 0.0, paused)
    end
  end
end

-- A composite's member's change at run time (RedisBackend.set_limit(name, member=i)):
-- one hash per composite, ratelimit:{<name>}:members:config, with fields "<i>:rate",
-- "<i>:burst" and "<i>:until" (i counted from 0, as the code counts its limits) written
-- by the group's 'member' op, which knows none of the members' code values; and
-- "<i>:was", the change the member's state was last moved to ("<rate> <burst>", '-'
-- for the code's value; none: the code's limit). A call finds the change here, moves the
-- state where `was` differs (the tokens owed keep their count, as `switch` in
-- _single.lua) and decides on the limit in force; a change whose `until` has passed
-- ends at the first call that writes, which moves the state back. `writes`: false for
-- the ops that read only, which decide on the state as it would be moved and write
-- nothing. Sets m.most and m.top on each changed member for `member_too_big`.
local function limit_text(rate, burst, rate_text, burst_text)
  local r, b = '-', '-'
  if rate then r = rate_text end
  if burst then b = burst_text end
  return r .. ' ' .. b
end

-- The hash of a composite's members' changes, ratelimit:{<name>}:members:config, from
-- any key of its hash tag (kept from the last call: the same composite, most often).
local members_config_key, members_config_of = nil, nil
local function members_config(key)
  if key ~= members_config_key then
    members_config_of = string.match(key, '^(ratelimit:{.-}:)') .. 'members:config'
    members_config_key = key
  end
  return members_config_of
end

-- The hash is kept as long as a change in it lasts: with a change until reset, for
-- good; with only changes for a while, a day past the last one's end (as a single
-- limiter's: the first call after an end moves the state back).
local function keep_member_changes(changes, now)
  local got = redis.call('HGETALL', changes)
  local last, timed = nil, {}
  for k = 1, #got, 2 do
    local member, field = string.match(got[k], '^(%d+):(%a+)$')
    if field == 'until' then
      local untl = tonumber(got[k + 1])
      if untl then
        timed[member] = true
        if last == nil or untl > last then last = untl end
      end
    end
  end
  for k = 1, #got, 2 do
    local member, field = string.match(got[k], '^(%d+):(%a+)$')
    if (field == 'rate' or field == 'burst') and not timed[member] then
      redis.call('PERSIST', changes)
      return
    end
  end
  if last then expire_after(changes, math.max(last - now, 0) + 86400) end
end

local function follow_member_changes(members, keys, changes, now, writes)
  local got = redis.call('HGETALL', changes)
  if #got == 0 then return end
  local f = {}
  for k = 1, #got, 2 do f[got[k]] = got[k + 1] end
  for i, m in ipairs(members) do
    local p = (i - 1) .. ':'
    local rate, burst = valid(f[p .. 'rate']), valid(f[p .. 'burst'])
    local to, to_text = nil, nil
    if rate or burst then
      local untl = tonumber(f[p .. 'until'])
      if untl and now >= untl then
        if writes then redis.call('HDEL', changes, p .. 'rate', p .. 'burst', p .. 'until') end
      else
        to = {rate = rate, burst = burst}
        to_text = limit_text(rate, burst, f[p .. 'rate'], f[p .. 'burst'])
      end
    end
    local was = f[p .. 'was']
    if (to or was) and m.alg.configured then
      local code1, code2 = m.params[1], m.params[2]
      local function effective(change)
        if change == nil then return code1, code2 end
        return m.alg.configured(code1, code2, 0, change.rate, change.burst)
      end
      local after = m.self
      if to then after = m.alg.new(keys[i], effective(to)) end
      if was ~= to_text then
        local from = nil
        if was then
          local r, b = string.match(was, '^(%S+) (%S+)$')
          r, b = valid(r), valid(b)
          if r or b then from = {rate = r, burst = b} end
        end
        local before = m.alg.new(keys[i], effective(from))
        local state = m.alg.load(before)
        if m.alg.rescale then state = m.alg.rescale(before, after, state, now) end
        if writes then
          m.alg.save(after, state, now)
          if to_text then
            redis.call('HSET', changes, p .. 'was', to_text)
          else
            redis.call('HDEL', changes, p .. 'was')
          end
          state = m.alg.load(after)
        end
        m.state = state
      elseif to then
        m.state = m.alg.load(after)
      end
      m.self = after
      if to then
        local p1, p2 = effective(to)
        m.most, m.top = p1, p2
      end
    end
  end
end

-- Whether a changed member could never hold its tokens (see `too_big` in _single.lua):
-- the request is refused for ever.
local function member_too_big(members)
  for _, m in ipairs(members) do
    if m.most and m.tokens > m.most + EPSILON and m.top ~= math.huge then return true end
  end
  return false
end
