"""The safe mode's count of live processes: ``local_share="auto"``.

While Redis answers, each process whose backend falls back with ``"auto"`` beats
every ``ttl / 3`` seconds from a daemon thread: one call of ``lua/live.lua`` puts it
in the sorted set ``ratelimit:live``, scored by when its beat runs out, drops the
processes whose beat ran out, and returns how many are left. When Redis becomes
unavailable the local fallback takes ``1 / count`` of the budget.

One sorted set: a single key (one Cluster slot, no hash tag), and one atomic call on
the server's clock writes, forgets and counts, so processes with different clocks
agree on who ran out. A key per process would need a scan across every node.

The count kept is the most that the last :data:`KEPT_BEATS` beats, and all those of
the last ``ttl`` seconds, saw. A set that comes back empty (a restart without
persistence, a failover, eviction) holds only the processes that have beaten since,
for a beat's period; a process taking that for the fleet would over-spend if Redis
went away again. The second beat after such a loss counts every live process, and
the third drops the count from before it. A dead process leaves the count a ``ttl``
after it leaves the set: a smaller share meanwhile, the safe side.

Processes are counted by :func:`~.waiting.process_id`, whatever limiters they hold:
over-counting makes each share smaller, the safe side.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..._errors import BackendUnavailable
from ..waiting import process_id

__all__ = ["KEPT_BEATS", "LIVE_KEY", "LIVE_TTL", "UNCOUNTED_SHARE", "LiveCount"]

logger = logging.getLogger("ratelimit")

#: The sorted set of live processes.
LIVE_KEY = "ratelimit:live"

#: How long one beat keeps a process counted, in seconds; beating every third of it,
#: two beats in a row may fail before it is dropped.
LIVE_TTL = 15.0

#: The beats whose counts are kept (and those of the last ``ttl`` seconds): the one
#: before the set came back empty, and the two after it (see the module's doc).
KEPT_BEATS = 3

#: The share of a process that never saw a count (Redis down since its start, or
#: forked and not beaten yet): not 1.0, which would let every process started in an
#: outage spend the whole budget; a tenth, so ten such spend at most the budget.
UNCOUNTED_SHARE = 0.1


class LiveCount:
    """This process's heartbeat in the set of live processes, and the count it saw.

    ``run`` calls ``lua/live.lua`` with its arguments (``op, process, ttl, now``) on
    the set, ``now`` says what the script is told the time is (``""``: the server's);
    ``ttl`` is :data:`LIVE_TTL` unless given; ``clock`` is this process's (the age of
    the counts kept).
    """

    def __init__(
        self,
        run: Callable[[Sequence[str]], Any],
        now: Callable[[], str],
        *,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._now = now
        self._clock = clock
        self.ttl = LIVE_TTL if ttl is None else ttl
        #: Seconds between beats.
        self.every = self.ttl / 3
        self._lock = threading.Lock()
        #: The process the thread beats for (``None`` until started), and the one
        #: that saw the count: a forked child is neither until it starts.
        self._beating: str | None = None
        self._counted: str | None = None
        self._count: int | None = None
        # (when, count) of the beats kept, oldest first.
        self._seen: collections.deque[tuple[float, int]] = collections.deque()
        self._stopped = threading.Event()
        _counts.add(self)

    @property
    def count(self) -> int | None:
        """The most live processes this process's recent beats counted (itself
        included; see :data:`KEPT_BEATS`); ``None`` if it never counted."""
        return self._count if self._counted == process_id() else None

    def share(self) -> float:
        """The share of the budget this process keeps without Redis: ``1 / count``, or
        :data:`UNCOUNTED_SHARE` if it never counted."""
        count = self.count
        return UNCOUNTED_SHARE if count is None else 1.0 / max(1, count)

    def start(self) -> None:
        """Beat from now on, in a daemon thread; nothing if this process already does.

        Called at every script call of the backend: a forked child (whose id is its
        own, and whose parent's thread did not come along) starts beating at its
        first, and never uses the count its parent saw.
        """
        if self._beating == process_id():
            return
        with self._lock:
            me = process_id()
            if self._beating == me or self._stopped.is_set():
                return
            self._beating = me
            thread = threading.Thread(
                target=_beating, args=(weakref.ref(self), self._stopped, me), name="ratelimit-live", daemon=True
            )
            thread.start()

    def _args(self, op: str, member: str) -> list[str]:
        return [op, member, repr(float(self.ttl)), self._now()]

    def beat(self) -> int:
        """Count this process as alive for ``ttl`` more seconds; return what this
        beat counted (:attr:`count` is the most of the recent ones)."""
        me = process_id()
        count = int(self._run(self._args("beat", me)))
        now = self._clock()
        with self._lock:
            seen = self._seen
            if self._counted != me:
                seen.clear()  # a forked child keeps nothing its parent saw
            seen.append((now, count))
            while len(seen) > KEPT_BEATS and now - seen[0][0] > self.ttl:
                seen.popleft()
            self._count, self._counted = max(kept for _, kept in seen), me
        return count

    def stop(self) -> None:
        """Stop beating, and leave the set (if Redis answers) so that the others'
        counts drop at their next beat instead of after ``ttl``."""
        with self._lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            member = self._beating
        if member is not None and member == process_id():
            with contextlib.suppress(Exception):
                self._run(self._args("leave", member))


#: Every count made, for the fork handler.
_counts: weakref.WeakSet[LiveCount] = weakref.WeakSet()


def _forked() -> None:
    # A lock (or the event's) held by a thread of the parent at the fork would stay
    # held in the child forever: the child's are new.
    for live in list(_counts):
        live._lock = threading.Lock()
        if not live._stopped.is_set():
            live._stopped = threading.Event()


os.register_at_fork(after_in_child=_forked)


def _beating(ref: weakref.ref[LiveCount], stopped: threading.Event, me: str) -> None:
    # Holds the count only while beating: a backend dropped unclosed ends its thread.
    while not stopped.is_set() and process_id() == me:
        live = ref()
        if live is None:
            return
        every = live.every
        try:
            live.beat()
        except BackendUnavailable as exc:
            # The fallback keeps the count it last saw; the limiters say the rest.
            logger.debug("Redis unavailable; the live processes were not counted: %s", exc)
        except Exception:
            logger.warning("could not count the live processes; retrying in %.3g s", every, exc_info=True)
        del live
        stopped.wait(every)
