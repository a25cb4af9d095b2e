-- ratelimit: exact sliding-window log. Mirrors ratelimit/_algorithms/sliding_window.py (WindowLog),
-- operation for operation.
--
-- State, two keys sharing the limiter's hash tag:
--   <base>        sorted set, one member per grant time: score = the time (future-dated
--                 for reservations), member = "<sum>|<weight>", where sum is the running
--                 sum of the weights up to and including this entry. The tokens counted
--                 are the newest sum less the base (the oldest entry's sum less its
--                 weight); the entry where enough has aged out is found by a search on
--                 the sums: O(log n) calls, each O(log n), whatever the limit.
--   <base>:caps   string "<until> <left> ...": restrictions, at most `left` more tokens
--                 before `until` (see WindowLog.restrict). Absent almost always.
-- Params: limit (tokens per window), window (seconds).
--
-- Losing a key (an evicting maxmemory-policy, a DEL) only loses grants or caps: the
-- set holds everything the count needs, so no second key can disagree with it. A set
-- whose oldest or newest member is not "<sum>|<weight>" (hand-edited, or written by an
-- older version of this script) is dropped whole rather than misread.

local sliding_window = {}

do
  local REBASE = 4294967296.0  -- 2^32, as REBASE in Python
  local REBASE_SPAN = 1024.0
  local MAX_CAPS = 8

  -- See WindowLog.configured: the window keeps its length; a burst does not apply.
  function sliding_window.configured(limit, window, slack, new_rate, burst)
    if new_rate == nil then return limit, window end
    return new_rate * (window - slack), window
  end

  -- See WindowLog.guarded: each grant counts `seconds` longer.
  function sliding_window.guarded(limit, window, seconds)
    return limit, window + seconds
  end

  -- The last one made, cached between calls of the function library (a table and a
  -- key's name less at each decision of a hot window): it is never written once made.
  local made_key, made_limit, made_window, made = nil, nil, nil, nil

  function sliding_window.new(base, limit, window)
    if base == made_key and limit == made_limit and window == made_window then return made end
    made = {key = base, caps = base .. ':caps', limit = limit, window = window}
    made_key, made_limit, made_window = base, limit, window
    return made
  end

  -- The oldest and the newest entry are read by nearly every step of a decision
  -- (plan, commit, save, the fleet's slack: six ZRANGEs). So each
  -- is read once a call and kept in the state, `first` and `last` (an entry, false
  -- for none, nil not known), until the set is written: every write below forgets
  -- them, or sets them to what it wrote where that is certain.
  local function written(state)
    state.first, state.last, state.oldest = nil, nil, nil
  end

  -- {time, sum, weight, member} of a ZRANGE WITHSCORES reply of one entry, or nil:
  -- none. A member not of ours drops the set (see the top of this file), which then
  -- reads as empty: found where it is read, at no cost to a set without one.
  local function parsed(self, state, got)
    if #got == 0 then return nil end
    local s, w = string.match(got[1], '^([^|]+)|(.+)$')
    s, w = tonumber(s), tonumber(w)
    if s == nil or w == nil then
      redis.call('DEL', self.key, self.key .. ':meta')
      state.first, state.last, state.oldest = false, false, nil
      return nil
    end
    return {tonumber(got[2]), s, w, got[1]}
  end

  -- The entry at `rank` (negative from the newest), or nil: none.
  local function entry(self, state, rank)
    return parsed(self, state, redis.call('ZRANGE', self.key, rank, rank, 'WITHSCORES'))
  end

  -- The oldest entry (rank 0) or the newest (-1), or nil, read once (see `written`).
  local function edge(self, state, rank)
    local known
    if rank == 0 then known = state.first else known = state.last end
    if known ~= nil then return known or nil end
    local got
    if rank == 0 and state.oldest then
      got, state.oldest = state.oldest, nil  -- read by prune, nothing written since
    else
      got = redis.call('ZRANGE', self.key, rank, rank, 'WITHSCORES')
    end
    local found = parsed(self, state, got)
    -- (A member not of ours has dropped the set, and left both false.)
    if found or #got == 0 then
      if rank == 0 then state.first = found or false else state.last = found or false end
    end
    return found
  end

  local function sum_at(self, rank)
    local got = redis.call('ZRANGE', self.key, rank, rank)
    return tonumber(string.match(got[1] or '', '^([^|]+)|'))
  end

  local function member(s, w)
    return fmt(s) .. '|' .. fmt(w)
  end

  -- The member the checked fast path added last, and its numbers, cached between calls of the
  -- function library: a busy window's newest entry is, at nearly every decision, the
  -- one its decision before added (a member's numbers are a pure function of its text).
  local wrote_member, wrote_sum, wrote_weight = nil, nil, nil

  -- The sum and weight of the newest entry's member (nil where it is not ours).
  local function parsed_newest(text)
    if text == wrote_member then return wrote_sum, wrote_weight end
    local s, w = string.match(text, '^([^|]+)|(.+)$')
    return tonumber(s), tonumber(w)
  end

  -- The caps' key, which the driver asks after with its EXISTS (see _single.lua).
  sliding_window.beside = ':caps'

  -- `known`: false where the driver found no caps key (nothing to read); a table
  -- {last, dirty} where the checked fast path found no caps and read the newest entry (after
  -- its prune, if it made one: then dirty); the oldest is read where first needed.
  function sliding_window.load(self, known)
    local caps = {}
    if known == false then return {caps = caps} end
    if type(known) == 'table' then
      return {caps = caps, first = known.first, last = known.last, dirty = known.dirty or nil}
    end
    local raw = redis.call('GET', self.caps)
    if raw then
      local xs = {}
      for x in string.gmatch(raw, '%S+') do xs[#xs + 1] = tonumber(x) end
      for i = 1, #xs - 1, 2 do
        if xs[i] ~= nil and xs[i + 1] ~= nil then caps[#caps + 1] = {xs[i], xs[i + 1]} end
      end
      table.sort(caps, function(a, b)
        if a[1] ~= b[1] then return a[1] < b[1] end
        return a[2] < b[2]
      end)
    end
    return {caps = caps}
  end

  -- Only a write when there is something to forget: a script's first write is
  -- where a server at maxmemory refuses it (OOM), and that must be the grant's.
  -- (Unparsed: a member not of ours that has aged out goes with the rest; parsed
  -- and kept for `edge` when nothing goes.)
  local function prune(self, state, cutoff)
    local first = state.first
    if first == nil then
      local oldest = redis.call('ZRANGE', self.key, 0, 0, 'WITHSCORES')
      if #oldest == 0 then
        state.first, state.last = false, false
        return
      end
      if tonumber(oldest[2]) > cutoff then
        state.oldest = oldest
        return
      end
    elseif first == false or first[1] > cutoff then
      return
    end
    redis.call('ZREMRANGEBYSCORE', self.key, '-inf', fmt(cutoff))
    written(state)
    state.dirty = true
  end

  local function prune_caps(state, now)
    local caps = state.caps
    if #caps == 0 or caps[1][1] > now then return end
    local kept = {}
    for _, cap in ipairs(caps) do
      if cap[1] > now then kept[#kept + 1] = cap end
    end
    state.caps = kept
    state.caps_dirty = true
  end

  -- The first rank whose sum reaches `target`, given that the newest (rank n - 1,
  -- sum `above`) does and the base `below` does not. Interpolation first: with equal
  -- weights it lands on the answer at once; a step that does not halve the range is
  -- followed by a bisection, which bounds the calls at twice log2(n).
  local function search(self, n, below, above, target)
    local lo, hi = 0, n - 1
    local bisect = false
    while lo < hi do
      local width = hi - lo
      local rank
      if bisect then
        rank = lo + math.floor(width / 2)
      else
        rank = lo + math.floor((target - below) / (above - below) * (width + 1))
        if rank > hi - 1 then rank = hi - 1 end
        if rank < lo then rank = lo end
      end
      local s = sum_at(self, rank)
      if s == nil then return nil end
      if s >= target then hi, above = rank, s else lo, below = rank + 1, s end
      bisect = not bisect and 2 * (hi - lo) > width
    end
    return lo
  end

  local function capped(caps, at, tokens)
    for _, cap in ipairs(caps) do
      if at < cap[1] and tokens > cap[2] + EPSILON then at = cap[1] end
    end
    return at
  end

  function sliding_window.plan(self, state, now, tokens)
    prune_caps(state, now)
    prune(self, state, now - self.window)
    local at = now
    local first, last = edge(self, state, 0), edge(self, state, -1)
    if last ~= nil then
      local base = first[2] - first[3]
      local excess = last[2] - base + tokens - self.limit
      if last[1] > now then at = last[1] end
      if excess > EPSILON then
        local n = redis.call('ZCARD', self.key)
        local rank = search(self, n, base, last[2], base + excess - EPSILON)
        local found = rank and entry(self, state, rank)
        if not found then
          -- A member that is not ours, in the middle: the set is dropped whole.
          redis.call('DEL', self.key)
          state.first, state.last, state.oldest = false, false, nil
          at = now
        elseif found[1] + self.window > at then
          at = found[1] + self.window
        end
      end
    end
    if #state.caps > 0 then at = capped(state.caps, at, tokens) end
    return now, at
  end

  -- See WindowLog.level: the tokens a request could take at once now (what `plan`
  -- grants at once), the tightest of the limit less what the window counts and the
  -- caps in force; none behind a grant dated ahead.
  function sliding_window.level(self, state, now)
    prune_caps(state, now)
    prune(self, state, now - self.window)
    local left = self.limit
    local first, last = edge(self, state, 0), edge(self, state, -1)
    if last ~= nil then
      if last[1] > now then return 0.0 end
      left = self.limit - (last[2] - (first[2] - first[3]))
    end
    for _, cap in ipairs(state.caps) do
      if now < cap[1] and cap[2] < left then left = cap[2] end
    end
    return left
  end

  -- See Log.rebase_if_due. True where it wrote the set again (deleted and remade:
  -- without a TTL).
  local function rebase_if_due(self, state)
    local first, last = edge(self, state, 0), edge(self, state, -1)
    if first == nil or last == nil then return false end
    local base = first[2] - first[3]
    if not (base > REBASE and base > REBASE_SPAN * (last[2] - base)) then return false end
    local all = redis.call('ZRANGE', self.key, 0, -1, 'WITHSCORES')
    redis.call('DEL', self.key)
    written(state)
    for i = 1, #all, 2 do
      local s, w = string.match(all[i], '^([^|]+)|(.+)$')
      redis.call('ZADD', self.key, all[i + 1], member(tonumber(s) - base, tonumber(w)))
    end
    return true
  end

  function sliding_window.commit(self, state, now, tokens, at)
    if not (tokens > 0) then return state end
    local last = edge(self, state, -1)
    if last == nil then
      redis.call('ZADD', self.key, fmt(at), member(tokens, tokens))
      written(state)
    else
      local total = last[2] + tokens
      if at <= last[1] or total == last[2] then
        -- One entry per time, sums that rise strictly (see WindowLog.commit).
        local t = last[1]
        if at > t then t = at end
        redis.call('ZREM', self.key, last[4])
        redis.call('ZADD', self.key, fmt(t), member(total, last[3] + tokens))
        written(state)
      else
        -- Later than every entry: the newest one now, and the oldest is still the
        -- oldest (unless this member's text was the oldest's, which ZADD moves).
        local m = member(total, tokens)
        -- (The score as a number: redis.call writes it out exactly, for no format here.)
        redis.call('ZADD', self.key, at, m)
        local first = state.first
        if first and first[4] == m then first = nil end
        written(state)
        state.first, state.last = first, {at, total, tokens, m}
      end
      -- The base is below the newest sum: only then is it worth reading.
      if total > REBASE then rebase_if_due(self, state) end
    end
    for _, cap in ipairs(state.caps) do
      if at < cap[1] then
        cap[2] = cap[2] - tokens
        state.caps_dirty = true
      end
    end
    state.dirty = true
    return state
  end

  -- From the oldest grants already made, found by a search on the sums (see
  -- WindowLog.refund).
  function sliding_window.refund(self, state, now, tokens, at)
    if not (tokens > 0) or at <= now - self.window then return state end
    prune(self, state, now - self.window)
    local first, last = edge(self, state, 0), edge(self, state, -1)
    if first == nil or last == nil or first[1] > now then return state end
    local base = first[2] - first[3]
    local target = base + tokens
    local made = redis.call('ZCOUNT', self.key, '-inf', fmt(now))
    local used = made
    if last[2] >= target + EPSILON then
      used = search(self, redis.call('ZCARD', self.key), base, last[2], target + EPSILON)
    end
    state.dirty = true
    written(state)
    if used == nil or used >= made then
      redis.call('ZREMRANGEBYRANK', self.key, 0, made - 1)
      return state
    end
    if used > 0 then redis.call('ZREMRANGEBYRANK', self.key, 0, used - 1) end
    local kept = entry(self, state, 0)
    written(state)
    redis.call('ZREM', self.key, kept[4])
    redis.call('ZADD', self.key, fmt(kept[1]), member(kept[2], kept[2] - target))
    return state
  end

  function sliding_window.tail(self, state, tokens, at)
    local last = edge(self, state, -1)
    return last == nil or at >= last[1] - EPSILON
  end

  function sliding_window.cancel(self, state, now, tokens, at)
    local last = edge(self, state, -1)
    if last == nil or last[1] < at - EPSILON or not (tokens > 0) then return state end
    local prev = last[2] - last[3]
    if redis.call('ZCARD', self.key) > 1 then
      local before = entry(self, state, -2)
      if before == nil then return state end  -- not ours: the set is gone
      prev = before[2]
    end
    redis.call('ZREM', self.key, last[4])
    written(state)
    if not (last[3] - tokens <= EPSILON or last[2] - tokens <= prev) then
      redis.call('ZADD', self.key, fmt(last[1]), member(last[2] - tokens, last[3] - tokens))
    end
    state.dirty = true
    return state
  end

  function sliding_window.latest(self, state)
    local last = edge(self, state, -1)
    if last == nil then return -math.huge end
    return last[1]
  end

  function sliding_window.next_free(self, at, tokens)
    return at
  end

  -- See WindowLog.idle_until: the newest grant's window, or a cap's end, whichever
  -- is later.
  function sliding_window.idle_until(self, state)
    local idle = sliding_window.latest(self, state) + self.window
    for _, cap in ipairs(state.caps) do
      if cap[1] > idle then idle = cap[1] end
    end
    return idle
  end

  function sliding_window.restrict(self, state, now, remaining, untl)
    prune_caps(state, now)
    local caps = state.caps
    for _, cap in ipairs(caps) do
      if cap[1] >= untl and cap[2] <= remaining then return state end
    end
    local kept = {}
    for _, cap in ipairs(caps) do
      if not (cap[1] <= untl and cap[2] >= remaining) then kept[#kept + 1] = cap end
    end
    kept[#kept + 1] = {untl, remaining}
    table.sort(kept, function(a, b)
      if a[1] ~= b[1] then return a[1] < b[1] end
      return a[2] < b[2]
    end)
    while #kept > MAX_CAPS do
      local left = kept[1][2]
      if kept[2][2] < left then left = kept[2][2] end
      table.remove(kept, 1)
      kept[1] = {kept[1][1], left}
    end
    state.caps = kept
    state.caps_dirty = true
    return state
  end

  function sliding_window.save(self, state, now)
    if state.caps_dirty then
      local parts, longest = {}, -math.huge
      for _, cap in ipairs(state.caps) do
        if cap[1] > now then
          parts[#parts + 1] = fmt(cap[1]) .. ' ' .. fmt(cap[2])
          if cap[1] > longest then longest = cap[1] end
        end
      end
      if #parts == 0 then
        redis.call('DEL', self.caps)
      else
        redis.call('SET', self.caps, table.concat(parts, ' '), 'PX', idle_ms(longest - now))
      end
    end
    if not state.dirty then return end
    local last = edge(self, state, -1)
    if last ~= nil then expire_after(self.key, last[1] + self.window - now) end
  end

  -- The checked fast path of a reserve (see _single.lua: no caps, no holes, no change, the
  -- state's slack): plan (prune, the oldest and the newest entry), decide, commit and
  -- save as the full path does them, in that order, with no table. Returns the signed
  -- wait, the grant's name ('': none is named) and the state's idle time where the
  -- full path would keep the slack record (nil: it would not); or nil and the newest
  -- entry read ({last}, for `load`) where the window is full (the search on the sums
  -- is the full path's), or nothing where an entry is not ours.
  function sliding_window.checked_fast(self, now, tokens, max_wait, timed)
    if tokens > self.limit + EPSILON then return -math.huge, '' end
    local key, window = self.key, self.window
    -- The prune first, whether or not anything has aged out: a busy window's oldest
    -- has, at nearly every decision, and the oldest counted is then read by its
    -- member alone (a score read back is written out as text by the server, and read
    -- again here: dearer than the prune that finds nothing). It writes only where it
    -- removes, so a server at maxmemory still refuses the grant's ZADD as before (see
    -- `prune`).
    local pruned = redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window) > 0  -- (a number: written out exactly)
    local got = redis.call('ZRANGE', key, 0, 0)
    local at = now
    local lt, ls, lw, lm = nil, nil, nil, nil  -- the newest entry: time, sum, weight, member
    if #got > 0 then
      local fs, fw = string.match(got[1], '^([^|]+)|(.+)$')
      fs, fw = tonumber(fs), tonumber(fw)
      local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if #newest == 0 then return nil end
      local s, w = parsed_newest(newest[1])
      if fs == nil or fw == nil or s == nil or w == nil then return nil end  -- not ours
      lt, ls, lw, lm = tonumber(newest[2]), s, w, newest[1]
      if lt > now then at = lt end
      if ls - (fs - fw) + tokens - self.limit > EPSILON then
        -- (The oldest's time was not read: `load` leaves it to be.)
        return nil, {last = {lt, ls, lw, lm}, dirty = pruned}
      end
    end
    local wait = decide(now, at, now, max_wait)
    if wait < 0 then
      if not pruned then return wait, '' end
      -- (Saved as the full path saves a pruned state: its newest entry's window.)
      if lt == nil then return wait, '', -math.huge end
      expire_after(key, lt + window - now)
      return wait, '', lt + window
    end
    local was_lt, moved = lt, false  -- the newest entry before, and a rewrite of the set
    if tokens > 0 then
      if lt == nil then
        redis.call('ZADD', key, at, member(tokens, tokens))
        lt = at
      else
        local total = ls + tokens
        if at <= lt or total == ls then
          if at > lt then lt = at end
          redis.call('ZREM', key, lm)
          redis.call('ZADD', key, fmt(lt), member(total, lw + tokens))
          moved = true  -- (the set's one entry removed: the key was deleted and made again)
        else
          local m = member(total, tokens)
          redis.call('ZADD', key, at, m)
          wrote_member, wrote_sum, wrote_weight = m, total, tokens
          lt = at
        end
        -- (A rebase writes the set again: the key lost its TTL. Sums past 2^32 alone,
        -- a budget of billions, move nothing.)
        if total > REBASE and rebase_if_due(self, {}) then moved = true end
      end
      pruned = true
    end
    -- The key's deadline, its newest entry's window and a margin, as every writer of
    -- the set gives it (see `save`), moves at each grant: on the server's clock
    -- (`timed`, see sliding_window_counter.checked_fast) it is set to the next half second
    -- past that window's end, so that the grants of one half second share one and
    -- only the first of them writes it. A deadline a writer set for the entry before,
    -- less than half a second older, still leaves more than half the margin.
    -- (No newest entry: the prune emptied the set, and a request of no tokens added
    -- none, so there is no key to give a deadline.)
    if pruned and lt ~= nil then
      if not timed then
        expire_after(key, lt + window - now)
      else
        local ends = math.ceil((lt + window) * 2) / 2
        if moved or was_lt == nil or ends ~= math.ceil((was_lt + window) * 2) / 2 then
          expire_after(key, ends - now)
        end
      end
    end
    if lt == nil then return wait, '', -math.huge end
    return wait, '', lt + window
  end
end
