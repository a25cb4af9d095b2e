-- ratelimit: approximate sliding window, sub-window counts. Mirrors
-- ratelimit/_algorithms/sliding_window_counter.py (WindowCounter) operation for operation; the proof of
-- its bound (never more than `limit` in any window) is in that module's docstring.
--
-- State: hash <base> with
--   last    the latest grant recorded (or the end of a pause), seconds; its sub-window
--           floor(last / width) is the newest one counted
--   total   the tokens counted, the sum of the c<i>
--   c<i>    the tokens of the counted sub-window whose index is i modulo subs + 1
--           (i = 0 .. subs); a missing field is an empty sub-window
-- Params: limit (tokens per window), window (seconds). A window is cut into subs = 20
-- sub-windows of width = window / subs (fewer below 20 microseconds, see SHORTEST).
--
-- Read with one HMGET of every field; written with one HSET of last, total and the
-- sub-windows that changed (an HDEL for those that emptied). Fields written by an older
-- version (index, previous, current) are ignored and expire with the key.

local sliding_window_counter = {}

do
  local SUBWINDOWS = 20
  local SHORTEST = 1e-6
  -- Written out: building 'c' .. i at every call costs more than the HMGET itself.
  local FIELDS = {'last', 'total', 'c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9',
                  'c10', 'c11', 'c12', 'c13', 'c14', 'c15', 'c16', 'c17', 'c18', 'c19', 'c20'}

  -- See WindowCounter.configured: the window keeps its length; a burst does not apply.
  function sliding_window_counter.configured(limit, window, slack, new_rate, burst)
    if new_rate == nil then return limit, window end
    return new_rate * (window - slack), window
  end

  -- See WindowCounter.guarded: each grant counts `seconds` longer.
  function sliding_window_counter.guarded(limit, window, seconds)
    return limit, window + seconds
  end

  -- The last one made, cached between calls of the function library: a hot window is
  -- decided on the same, and its fields are never written once made.
  local made_key, made_limit, made_window, made = nil, nil, nil, nil

  function sliding_window_counter.new(base, limit, window)
    if base == made_key and limit == made_limit and window == made_window then return made end
    local subs = math.floor(window / SHORTEST)
    if subs > SUBWINDOWS then subs = SUBWINDOWS end
    if subs < 1 then subs = 1 end
    made = {key = base, limit = limit, window = window, subs = subs, ring = subs + 1,
            width = window / subs}
    made_key, made_limit, made_window = base, limit, window
    return made
  end

  -- The place of sub-window s in `counts` (Python's s % ring, 1-based). fmod is exact
  -- where Lua's % (a - floor(a / b) * b) is not, for the large s of epoch times.
  local function slot(self, s)
    local i = math.fmod(s, self.ring)
    if i < 0 then i = i + self.ring end
    return i + 1
  end

  -- The first time whose sub-window index is `index` (see window_start in Python).
  local function window_start(index, width)
    local t = index * width
    while math.floor(t / width) < index do
      t = t + math.abs(t) * 4.5e-16 + 5e-324
    end
    return t
  end

  -- A field read back: its number, or `default` when it is missing or not a finite
  -- number (a hash edited by hand or by another program).
  local function counter_field(value, default)
    local x = tonumber(value)
    if x == nil or x ~= x or x == math.huge or x == -math.huge then return default end
    return x
  end

  local function fresh(self)
    local counts = {}
    for i = 1, self.ring do counts[i] = 0.0 end
    return {index = -math.huge, slot = 1, total = 0.0, last = -math.huge, counts = counts, touched = {}}
  end

  -- Nothing that can be read is forgotten: a count that cannot be read is still in
  -- the total; a total that cannot be read is the sum of the counts; counts with no
  -- readable `last` cannot be placed in time, and are settled (see settle) as all
  -- granted at the first `now` this call sees.
  -- `v`: the HMGET of every field where the checked fast path has read it already.
  function sliding_window_counter.load(self, v)
    if v == nil then v = redis.call('HMGET', self.key, unpack(FIELDS, 1, self.ring + 2)) end
    local state = fresh(self)
    local counts, sum = state.counts, 0.0
    for i = 1, self.ring do
      local c = counter_field(v[i + 2], 0.0)
      if c < 0 then c = 0.0 end
      counts[i] = c
      sum = sum + c
    end
    local total = counter_field(v[2], nil)
    if total == nil or total < 0 then total = sum end
    state.total = total
    local last = counter_field(v[1], nil)
    if last == nil then
      if total > 0 then state.unplaced = true end
      return state
    end
    state.last = last
    state.index = math.floor(last / self.width)
    state.slot = slot(self, state.index)
    return state
  end

  local function settle(self, state, now)
    if not state.unplaced then return end
    state.unplaced = nil
    for i = 1, self.ring do
      state.counts[i] = 0.0
      state.touched[i] = true
    end
    state.index = math.floor(now / self.width)
    state.slot = slot(self, state.index)
    state.counts[state.slot] = state.total
    state.last = now
    state.dirty = true  -- saved even if this call's request is refused
  end

  -- See WindowCounter._advance.
  local function advance(self, state, k)
    local counts, touched = state.counts, state.touched
    if k - state.index > self.subs then
      for i = 1, self.ring do
        counts[i] = 0.0
        touched[i] = true
      end
      state.total = 0.0
    else
      local total = state.total
      for s = state.index + 1, k do
        local i = slot(self, s)
        total = total - counts[i]
        counts[i] = 0.0
        touched[i] = true
      end
      if total > 0.0 then state.total = total else state.total = 0.0 end
    end
    state.index = k
    state.slot = slot(self, k)
  end

  local function hold(self, state, untl)
    local k = math.floor(untl / self.width)
    if k > state.index then advance(self, state, k) end
    if untl > state.last then state.last = untl end
    return state
  end

  local function take(self, state, s, tokens)
    local i = slot(self, s)
    local c = state.counts[i]
    state.touched[i] = true
    if c > tokens then
      state.counts[i] = c - tokens
      state.total = state.total - tokens
      return 0.0
    end
    state.counts[i] = 0.0
    state.total = state.total - c
    return tokens - c
  end

  local function idle_until(self, state)
    if state.index == -math.huge then return state.last end
    local t = window_start(state.index + self.ring, self.width)
    if state.last > t then return state.last end
    return t
  end

  function sliding_window_counter.plan(self, state, now, tokens)
    settle(self, state, now)
    local last = state.last
    local t = now
    if last > now then t = last end
    local k = math.floor(t / self.width)
    local index = state.index
    local m = self.subs
    if k - index > m then return now, t end
    local counts = state.counts
    local used = state.total
    local s = index - m
    while s < k - m do
      used = used - counts[slot(self, s)]
      s = s + 1
    end
    if used + tokens - self.limit <= EPSILON then return now, t end
    while s <= index do
      used = used - counts[slot(self, s)]
      s = s + 1
      if used + tokens - self.limit <= EPSILON then break end
    end
    return now, window_start(s + m, self.width)
  end

  -- See WindowCounter.level: what `plan` grants at once, the limit less what the
  -- window counts now; none behind a grant dated ahead.
  function sliding_window_counter.level(self, state, now)
    settle(self, state, now)
    if state.last > now then return 0.0 end
    local k = math.floor(now / self.width)
    local index = state.index
    local m = self.subs
    if k - index > m then return self.limit end
    local counts = state.counts
    local used = state.total
    local s = index - m
    while s < k - m do
      used = used - counts[slot(self, s)]
      s = s + 1
    end
    return self.limit - used
  end

  function sliding_window_counter.commit(self, state, now, tokens, at)
    if not (tokens > 0) then return state end
    settle(self, state, now)
    local k = math.floor(at / self.width)
    local index = state.index
    local i
    if k > index then
      advance(self, state, k)
      state.last = at
      i = state.slot
    else
      if at > state.last then state.last = at end
      if k == index then
        i = state.slot
      else
        local oldest = index - self.subs
        if k > oldest then i = slot(self, k) else i = slot(self, oldest) end
      end
    end
    state.counts[i] = state.counts[i] + tokens
    state.touched[i] = true
    state.total = state.total + tokens
    return state
  end

  function sliding_window_counter.refund(self, state, now, tokens, at)
    settle(self, state, now)
    local top = state.index
    if top == -math.huge or not (tokens > 0) then return state end
    local current = math.floor(now / self.width)
    local oldest = current - self.subs
    if oldest < top - self.subs then oldest = top - self.subs end
    if at == now then
      if top > current then return state end
      local s = oldest
      while s <= top and tokens > 0.0 do
        tokens = take(self, state, s, tokens)
        s = s + 1
      end
    else
      local s = math.floor(at / self.width)
      if s > top then s = top end
      while s >= oldest and tokens > 0.0 do
        tokens = take(self, state, s, tokens)
        s = s - 1
      end
    end
    if not (state.total > 0.0) then state.total = 0.0 end
    return state
  end

  function sliding_window_counter.restrict(self, state, now, remaining, untl)
    settle(self, state, now)
    local last = state.last
    local t0 = now
    if last > now then t0 = last end
    if untl <= t0 then return state end
    if remaining <= EPSILON then return hold(self, state, untl) end
    local ring, width = self.ring, self.width
    local first_k = math.floor(t0 / width)
    local end_k = math.floor(untl / width)
    local blocks = math.floor((end_k - first_k) / ring) + 1
    local needed = math.ceil(remaining / self.limit)
    if blocks <= needed then
      local start = end_k - blocks * ring + 1
      local index = state.index
      local held = 0.0
      local s = start
      if not (start > index - self.subs) then s = index - self.subs end
      while s <= index do
        held = held + state.counts[slot(self, s)]
        s = s + 1
      end
      local extra = blocks * self.limit - remaining - held
      if extra > EPSILON then return sliding_window_counter.commit(self, state, now, extra, t0) end
      return state
    end
    local begin = window_start(end_k - needed * ring + 1, width)
    local extra = needed * self.limit - remaining
    if extra > EPSILON then return sliding_window_counter.commit(self, state, now, extra, begin) end
    return hold(self, state, begin)
  end

  function sliding_window_counter.save(self, state, now)
    settle(self, state, now)
    if state.last == -math.huge then return end
    local set = {'last', fmt(state.last), 'total', fmt(state.total)}
    local gone = {}
    for i = 1, self.ring do
      if state.touched[i] then
        if state.counts[i] > 0 then
          set[#set + 1] = FIELDS[i + 2]
          set[#set + 1] = fmt(state.counts[i])
        else
          gone[#gone + 1] = FIELDS[i + 2]
        end
      end
    end
    -- HSET first: on a server out of memory under noeviction it is refused before
    -- anything was written (a script that has written is let through).
    redis.call('HSET', self.key, unpack(set))
    if #gone > 0 then redis.call('HDEL', self.key, unpack(gone)) end
    -- A pause is held in `last`, which can reach past the counted sub-windows.
    expire_after(self.key, idle_until(self, state) - now)
  end

  -- See WindowCounter.tail / WindowCounter.cancel.
  function sliding_window_counter.tail(self, state, tokens, at)
    return at >= state.last - EPSILON
  end

  function sliding_window_counter.cancel(self, state, now, tokens, at)
    return sliding_window_counter.refund(self, state, now, tokens, at)
  end

  -- See WindowCounter.latest / WindowCounter.next_free.
  function sliding_window_counter.latest(self, state)
    return state.last
  end

  function sliding_window_counter.next_free(self, at, tokens)
    return at
  end

  -- See WindowCounter.idle_until.
  sliding_window_counter.idle_until = idle_until

  -- Sub-window s's count on the checked fast path (as load reads it): now's sub-window (slot
  -- `here`) from `v`, the checked fast path's HMGET; any other from every field, read where
  -- first needed and returned as `all` for the next. (A function defined once, not a
  -- closure made at each decision.)
  local function checked_count(self, s, here, v, all)
    local i = slot(self, s)
    local c
    if i == here then c = counter_field(v[3], 0.0)
    else
      if all == nil then all = redis.call('HMGET', self.key, unpack(FIELDS, 1, self.ring + 2)) end
      c = counter_field(all[i + 2], 0.0)
    end
    if c < 0 then return 0.0, all end
    return c, all
  end

  -- The checked fast path of a reserve (see _single.lua: nothing beside the state, the code's
  -- limit, no slack to lay the state out for): load, plan (plan_all), decide, commit
  -- and save as the full path does them, in that order, with no table but the reply
  -- and reading only the sub-windows it counts (a count is read as load reads it).
  -- Returns the signed wait, the grant's name ('' : none is named here) and the idle
  -- time of the state saved (nil: nothing saved); or nothing where the state is not
  -- one it can place (missing, `last` or `total` unreadable): the full path decides.
  function sliding_window_counter.checked_fast(self, now, tokens, max_wait, timed)
    local width, m, ring = self.width, self.subs, self.ring
    -- A busy window's decision counts one sub-window: now's, where the grant goes and
    -- which is the one that ages out when the latest grant was in the sub-window
    -- before (the ring has one more than the window). So that one is read with `last`
    -- and `total`, and every field only where another is counted (a window full, a
    -- state idle for a while).
    local here = slot(self, math.floor(now / width))
    local v = redis.call('HMGET', self.key, 'last', 'total', FIELDS[here + 2])
    local last, total = counter_field(v[1], nil), counter_field(v[2], nil)
    if last == nil or total == nil or total < 0 then return nil end
    if tokens > self.limit + EPSILON then return -math.huge, '' end
    local all, n = nil, nil  -- every field, once read; a count read
    local index = math.floor(last / width)
    local was_index, was_last = index, last
    local t = now
    if last > now then t = last end
    local grant = t
    local k = math.floor(t / width)
    if not (k - index > m) then
      local used = total
      local s = index - m
      while s < k - m do
        n, all = checked_count(self, s, here, v, all)
        used = used - n
        s = s + 1
      end
      if not (used + tokens - self.limit <= EPSILON) then
        while s <= index do
          n, all = checked_count(self, s, here, v, all)
        used = used - n
          s = s + 1
          if used + tokens - self.limit <= EPSILON then break end
        end
        grant = window_start(s + m, width)
      end
    end
    local at = now
    if grant > at then at = grant end
    local wait = decide(now, at, now, max_wait)
    if wait < 0 then return wait, '' end
    local set = nil
    local gone = nil
    if tokens > 0 then
      -- commit: the sub-window of `at`, those between cleared first (advance).
      local ka = math.floor(at / width)
      local i, c
      if ka > index then
        gone = {}
        if ka - index > m then
          total = 0.0
          for j = 1, ring do gone[j] = FIELDS[j + 2] end
        else
          for s = index + 1, ka do
            local j = slot(self, s)
            n, all = checked_count(self, s, here, v, all)
            total = total - n
            gone[#gone + 1] = FIELDS[j + 2]
          end
          if not (total > 0.0) then total = 0.0 end
        end
        index = ka
        last = at
        i, c = slot(self, ka), 0.0
      else
        if at > last then last = at end
        local s = index
        if ka ~= index then
          s = index - m
          if ka > s then s = ka end
        end
        i = slot(self, s)
        c, all = checked_count(self, s, here, v, all)
      end
      c = c + tokens
      total = total + tokens
      if c > 0 then
        set = FIELDS[i + 2]
        if gone then
          for j = #gone, 1, -1 do
            if gone[j] == set then table.remove(gone, j) end
          end
        end
      else
        gone = gone or {}
        gone[#gone + 1] = FIELDS[i + 2]
      end
      -- (Numbers, not text: the server writes each out exactly, as %.17g or the
      -- shortest text that reads back the same double, for no string made here.)
      if set then
        redis.call('HSET', self.key, 'last', last, 'total', total, set, c)
      else
        redis.call('HSET', self.key, 'last', last, 'total', total)
      end
    else
      redis.call('HSET', self.key, 'last', last, 'total', total)
    end
    if gone and #gone > 0 then redis.call('HDEL', self.key, unpack(gone)) end
    -- Every writer of the state gives the key its idle time's TTL (see `save`), which
    -- moves only with the newest sub-window: a grant that leaves it where it was
    -- leaves the key's deadline as it stands, and writes none. (`timed`: `now` is the
    -- server's TIME, whose seconds pass as a TTL's do; a time the caller gave, a test's
    -- held clock, may not, and the TTL is written from it at each grant as before.)
    local ring_end = window_start(index + ring, width)
    local idle, was = ring_end, ring_end
    if last > idle then idle = last end
    if was_last > was then was = was_last end
    if not timed or index ~= was_index or idle ~= was then expire_after(self.key, idle - now) end
    return wait, '', idle
  end

  -- A state whose sub-windows were cut for a window `grown` seconds shorter (written
  -- under a smaller slack: see fleet_slack in _single.lua), cut again for this one's:
  -- each old sub-window's count moves to the new sub-window holding its end, so that
  -- no grant is counted for less time than before. No Python twin: the in-process
  -- store never holds a state under two slacks.
  function sliding_window_counter.relayout(self, state, grown)
    if state.index == -math.huge then return state end
    local old = sliding_window_counter.new(self.key, self.limit, self.window - grown)
    local moved = fresh(self)
    moved.total, moved.last = state.total, state.last
    moved.index = math.floor(state.last / self.width)
    moved.slot = slot(self, moved.index)
    local oldest = moved.index - self.subs
    -- The state was loaded by this window's cut: its sub-windows are found again by
    -- the old one's.
    local newest = math.floor(state.last / old.width)
    for s = newest - old.subs, newest do
      local c = state.counts[slot(old, s)]
      if c > 0 then
        local k = math.floor(window_start(s + 1, old.width) / self.width)
        if k > moved.index then k = moved.index end
        if k < oldest then k = oldest end
        local i = slot(self, k)
        moved.counts[i] = moved.counts[i] + c
      end
    end
    for i = 1, self.ring do moved.touched[i] = true end
    moved.dirty = true
    return moved
  end
end
