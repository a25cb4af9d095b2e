-- ratelimit: driver that writes the counts held in memory for `ratelimit top` (see
-- "Counting in memory" in _top.lua). This file is the body of
-- drive_top_flush(KEYS, ARGV), a function of the library only: a script holds nothing.
--
-- KEYS     the counters' bases, each as a <base>:top:<second> key names it (a single
--          limiter's state key, ratelimit:{<name>}:composite, ...:priorities): any
--          number on one Redis; on a Cluster, bases of one slot only
-- ARGV     none
--
-- Returns the number of bases that had counts held, now written, each into its own
-- second's key (which is given its TTL if new). The bases go on holding their counts
-- of that second; they are written again by the next flush or the base's next call in
-- another second.
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
return written
