"""Which grant a refund or a settle gives back: the caller's own latest one.

A token bucket can take back a grant's unused tokens even with reservations queued
behind it, if it knows which grant they were from (``holes.py``). ``refund`` and
``settle`` take no grant, so the limiter remembers each caller's (thread's, task's)
latest grant and names it where that cannot be mistaken:

- the caller has made exactly one grant since it last gave back;
- a ``settle`` squares exactly the tokens that grant took, a ``refund`` no more;
- the caller made it (a task started after the grant sees it in its copy of the
  context), and a grant is named once, even where copies of a context share it.

Anything else gives back unnamed. The remembering starts with a limiter's first
refund, settle or charge, so a limiter that never gives back pays nothing for it.
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
    """Each caller's latest grant of one limiter and how many it made since it last gave
    back. ``owner``: the calling asyncio task, or ``None`` outside one."""

    __slots__ = ("_var",)

    def __init__(self) -> None:
        self._var: contextvars.ContextVar[tuple[_Grant[T] | None, int, object]] = contextvars.ContextVar(
            "ratelimit_named_grant", default=(None, 0, None)
        )

    def saw(self, tokens: T, at: float, owner: object = None) -> list[float] | None:
        """A grant was made to this caller at store time ``at``. Returns the cell that
        names it (``None``: nothing to name); a reservation's cancel empties it."""
        _, count, made_by = self._var.get()
        if made_by is not owner:
            count = 0  # a task counts its own grants, not those of the task that started it
        # NaN: granted without the store (fail open), nothing to name.
        grant = None if math.isnan(at) else _Grant(tokens, at)
        self._var.set((grant, count + 1, owner))
        return None if grant is None else grant.cell

    def forget(self, owner: object = None) -> None:
        """The caller gave back (or charged): its earlier grants are named no more, here
        nor in a copy of the context."""
        grant = self._var.get()[0]
        if grant is not None:
            grant.cell.clear()
        self._var.set((None, 0, owner))

    def take(self, fits: Callable[[T], bool], owner: object = None) -> float | None:
        """The latest grant's name, if the caller made it, ``fits(its tokens)`` and it is
        the only grant since the caller last gave back; forgotten either way. ``None``:
        give back unnamed."""
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
