"""Pending grants: grants decided but not yet due, carried across a switch to the local fallback and back.

With ``on_unavailable="local"`` a handle decides on the store, or on the in-process
fallback while the store is unavailable; each side knows only its own grants. A
caller granted a wait sends when it is due, whichever side decides by then, so the
side taking over must leave room for the other's pending grants, or it grants that
budget twice.

What a process knows of them is how far the other side's queue reached when it last
decided there (a grant's due time, or a refusal's needed wait): its *horizon*. The
side taking over treats it as a provider's pause (``restrict``): nothing before the
horizon, then the rate, with no burst where the algorithm allows.

- **To the fallback**: each process's fallback waits out the store's queue whole, as
  this process last saw it (the fallbacks are separate: none can take another's share).
- **Back to the store**: each process pauses the shared store until its fallback's
  pending grants are due; the store is paused until the last of them.

The bound (docs/redis.md): neither side knows the other's unspent burst, so each
switch may add one capacity to the fleet's ``capacity + rate x t``, and no more (a
process that had not asked since the other's queue formed may add its share of it).
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
