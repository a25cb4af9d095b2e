"""Decorating plain and ``async def`` functions alike (internal)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["is_async", "wrap"]


def is_async(fn: object) -> bool:
    """Does calling ``fn`` give a coroutine? (An object whose ``__call__`` is a
    coroutine function counts.)"""
    call = vars(type(fn)).get("__call__")
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def wrap(
    fn: Callable[..., Any],
    run: Callable[..., Any],
    run_async: Callable[..., Awaitable[Any]],
) -> Callable[..., Any]:
    """``fn`` wrapped so that each call becomes ``run(fn, *args, **kwargs)``, or
    ``await run_async(fn, *args, **kwargs)`` when ``fn`` is asynchronous."""
    if is_async(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await run_async(fn, *args, **kwargs)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run(fn, *args, **kwargs)

    return wrapper
