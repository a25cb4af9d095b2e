"""The one clock of every process using a :class:`~.sqlite.SQLiteBackend` file (internal).

Store time is the box's boot clock plus an offset kept in the file:

- The boot clock (``CLOCK_BOOTTIME`` where there is one, which counts a suspend, else
  ``time.monotonic``) is one clock for every process of the box and never steps,
  whatever is done to the wall clock: a wall-clock step changes nothing.
- The offset is set when the file is made (store time then reads as Unix time) and
  again when a process finds the file last used during another boot (its boot clock
  started again from zero): store time then continues from the latest time any row
  was written, moved on by the wall time since, when the wall clock says some passed.
  It never goes backwards: a wall clock set back over the reboot costs the downtime
  (states resume as they were left, never stuck in the future), one set forward only
  makes states idle sooner (a full budget, as after a real downtime).
- Each transaction also clamps its time to the latest written into the rows it reads,
  so a row is never decided at a time before its own.

``sqlite/file.py`` keeps the offset; ``sqlite/backend.py`` reads :meth:`BootClock.now`.
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["boot_id", "boot_seconds", "rebased_offset"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def boot_seconds() -> float:
    """Seconds on this boot's clock (one clock for every process of the box)."""
    if _CLOCK is not None:
        return time.clock_gettime(_CLOCK)
    return time.monotonic()


def boot_id() -> str:
    """What names this boot of the box: the kernel's boot id, or else when it booted
    by the wall clock, to the minute (a wall step of more than that is then taken for
    a reboot, which only rebases the offset)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return f"booted@{round((time.time() - boot_seconds()) / 60)}"


def rebased_offset(latest_written: float | None, last_wall: float | None) -> float:
    """The offset for a new boot (or a new file): store time from now on is
    ``boot_seconds() + offset``.

    ``latest_written``: the latest store time found in the rows (``None``: none);
    ``last_wall``: the wall time recorded with it (``None``: unknown).
    """
    wall = time.time()
    boot = boot_seconds()
    if latest_written is None:
        return wall - boot
    gone = wall - last_wall if last_wall is not None else 0.0
    return latest_written + (gone if gone > 0.0 else 0.0) - boot
