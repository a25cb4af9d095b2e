"""What a shared store does when it cannot be reached: ``on_unavailable``, read in
one place (:meth:`FailurePolicy.without_store`) by both shared stores (internal).

A store that answers but cannot be used as configured (wrong credentials, a database
the server does not have) raises :class:`Misconfigured`, which no policy turns into a
grant: failing open would hide a wrong URL behind a warning for ever.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from .._errors import BackendUnavailable

__all__ = ["BackendStats", "FailurePolicy", "Misconfigured", "OnUnavailable", "checked_on_unavailable"]

logger = logging.getLogger("ratelimit")

R = TypeVar("R")

OnUnavailable = Literal["raise", "allow", "local"]


class Misconfigured(BackendUnavailable):
    """The store answers but cannot be used as configured (wrong credentials, a
    database it does not have): raised whatever ``on_unavailable`` says."""


def checked_on_unavailable(value: object) -> OnUnavailable:
    """``on_unavailable`` checked: ``"raise"``, ``"allow"`` or ``"local"``."""
    if value == "raise" or value == "allow" or value == "local":
        return value
    raise ValueError(f"on_unavailable must be 'raise', 'allow' or 'local', got {value!r}")


@dataclass(frozen=True)
class BackendStats:
    """Counters of a shared backend since it was made."""

    #: Calls that could not reach the store.
    failures: int
    #: Of those, acquires granted without the store (``on_unavailable="allow"``).
    failed_open: int
    #: Of those, acquires decided by the local fallback (``on_unavailable="local"``).
    fell_back: int
    #: Decisions that found the store's file locked by another process and waited for
    #: it (a :class:`~ratelimit.SQLiteBackend`'s; always 0 for Redis).
    lock_waits: int = 0
    #: Seconds those decisions waited for the lock in all.
    lock_wait_seconds: float = 0.0


class FailurePolicy:
    """``on_unavailable`` and the counts of what it did."""

    def __init__(self, on_unavailable: OnUnavailable) -> None:
        self.on_unavailable: OnUnavailable = on_unavailable
        self._lock = threading.Lock()
        self._failures = self._failed_open = self._fell_back = 0

    def without_store(
        self,
        exc: BackendUnavailable,
        key: str,
        *,
        local: Callable[[], R] | None,
        otherwise: Callable[[], R],
        says: tuple[str, str],
        decision: bool = False,
    ) -> R:
        """What an operation on ``key`` does when the store cannot be reached:
        ``"raise"`` raises ``exc`` (every policy raises a :class:`Misconfigured`);
        otherwise run ``local`` if given, else ``otherwise``. ``says``: the warning for
        each case (``%r`` key, ``%s`` error; empty for none). A ``decision`` is counted
        in :meth:`stats`."""
        policy = self.on_unavailable
        if policy == "raise" or isinstance(exc, Misconfigured):
            raise exc
        if decision:
            with self._lock:
                if policy == "allow":
                    self._failed_open += 1
                else:
                    self._fell_back += 1
        message, run = (says[0], local) if local is not None else (says[1], otherwise)
        if message:
            logger.warning(message, key, exc)
        return run()

    def stats(self) -> BackendStats:
        """How often the store could not be reached, and what was done instead."""
        with self._lock:
            return BackendStats(self._failures, self._failed_open, self._fell_back)
