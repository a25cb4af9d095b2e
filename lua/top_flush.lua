-- ratelimit: driver that writes the counts held in memory for `ratelimit top` (see
-- "Counting in memory" in _top.lua). This file is the body of
-- drive_top_flush(KEYS, ARGV), a function of the library only: a script holds nothing.
--
-- KEYS     the counters' bases, each as a <base>:top:<second> key names it (a single
--          limiter's state key, ratelimit:{<name>}:composite, ...:priorities): any
--          number on one Redis; on a Cluster, bases of one slot only
-- ARGV     none
--
-- Returns {written, held}: the number of bases given that had counts held, now
-- written, each into its own second's key (given its TTL if new); and the number of
-- bases the library holds counts for (at most TOP_HELD_MOST), for tests and the
-- curious. The bases go on holding their counts of that second: a count after this
-- is held, and written by the next flush or the base's next call in another second.
local written = 0
for _, base in ipairs(KEYS) do
  local counts = held[base]
  if counts ~= nil then
    for _, n in pairs(counts) do
      if n ~= 0 then
        write_held(base)
        written = written + 1
        break
      end
    end
  end
end
return {written, held_bases}
