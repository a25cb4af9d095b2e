"""What an operator reads and changes in a shared store (internal).

:class:`Operated` is the one protocol of the operator's side, which the two shared
stores implement (``RedisBackend`` and ``SQLiteBackend``): a limit changed at run
time (``set_limit``, ``reset_limit``, ``limit_override``), what the store holds of a
limiter (``inspect``, an :class:`~.records.Inspection`; ``holds``, whether anything), and the fleet's traffic
(``top``, :class:`~.records.FleetRow`). The ``ratelimit`` command's ``inspect``,
``set`` and ``top`` are written once against it (``ratelimit/cli.py``), so both
stores show the same thing in the same shape; a field a store cannot know is
``None`` (see :class:`~.records.Inspection`).

Names read back from a store (``inspect_all``, ``top``) are text by ``keys.text_of``:
a byte that is not UTF-8 stands as its surrogate escape, and such a name given back
to ``inspect`` addresses the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from .._clock import Clock
from .records import FleetRow, Inspection, Override

__all__ = ["Operated"]


class Operated(Protocol):
    """A shared store as its operator sees it (``ratelimit inspect``, ``set``, ``top``)."""

    def set_limit(
        self,
        name: str,
        *,
        rate: float | None = None,
        burst: float | None = None,
        ttl: float | timedelta | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Change limiter ``name``'s limit at run time, in every process; ``None``
        keeps what the code says. ``UnchangeableLimit`` for a limiter that would never
        read it, ``ValueError`` for a bad value: nothing is stored either way."""
        ...

    def reset_limit(self, name: str, *, clock: Clock | None = None) -> bool:
        """Back to what the code says; whether a change was in force."""
        ...

    def limit_override(self, name: str, *, clock: Clock | None = None) -> Override | None:
        """The change in force for ``name``, or ``None``."""
        ...

    def inspect(self, name: str, *, key: str | None = None) -> Inspection:
        """What the store holds of limiter ``name`` (``key``: of its budget for that
        key, ``limiter.for_key(key)``); an unknown name is an inspection whose
        ``known`` is false."""
        ...

    def inspect_many(self, names: Sequence[str], *, key: str | None = None) -> list[Inspection]:
        """:meth:`inspect` of each of ``names``, in their order, read together."""
        ...

    def holds(self, name: str) -> bool:
        """Whether the store holds anything of limiter ``name`` itself: a state of any
        kind, what its code configured, a change, a breaker, slots (a keyed budget's
        are its key's). ``ratelimit set`` refuses a name it holds nothing of."""
        ...

    def inspect_all(self) -> list[Inspection]:
        """Every name with something to show, sorted (names only: a limiter's keyed
        budgets are not names of their own)."""
        ...

    def top(self, window: float = 5.0, *, now: float | None = None) -> list[FleetRow]:
        """Every limiter active in the last minute, busiest first: rates over the last
        ``window`` whole seconds before ``now`` (store time; ``None``: now)."""
        ...

    def close(self) -> None:
        """Let go of the store's connections."""
        ...
