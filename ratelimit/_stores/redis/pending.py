"""Pending grants: grants decided but not yet due, carried across a switch to the local fallback and back.

With ``on_unavailable="local"`` a handle decides on one of two sides: the store, or
the in-process fallback while the store is unavailable. Each side knows only its own
grants. A caller granted a wait sleeps through it and then sends, whichever side is
deciding by then, so at a switch the side taking over must leave room for what the
other side granted and is still to go: otherwise it grants that budget a second
time (a Sentinel failover would let nearly twice the bound through in its second).

What a process can know of the other side's pending grants is how far its queue reached
when it last decided here: a grant's due time, or a refusal's needed wait (the
grant would have come then). Until that *horizon* the side handing over grants at
the whole rate: the store for the fleet, each fallback at its share. So the side
taking over leaves that time to it, as after a provider's pause (``restrict``):
nothing before the horizon, then the rate, with no burst where the algorithm allows
(a bucket; a window takes its limit in the first window after the pause).

- **To the fallback**: each process's fallback waits out the store's queue as this
  process last saw it. The fallbacks are separate, so none could take up another's
  share of that queue: each waits it out whole.
- **Back to the store**: each process pauses the shared store until its fallback's
  pending grants are due. The store is paused until the last of them, when every
  fallback's queue has gone.

The bound (stated in docs/redis.md): what neither side can know is the other's unspent
burst. A side that had no queue at the switch hands over none: the fallback then
starts with its share of the capacity, and a store back from an outage has refilled
meanwhile (or, restarted empty, is full). A window also grants its limit in the
first window after a pause, beside grants pending from before it. Each switch may thus
add one capacity to the fleet's ``capacity + rate x t``, and no more; a process that
had not asked the store since its queue formed (it cannot know the queue) may add
its share of that queue.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

__all__ = ["LOCAL", "STORE", "PendingGrants"]

#: The two sides a handle decides on.
STORE = 0
LOCAL = 1


class PendingGrants:
    """How far the grants each side of one handle decided reach (see the module);
    ``now`` is the limiter's clock."""

    __slots__ = ("_horizon", "_lock", "_now", "side")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._lock = threading.Lock()
        #: The side that decided last (the store, until it first fails).
        self.side = STORE
        # Per side, the latest time its queue was seen to reach.
        self._horizon = [-math.inf, -math.inf]

    def made(self, side: int, wait: float) -> None:
        """``side`` decided a request: to go in ``wait`` seconds, or refused
        (``wait < 0``: it would have needed ``-wait``)."""
        if wait == 0 or not math.isfinite(wait):
            return
        reach = self._now() + abs(wait)
        if reach > self._horizon[side]:
            with self._lock:
                if reach > self._horizon[side]:
                    self._horizon[side] = reach

    def enter(self, side: int) -> float:
        """``side`` decides next: if the other decided last, the seconds from now
        to the reach of its queue, which ``side`` is to leave to it (0: none)."""
        if self.side == side:
            return 0.0
        with self._lock:
            if self.side == side:
                return 0.0
            self.side = side
            other = 1 - side
            horizon, self._horizon[other] = self._horizon[other], -math.inf
        return max(0.0, horizon - self._now())

    def undo(self, side: int, ahead: float) -> None:
        """Entering ``side`` failed before it left ``ahead`` seconds to the other:
        the other decides on, its queue as it was."""
        with self._lock:
            self.side = 1 - side
            other = 1 - side
            self._horizon[other] = max(self._horizon[other], self._now() + ahead)
