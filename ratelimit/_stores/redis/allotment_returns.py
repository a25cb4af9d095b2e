"""What is left of an allotment (``lease=``) goes back when it ends (see ``redis/rounds.py``).

A process that stops acquiring after a busy spell would otherwise keep the rest of
its last allotment from the fleet until its next acquire or ``close``. One daemon thread
per backend waits for the earliest allotment to end and gives back its rest with one
script call (a refund of the allotment's grant). An allotment that was spent, voided or
replaced meanwhile leaves nothing to give: the thread finds so and moves on.

Only allotments on real time are watched (a test clock's end is the test's to reach),
and only with a synchronous client, which the thread calls through; an asyncio-only
backend gives an allotment's rest back with its next round or at ``aclose``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["AllotmentReturns"]

logger = logging.getLogger("ratelimit")


class AllotmentReturns:
    """The ends of the allotments a backend's handles hold, and the thread that keeps them."""

    __slots__ = ("_due", "_order", "_pid", "_stopped", "_thread", "_wake")

    def __init__(self) -> None:
        self._wake = threading.Condition()
        # (monotonic time of the end, order, the handle's give-back): a weak reference,
        # so a dropped limiter is not kept alive to the end of its allotment.
        self._due: list[tuple[float, int, weakref.WeakMethod[Callable[[], None]]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stopped = False

    def watch(self, seconds: float, give_back: Callable[[], None]) -> None:
        """Call ``give_back`` (a bound method) ``seconds`` from now."""
        with self._wake:
            if self._stopped:
                return
            heapq.heappush(self._due, (time.monotonic() + seconds, next(self._order), weakref.WeakMethod(give_back)))
            if self._thread is None or self._pid != os.getpid():
                # A forked child has no thread of its parent's: it starts its own.
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="ratelimit-allotment-returns", daemon=True)
                self._thread.start()
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._due.clear()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                    self._wake.wait(None if not self._due else self._due[0][0] - time.monotonic())
                if self._stopped:
                    return
                _, _, ref = heapq.heappop(self._due)
            give_back = ref()
            if give_back is None:
                continue
            try:
                give_back()
            except Exception:  # the thread must outlive one failed give-back
                logger.warning("could not give back the rest of an allotment", exc_info=True)
