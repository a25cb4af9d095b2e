"""A clock for tests where several reservations must be pending at one instant.

The behaviour tests' :class:`ManualClock` advances when a limiter sleeps, as if one
worker made every call. :class:`HeldClock` reads the same time but its sleeps do not
move it, as if each sleeper were another worker; its async sleeps park until
released, so a test can cancel a task mid-sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ratelimit import ManualClock

L = TypeVar("L")


class HeldClock:
    """The test's time, but sleeping never moves it: as if each sleeper were another worker.

    ``sleep`` only records. ``sleep_async`` records, then parks the task until
    :meth:`release` (or until it is cancelled), so a test can cancel a task mid-sleep.
    """

    def __init__(self, base: ManualClock) -> None:
        self.base = base
        self.sleeps: list[float] = []
        self._gate = asyncio.Event()
        self._parked = asyncio.Event()

    def now(self) -> float:
        return self.base.now()

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    async def sleep_async(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._parked.set()
        await self._gate.wait()

    def release(self) -> None:
        """Let every parked sleeper go (time does not move)."""
        self._gate.set()

    async def start(self, coro: Coroutine[Any, Any, float]) -> asyncio.Task[float]:
        """Run ``coro`` in a task until it is parked in a sleep or done: its reservation is made."""
        self._parked.clear()
        task = asyncio.create_task(coro)
        parked = asyncio.create_task(self._parked.wait())
        await asyncio.wait({task, parked}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        parked.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await parked
        return task


def held(cls: Callable[..., L]) -> Callable[..., L]:
    """For ``make``: build ``cls`` on a :class:`HeldClock` over the fixture's clock."""

    def build(*args: Any, clock: ManualClock, **kwargs: Any) -> L:
        return cls(*args, clock=HeldClock(clock), **kwargs)

    return build


def held_clock(limiter: Any) -> HeldClock:
    """The :class:`HeldClock` a limiter built with :func:`held` runs on."""
    clock = limiter.clock
    assert isinstance(clock, HeldClock)
    return clock
