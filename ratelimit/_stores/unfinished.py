"""Give-backs that outlive their event loop: a cancelled grant's tokens, a slot's release.

A give-back that asyncio cancels is lost: ``asyncio.run`` cancels every task left
before it closes its loop, the give-backs of tasks cancelled a moment earlier among
them, and a store call cancelled while it waits for its reply may or may not have
been made. So a give-back that must happen exactly once (a refund: two would free
another grant's place) is made synchronously in a thread of this module's pool,
which a cancellation of its caller does not stop and which the interpreter waits for
at exit; the caller awaits it. One that may happen twice (a release of a lease, whose
name is never reused) is made again in the pool when its asyncio call is cancelled.
A Redis store built on an asyncio client alone has no synchronous call to make here:
its give-backs stay on the loop.
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

#: Made at the first give-back that needs it; its threads end with the interpreter,
#: after the work queued on them.
_pool: ThreadPoolExecutor | None = None
_making = threading.Lock()


def _forget_the_pool() -> None:
    """In a forked child: the pool's threads are the parent's, and a pool that counts
    them as idle runs nothing queued here; the child's first give-back makes its own."""
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
    """A slot's release from a coroutine, made whatever happens to its task: ``later()``
    (the release on the loop) shielded from the task's cancellation, ``in_thread()``
    (the release again in a thread nothing cancels) if the task is cancelled, for
    ``asyncio.run`` cancels every task left before it closes the loop, and ``release()``
    at once from a coroutine closed outside any loop (an async generator collected
    after its loop ended: nothing to await on, no loop to block). Made twice, a release
    frees one slot: lease names are never reused."""
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
