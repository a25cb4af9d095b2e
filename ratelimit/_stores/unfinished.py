"""Give-backs that outlive their event loop: a cancelled grant's tokens, a slot's release.

A give-back that asyncio cancels is lost (``asyncio.run`` cancels every task left
before closing its loop), and a cancelled store call may or may not have been made.
So one that must happen exactly once (a refund: two would free another grant's place)
runs in a thread of this module's pool, which cancellation does not stop and the
interpreter waits for at exit. One that may happen twice (a lease's release: names
are never reused) is made again in the pool when its asyncio call is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["finish", "finish_later", "release_outlasting"]

logger = logging.getLogger("ratelimit")

#: Made at the first give-back that needs it.
_pool: ThreadPoolExecutor | None = None
_making = threading.Lock()


def _forget_the_pool() -> None:
    """In a forked child the pool's threads are the parent's: make a new pool."""
    global _pool, _making
    _pool = None
    _making = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_pool)


def _the_pool() -> ThreadPoolExecutor:
    global _pool
    with _making:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ratelimit-give-back")
        return _pool


def _logged(call: Callable[[], object], what: str) -> None:
    try:
        call()
    except Exception:
        logger.warning("could not give back %s", what, exc_info=True)


def finish_later(call: Callable[[], object], what: str) -> Future[None]:
    """Run ``call()`` in the pool; a failure is logged, naming ``what``."""
    return _the_pool().submit(_logged, call, what)


async def finish(call: Callable[[], object], what: str) -> None:
    """Run ``call()`` in the pool and wait for it: cancelling the caller leaves it to
    run to its end, after the loop closes too."""
    await asyncio.shield(asyncio.wrap_future(finish_later(call, what)))


async def release_outlasting(
    release: Callable[[], None], later: Callable[[], Coroutine[Any, Any, None]], in_thread: Callable[[], None]
) -> None:
    """A slot's release from a coroutine, whatever happens to its task: ``later()``
    shielded, ``in_thread()`` again if the task is cancelled, ``release()`` at once
    outside any loop (an async generator collected after its loop ended)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        release()
        return
    try:
        await asyncio.shield(later())
    except asyncio.CancelledError:
        in_thread()
        raise
