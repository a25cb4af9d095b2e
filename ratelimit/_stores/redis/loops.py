"""What a :class:`~.redis.RedisBackend` keeps per event loop: its asyncio client, its
calls in flight to the store, and the deadline of each of them.
"""

from __future__ import annotations

import asyncio
import collections
import sys
from collections.abc import AsyncGenerator, Callable
from typing import Any

from .held_connection import AsyncHeldConnection


class InFlight:
    """Calls in flight to the store on one event loop, first come first served.

    ``asyncio.Semaphore`` would do, but costs an awaited coroutine on every call even
    when a turn is free; here a free turn is taken without awaiting anything.
    """

    __slots__ = ("free", "waiting")

    def __init__(self, free: int) -> None:
        self.free = free
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_now(self) -> bool:
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give()  # handed a turn as it was cancelled: pass it on
            elif turn in self.waiting:  # give() may have dropped it already
                self.waiting.remove(turn)
            raise

    def give(self) -> None:
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1


class LoopState:
    """What a backend keeps per event loop: its client, its calls in flight, the
    deadlines of its calls (``watch``, for clients without a socket timeout), and the
    held connection its calls are sent on where not through the client
    (``held_connection.py``)."""

    __slots__ = ("client", "closer", "gate", "held", "watch")

    def __init__(self, client: Any, gate: InFlight, watch: Watch | None, held: AsyncHeldConnection | None) -> None:
        self.client = client
        self.gate = gate
        self.watch = watch
        self.closer: AsyncGenerator[None, None] | None = None
        self.held = held


async def close_with_loop(client: Any, forget: Callable[[], None]) -> AsyncGenerator[None, None]:
    """Closes ``client`` (after calling ``forget``) when its event loop shuts down;
    started by one ``__anext__``, it waits for that at its yield."""
    # An async generator parked at its yield: when the loop shuts down (asyncio.run
    # does), the loop finalises it, and the client's connections close in their own
    # loop instead of leaking transports into a closed one.
    try:
        yield
    finally:
        forget()
        await client.aclose()


#: The watch ticks this often (a share of the deadline). A tick later than
#: ``_LATE_SHARE`` found the loop busy: the time since the tick before is not charged
#: to the calls in flight (their replies may have arrived unread), at most
#: ``_MOST_EXTENSIONS`` times the deadline in all.
_TICK_SHARE = 0.25
_LATE_SHARE = 0.02
_MOST_EXTENSIONS = 20


class Watch:
    """The deadline of every script call in flight on one event loop, kept by one timer.

    A call is cancelled (and reported as ``redis.exceptions.TimeoutError``) once
    ``seconds`` have passed while the loop was free to take its reply. A timer per
    call would cost more than the rest of the call's client side; this one ticks only
    while calls are in flight.
    """

    __slots__ = ("busy", "calls", "expired", "loop", "seconds", "ticked", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self.seconds = seconds
        #: Each call's task: when it started, and ``busy`` then.
        self.calls: dict[asyncio.Task[Any], tuple[float, float]] = {}
        self.expired: set[asyncio.Task[Any]] = set()
        #: Seconds the loop has been too busy to keep time, in all.
        self.busy = 0.0
        self.ticked = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[Any]) -> None:
        self.calls[task] = (self.loop.time(), self.busy)
        if self.timer is None:
            self._arm()

    def _arm(self) -> None:
        self.ticked = self.loop.time()
        due = self.ticked + self.seconds * _TICK_SHARE
        self.timer = self.loop.call_at(due, self._tick, due)

    def _tick(self, due: float) -> None:
        now = self.loop.time()
        if now - due > self.seconds * _LATE_SHARE:
            self.busy += now - self.ticked
        for task, (began, busy) in list(self.calls.items()):
            waited = now - began
            if waited - (self.busy - busy) > self.seconds or waited > self.seconds * _MOST_EXTENSIONS:
                del self.calls[task]
                self.expired.add(task)
                task.cancel()
        self.timer = None
        if self.calls:
            self._arm()

    def timed_out(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` was cancelled by this watch alone (and forget it). Cancelled
        by someone else as well, the cancellation is theirs to see."""
        if task not in self.expired:
            return False
        self.expired.discard(task)
        return not (sys.version_info >= (3, 11) and task.uncancel() > 0)
