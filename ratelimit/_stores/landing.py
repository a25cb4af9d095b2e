"""What lands for an asyncio task that left: a store call it made runs on without it,
and what the call brings is handed to ``late``.

A task cancelled while the store decides must not strand a grant the store goes on to
make. Two ways keep that:

- :func:`shielded`: the call runs in a task of its own, which the caller awaits; the
  caller may leave, the call runs on, and what it brings then is handed to ``late``.
  That costs a task per call (and, before Python 3.12, a step of the loop each way).
- A store call that reads its reply itself hands it over at the one await between its
  command and its reply (``redis/held_connection.py``): the caller's task makes the
  call, and only a cancelled one starts a task, which reads the reply on.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["Late", "keep_running", "shielded"]

R = TypeVar("R")

#: What a call brings, handed over once its task has left.
Late = Callable[[R], Awaitable[None]]

#: Calls and hand-overs still running for tasks that left (the loop holds tasks weakly).
_RUNNING: set[asyncio.Future[Any]] = set()


def keep_running(task: asyncio.Future[Any]) -> None:
    """Hold ``task`` until it is done: nothing else may refer to it."""
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)


if sys.version_info >= (3, 12):

    def _started(loop: asyncio.AbstractEventLoop, call: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        # Run at once up to its first wait (the command sent), not in the loop's next
        # step: the command goes out a step of the loop sooner.
        return asyncio.Task(call, loop=loop, eager_start=True)

else:

    def _started(loop: asyncio.AbstractEventLoop, call: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return loop.create_task(call)


async def shielded(call: Coroutine[Any, Any, R], late: Late[R]) -> R:
    """What ``call`` returns, made in a task of its own; if the caller is cancelled
    first, what ``call`` then returns is handed to ``late`` (its failure is nobody's to hear)."""
    loop = asyncio.get_running_loop()
    landed: asyncio.Future[R] = loop.create_future()
    task: asyncio.Future[Any] = _started(loop, _landing(call, landed, late))
    try:
        # The call hands its outcome to this task's future itself, which wakes this
        # task a step of the loop sooner than a done callback would.
        return await landed
    except asyncio.CancelledError:
        if landed.done() and not landed.cancelled():
            # Cancelled after the outcome was handed over, before this task woke: the
            # call has ended, and what it brought is this task's to hand on.
            if landed.exception() is not None:
                raise
            task = asyncio.ensure_future(late(landed.result()))
        keep_running(task)
        raise


async def _landing(call: Coroutine[Any, Any, R], landed: asyncio.Future[R], late: Late[R]) -> None:
    try:
        outcome = await call
    except asyncio.CancelledError:
        landed.cancel()
        raise
    except Exception as exc:
        if not landed.done():
            landed.set_exception(exc)
        return  # (or the caller left, and a failure is nobody's to hear)
    except BaseException as exc:  # KeyboardInterrupt, SystemExit: the loop's to see too
        if not landed.done():
            landed.set_exception(exc)
        raise
    if not landed.done():
        landed.set_result(outcome)
    else:
        await late(outcome)
