"""Limits changed at run time in process (``MemoryBackend.set_limit``; internal).

A change is pushed, not read: :func:`move` runs under the slot's lock, moves the
state to the new limit (the tokens owed keep their count: ``rescale``, as the shared
stores move it) and points every handle bound to the slot at the algorithm in force
(:class:`Capped`). A decision on a name that no change reaches runs exactly the code's
algorithm, with nothing looked up. A change set for a while ends at the first
decision after its end (``Capped.step``, and the handles' other calls through
``Slot.until``), which moves the state back, as Redis's script does.

The backend keeps each change by name (every key of the name: ``for_key``), by key
(``Keyed``) and by a composite's member, so that a slot bound later starts at the
limit in force. Called by ``memory/backend.py`` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._algorithms.algorithm import EPSILON, Algorithm

__all__ = ["Capped", "Change", "Recorded", "in_force", "rescaled"]

#: ``(rate, burst)`` of a change, either ``None`` (the code's value).
Change = tuple[float | None, float | None]


@dataclass(frozen=True)
class Recorded:
    """A change as the backend keeps it: its values, and the time it ends on the
    clock it was made on (``inf``: until reset; ``domain``, see ``_domain``)."""

    change: Change
    until: float
    domain: object


class Capped:
    """An algorithm as changed: its calls go to the limit in force, a request larger
    than that limit is refused for ever (as the shared stores' ``too_big``), and the
    first step at or after ``until`` hands over to ``ended`` (which moves the state
    back and decides with the code's algorithm; a composite's handle watches the end
    itself and gives none)."""

    __slots__ = ("alg", "ended", "most", "until")

    def __init__(
        self,
        alg: Algorithm[Any],
        until: float,
        ended: Callable[[Any, float, float, float], tuple[Any, float]] | None = None,
    ) -> None:
        self.alg = alg
        self.most = alg.most
        self.until = until
        self.ended = ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self.alg, name)

    def step(self, state: Any, now: float, tokens: float, max_wait: float) -> tuple[Any, float]:
        if now >= self.until and self.ended is not None:
            return self.ended(state, now, tokens, max_wait)
        if tokens > self.most + EPSILON and self.alg.most < math.inf:
            return state, -math.inf
        return self.alg.step(state, now, tokens, max_wait)

    def plan(self, state: Any, now: float, tokens: float) -> tuple[float, float]:
        if tokens > self.most + EPSILON and self.alg.most < math.inf:
            return math.inf, math.inf  # never admitted: refused for ever, as in step
        return self.alg.plan(state, now, tokens)


def in_force(code: Algorithm[Any], change: Change | None) -> Algorithm[Any]:
    """What decides for ``code`` under ``change`` (``None``: the code itself)."""
    return code if change is None else code.configured(*change)


def rescaled(code: Algorithm[Any], state: Any, was: Change | None, to: Change | None, now: float) -> Any:
    """``state``, decided under ``was``, moved to ``to`` at ``now``: a bucket's tokens
    owed keep their count; a window's log or counts mean the same under any limit."""
    before = in_force(code, was)
    rescale = getattr(before, "rescale", None)
    if rescale is None or was == to:
        return state
    return rescale(in_force(code, to), state, now)
