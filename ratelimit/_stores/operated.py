"""What an operator reads and changes in a shared store (internal).

:class:`Operated` is the one protocol of the operator's side, which the two shared
stores implement (``RedisBackend`` and ``SQLiteBackend``): a limit changed at run
time, what the store holds of a limiter (:class:`~.records.Inspection`) and the
fleet's traffic (:class:`~.records.FleetRow`). The CLI is written once against it.
Names read back are text by ``keys.text_of`` and address the same state when given
back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from .._clock import Clock
from .records import FleetRow, Inspection, Override

__all__ = ["Operated"]


class Operated(Protocol):
    """A shared store as its operator sees it."""

    #: Whether a key of a name (``for_key``) first used after a change by name
    #: follows it (the store reads the name's change for it), or starts at the
    #: code's values (the change was written into the keys in use only).
    later_keys_follow: bool
    #: The seconds a process may take to see a change by name before its keys first
    #: used later follow it (0: from its next decision).
    later_keys_after: float

    def set_limit(
        self,
        name: str,
        *,
        rate: float | None = None,
        burst: float | None = None,
        ttl: float | timedelta | None = None,
        clock: Clock | None = None,
        key: str | None = None,
    ) -> int:
        """Change ``name``'s limit in every process (``None``: the code's value), and
        its keys' (``for_key``) but those with a change of their own; ``key``: that
        key's alone. How many keys in use it reached. ``UnchangeableLimit`` or
        ``ValueError`` store nothing."""
        ...

    def reset_limit(self, name: str, *, clock: Clock | None = None, key: str | None = None) -> bool:
        """Back to what the code says; whether a change was in force."""
        ...

    def limit_override(self, name: str, *, clock: Clock | None = None, key: str | None = None) -> Override | None:
        """The change in force for ``name`` (``key``: that key's own), or ``None``."""
        ...

    def inspect(self, name: str, *, key: str | None = None) -> Inspection:
        """What the store holds of ``name`` (``key``: of that key's budget)."""
        ...

    def inspect_many(self, names: Sequence[str], *, key: str | None = None) -> list[Inspection]:
        """:meth:`inspect` of each of ``names``, in their order, read together."""
        ...

    def keys_in_use(self, name: str) -> int:
        """How many keys of ``name`` (``for_key``) have a budget in the store."""
        ...

    def holds(self, name: str) -> bool:
        """Whether the store holds anything of ``name`` itself (not of its keys)."""
        ...

    def inspect_all(self) -> list[Inspection]:
        """Every name with something to show, sorted (keyed budgets are not names)."""
        ...

    def top(self, window: float = 5.0, *, now: float | None = None) -> list[FleetRow]:
        """Limiters active in the last minute, busiest first, rates over ``window``."""
        ...

    def close(self) -> None:
        """Let go of the store's connections."""
        ...
