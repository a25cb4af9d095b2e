"""Which grant a refund or a settle gives back: the caller's own latest one.

A token bucket can take back a grant's unused tokens even with reservations queued
behind it, if it knows which grant they were from (``holes.py``). ``refund`` and
``settle`` take no grant as argument, so the limiter remembers each caller's (thread's,
task's) latest grant and names it, but only where that cannot be mistaken:

- the caller has made exactly one grant since its last refund or settle, so "the
  tokens of my grant" can mean only that one (``acquire``, ``acquire``, ``settle``
  names nothing: which of the two was it?);
- a ``settle`` squares exactly the tokens that grant took, and a ``refund`` gives back
  no more than it took;
- it is the caller's own: a task started after the grant sees it too, in its copy of
  the context, but did not make it (the grant names the task that made it; threads
  each start with a context of their own);
- a grant is named once, even where copies of a context share it.

Anything else gives back unnamed, as before: nothing is lost that was not lost
already. The remembering starts with a limiter's first refund, settle or charge, so a
limiter that never gives back pays nothing for it on its hot path.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Named", "covers", "equal"]

T = TypeVar("T")


class _Grant(Generic[T]):
    """One grant: its tokens, and its name in a cell that the first taker empties."""

    __slots__ = ("cell", "tokens")

    def __init__(self, tokens: T, at: float) -> None:
        self.tokens = tokens
        self.cell = [at]


class Named(Generic[T]):
    """Each caller's latest grant of one limiter, and how many it made since it last
    gave back (see the module docstring). ``owner`` is the asyncio task that calls, or
    ``None`` outside one."""

    __slots__ = ("_var",)

    def __init__(self) -> None:
        self._var: contextvars.ContextVar[tuple[_Grant[T] | None, int, object]] = contextvars.ContextVar(
            "ratelimit_named_grant", default=(None, 0, None)
        )

    def saw(self, tokens: T, at: float, owner: object = None) -> list[float] | None:
        """A grant was made to this caller at store time ``at``. Returns the cell that
        names it (``None``: nothing to name), which whoever withdraws the grant
        otherwise (a reservation's cancel) empties."""
        _, count, made_by = self._var.get()
        if made_by is not owner:
            count = 0  # a task counts its own grants, not those of the task that started it
        # NaN: granted without the store (fail open), nothing to name.
        grant = None if math.isnan(at) else _Grant(tokens, at)
        self._var.set((grant, count + 1, owner))
        return None if grant is None else grant.cell

    def forget(self, owner: object = None) -> None:
        """The caller gave back (or charged): its earlier grants are not named any more,
        here nor in a copy of the context that shares the latest one."""
        grant = self._var.get()[0]
        if grant is not None:
            grant.cell.clear()
        self._var.set((None, 0, owner))

    def take(self, fits: Callable[[T], bool], owner: object = None) -> float | None:
        """The latest grant's name, if the caller made it, ``fits(its tokens)``, and it is
        the only grant since the caller last gave back; forgotten either way (the caller
        has given back now). ``None``: give back unnamed."""
        grant, count, made_by = self._var.get()
        self._var.set((None, 0, owner))
        if grant is None or made_by is not owner or count != 1 or not fits(grant.tokens):
            return None
        try:
            return grant.cell.pop()  # atomic: one taker among the contexts that share it
        except IndexError:
            return None


def _numbers(tokens: object) -> tuple[float, ...] | None:
    if isinstance(tokens, (int, float)):
        return (float(tokens),)
    if isinstance(tokens, (tuple, list)) and all(isinstance(n, (int, float)) for n in tokens):
        return tuple(float(n) for n in tokens)
    return None


def covers(held: object, want: object) -> bool:
    """Whether a grant of ``held`` tokens holds ``want`` (per limit for a composite)."""
    if isinstance(held, (int, float)) and isinstance(want, (int, float)):
        return want <= held  # one limiter's: the common case, without tuples
    a, b = _numbers(held), _numbers(want)
    return a is not None and b is not None and len(a) == len(b) and all(w <= h for h, w in zip(a, b, strict=True))


def equal(held: object, want: object) -> bool:
    """Whether a grant of ``held`` tokens is exactly ``want`` (what a settle squares)."""
    if isinstance(held, (int, float)) and isinstance(want, (int, float)):
        return want == held
    a, b = _numbers(held), _numbers(want)
    return a is not None and a == b
