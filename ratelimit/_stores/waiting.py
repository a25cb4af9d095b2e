"""A waiter's one-shot wake-up (:class:`Waiting`, for a thread or an asyncio task,
woken from any thread) and this process's id in a store (:func:`process_id`).
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import os
import uuid
from typing import Any

__all__ = ["Waiting", "process_id"]

_process = uuid.uuid4().hex[:16]


def _new_process() -> None:
    # A forked child must not answer to its parent's name.
    global _process
    _process = uuid.uuid4().hex[:16]


os.register_at_fork(after_in_child=_new_process)


def process_id() -> str:
    """This process's id: the prefix of every lease id it makes, and its channel."""
    return _process


class Waiting:
    """One waiter's wake-up, for a thread or for an asyncio task; ``wake`` may be
    called from any thread, any number of times."""

    __slots__ = ("_future", "_lock", "_loop", "patience", "woken")

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None, patience: float | None = None) -> None:
        self._loop = loop
        self.woken = False
        #: The waiter's timeout (seconds; ``None``: none); bounds a file lock's wait too.
        self.patience = patience
        # A thread waits on a lock held from the start, released by the waker: a
        # one-shot signal far cheaper to make than a threading.Event.
        self._lock: Any = None
        self._future: asyncio.Future[None] | None = None
        if loop is None:
            self._lock = _thread.allocate_lock()
            self._lock.acquire()
        else:
            self._future = loop.create_future()

    def wake(self) -> None:
        if self.woken:
            return
        self.woken = True
        if self._lock is not None:
            # Two wakers racing past the check: the second release finds it released.
            with contextlib.suppress(RuntimeError):
                self._lock.release()
        elif self._loop is not None and not self._loop.is_closed():
            # The loop may close meanwhile: then nobody is left to wake.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds`` (a thread's waiter); whether it was woken."""
        assert self._lock is not None
        if self._lock.acquire(timeout=seconds):
            self._lock.release()  # woken: stays woken for any later look
            return True
        return self.woken

    async def wait_async(self, seconds: float) -> bool:
        """Suspend up to ``seconds`` (a task's waiter); whether it was woken."""
        assert self._future is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._future), seconds)
        except asyncio.TimeoutError:
            return self._future.done()
        return True
