"""The handles a :class:`~.backend.SQLiteBackend` binds: the memory store's handles,
deciding in the file under :class:`~.rows.Rows`, and what the file cannot decide sent
to the backend's failure policy (``on_unavailable``).
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

from ..._algorithms.algorithm import EPSILON
from ..._errors import BackendUnavailable
from ..memory.backend import MemoryGroupHandle, MemoryHandle
from ..memory.fallback import Fallback
from ..stats import Stats
from ..store import Handle, Level, Leveled
from .fast_path import FastPath
from .file import LOCK_GRACE, WAITED_LEAST, Busy, LockTimeout, StoreFile, Waited, in_thread_within
from .rows import Rows
from .top import Cell, Counts

__all__ = ["Followed", "Owner", "SQLiteGroupHandle", "SQLiteHandle"]

T = TypeVar("T")
R = TypeVar("R")


class Owner(Protocol):
    """What a handle uses of the :class:`~.backend.SQLiteBackend` that bound it."""

    file: StoreFile
    counts: Counts

    def now(self) -> float: ...

    def sweep_if_due(self) -> None: ...

    def without_store(
        self,
        exc: BackendUnavailable,
        key: str,
        *,
        local: Callable[[], R] | None,
        otherwise: Callable[[], R],
        says: tuple[str, str],
        decision: bool = False,
    ) -> R: ...


class Followed(MemoryHandle):
    """The memory handle of a single limiter that follows a change at run time: its
    peek reads the file only, as Redis's does; a decision would write the moves it
    makes there."""

    __slots__ = ()

    def _reading(self) -> Any:
        return cast(Rows, self._slot.lock).reading()


class _Unavailable(Generic[T]):
    """A SQLite handle: the memory handle it wraps decides in the file, and what the
    file cannot decide goes to the backend's failure policy, with the local fallback
    of ``on_unavailable="local"``."""

    __slots__ = ("__weakref__", "_backend", "_calls", "_file", "_inner", "_local", "_name", "top")

    #: A decision that finds the file locked waits for it in a thread (see reserve_async).
    suspends = True

    def __init__(self, backend: Owner, name: str, inner: Handle[T], local: Fallback[T] | None) -> None:
        #: Where its decisions are counted for ``ratelimit top`` (sqlite/top.py):
        #: under ``(name, kind, shadow)``; ``None``: not counted.
        self.top: Cell | None = None
        self._backend = backend
        self._file = backend.file
        self._calls = backend.file.calls
        self._name = name
        self._inner = inner
        self._local = local

    @property
    def stats(self) -> Stats | None:
        return self._inner.stats

    @stats.setter
    def stats(self, stats: Stats | None) -> None:
        self._inner.stats = stats

    def name_grants(self) -> None:
        self._inner.name_grants()

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        # The caller's timeout bounds the wait for the file's lock too (sqlite/file.py).
        calls = self._calls
        calls.patience = max_wait
        try:
            decision = self._reserve(tokens, max_wait)
        except LockTimeout as exc:
            # Another process holds the file longer than the caller would wait: a busy
            # store, not an unavailable one. Refused, nothing decided, as a grant that
            # would wait too long; the wait it tells is the one spent on the lock.
            return self._refused(exc.waited)
        except BackendUnavailable as exc:
            return self._without_file(exc, tokens, max_wait)
        finally:
            calls.patience = None
        self._decided(decision)
        return decision

    def _without_file(self, exc: BackendUnavailable, tokens: T, max_wait: float) -> tuple[float, float]:
        """A decision the file could not make, by the backend's failure policy."""
        local = self._local
        return self._backend.without_store(
            exc,
            self._name,
            local=None if local is None else lambda: local.reserve(tokens, max_wait),
            otherwise=lambda: (0.0, math.nan),
            says=(
                "SQLite store unavailable; deciding %r locally: %s",
                "SQLite store unavailable; granting %r without it (fail open): %s",
            ),
            decision=True,
        )

    def reserve_level(self, tokens: T, max_wait: float) -> tuple[float, float, Level | None]:
        """``reserve``, and the level it left in the same transaction (``Leveled``);
        ``None`` where the file could not decide, or the inner handle tells none (lanes)."""
        inner = self._inner
        if not hasattr(inner, "reserve_level"):
            return (*self.reserve(tokens, max_wait), None)
        leveled = cast("Leveled[T]", inner).reserve_level
        calls = self._calls
        calls.patience = max_wait
        try:
            wait, at, level = self._in_file(leveled, tokens, max_wait)
        except LockTimeout as exc:
            return (*self._refused(exc.waited), None)
        except BackendUnavailable as exc:
            return (*self._without_file(exc, tokens, max_wait), None)
        finally:
            calls.patience = None
        self._decided((wait, at))
        return wait, at, level

    async def reserve_level_async(self, tokens: T, max_wait: float) -> tuple[float, float, Level | None]:
        # With the level when the file is free now; else as reserve_async (whose wait
        # for a busy file is a thread's, within the caller's timeout), without it.
        try:
            with self._backend.file.not_waiting():
                return self.reserve_level(tokens, max_wait)
        except Busy:
            return (*await self.reserve_async(tokens, max_wait), None)

    def _refused(self, waited: float) -> tuple[float, float]:
        """A refusal for the file's being busy ``waited`` seconds, counted as one."""
        stats = self._inner.stats
        if stats is not None:
            with stats.lock:
                stats.denied += 1
        return -waited, math.nan

    def _reserve_late(self, tokens: T, max_wait: float, came: float) -> tuple[float, float]:
        """:meth:`reserve` in a thread that an asyncio caller, come at ``came``, waited
        for (behind other callers' waits for a busy file): that wait counts in its
        timeout as a wait for the lock would. Past it, it decides only if the file is
        free at once."""
        late = time.monotonic() - came
        if max_wait == math.inf or late <= WAITED_LEAST:
            return self.reserve(tokens, max_wait)
        left = max(0.0, max_wait - late)
        if late <= max(max_wait, LOCK_GRACE):
            return self.reserve(tokens, left)
        decided = self.reserve_here(tokens, left)
        return self._refused(late) if decided is None else decided

    def _reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        """The decision in a transaction (see :meth:`_in_file`)."""
        return self._in_file(self._inner.reserve, tokens, max_wait)

    def _in_file(self, decide: Callable[[T, float], R], tokens: T, max_wait: float) -> R:
        """``decide(tokens, max_wait)`` in a transaction; after a wait for the lock,
        with what is left of ``max_wait`` (in the transaction that wait opened: see
        ``Waited``)."""
        waited = None
        try:
            try:
                return decide(tokens, max_wait)
            except Waited as exc:
                waited = exc.waited
            # Out of the handler: the transaction's end tells a decision that raised
            # by the exception being handled (Rows.release).
            return decide(tokens, max(0.0, max_wait - waited))
        finally:
            if waited is not None:
                self._file.let_go()  # kept, if the decision never began again

    def _decided(self, decision: tuple[float, float]) -> None:
        top = self.top
        backend = self._backend
        if top is not None:
            wait, at = decision
            # A grant never due (a spent allowance) is refused at (-inf, -inf): it has
            # no time of its own, and is counted in the second now.
            now = at - wait if wait > -math.inf else time.time()
            backend.counts.decided(top, now, wait)
        backend.sweep_if_due()

    def reserve_here(self, tokens: T, max_wait: float) -> tuple[float, float] | None:
        """The decision if the file is free now, ``None`` if it would have to wait
        (then :meth:`reserve_async` waits for it off the event loop)."""
        try:
            with self._backend.file.not_waiting():
                return self.reserve(tokens, max_wait)
        except Busy:
            return None

    async def reserve_async(self, tokens: T, max_wait: float) -> tuple[float, float]:
        # At once when the file is free; else the wait for its lock (up to
        # busy_timeout) is a thread's, never the event loop's. A task cancelled
        # meanwhile leaves the thread to finish: the front gives back what it then
        # grants (``suspends``), as for a Redis round trip.
        decided = self.reserve_here(tokens, max_wait)
        if decided is not None:
            return decided
        came = time.monotonic()
        late = functools.partial(self._reserve_late, tokens, max_wait, came)
        if max_wait == math.inf:
            return await asyncio.to_thread(late)
        # A timeout bounds the wait for a thread too: one not begun by the time the
        # lock's wait would have been given up is refused, as that wait is.
        return await in_thread_within(late, max(max_wait, LOCK_GRACE), lambda: self._refused(time.monotonic() - came))

    async def _off_loop(self, call: Callable[[], R]) -> R:
        return await self._backend.file.off_loop(call)

    def _lost(self, what: str, run: Callable[[], object], local: Callable[[Fallback[T]], object]) -> None:
        try:
            run()
        except BackendUnavailable as exc:
            fallback = self._local
            self._backend.without_store(
                exc,
                self._name,
                local=None if fallback is None else lambda: local(fallback),
                otherwise=lambda: None,
                says=("", f"SQLite store unavailable; the {what} on %r is lost: %s"),
            )

    def refund(self, tokens: T, at: float | None) -> None:
        self._lost("refund", lambda: self._inner.refund(tokens, at), lambda local: local.refund(tokens, None))

    async def refund_async(self, tokens: T, at: float | None) -> None:
        await self._off_loop(lambda: self.refund(tokens, at))

    def charge(self, tokens: T) -> float | None:
        charged: float | None = None

        def run() -> None:
            nonlocal charged
            charged = self._inner.charge(tokens)

        self._lost("charge", run, lambda local: local.charge(tokens))
        return charged

    async def charge_async(self, tokens: T) -> float | None:
        return await self._off_loop(lambda: self.charge(tokens))

    def restrict(self, remaining: T, seconds: float) -> None:
        self._lost(
            "restriction",
            lambda: self._inner.restrict(remaining, seconds),
            lambda local: local.restrict(remaining, seconds),
        )

    async def restrict_async(self, remaining: T, seconds: float) -> None:
        await self._off_loop(lambda: self.restrict(remaining, seconds))

    def peek(self, tokens: T) -> float:
        try:
            return self._inner.peek(tokens)
        except BackendUnavailable as exc:
            local = self._local
            # As a decision would: the local fallback's own answer, or at once (fail open).
            return self._backend.without_store(
                exc,
                self._name,
                local=None if local is None else lambda: local.peek(tokens),
                otherwise=lambda: 0.0,
                says=("", ""),  # a read: nothing decided without the store to tell of
            )

    async def peek_async(self, tokens: T) -> float:
        return await self._off_loop(lambda: self.peek(tokens))

    def reset(self) -> None:
        self._lost("reset", self._inner.reset, lambda local: local.reset())

    async def reset_async(self) -> None:
        await self._off_loop(self.reset)


class SQLiteHandle(_Unavailable[float]):
    """One limiter, or one priority of a budget with lanes, in the file."""

    __slots__ = ("_fast_path",)

    def __init__(
        self,
        backend: Owner,
        name: str,
        inner: Handle[float],
        local: Fallback[float] | None,
        fast_path: FastPath | None = None,
    ) -> None:
        super().__init__(backend, name, inner, local)
        self._fast_path = fast_path

    def name_grants(self) -> None:
        # The statement's decision says only when a grant goes, not where it sits: a
        # limiter that gives back decides in the transaction.
        self._fast_path = None
        super().name_grants()

    def reserve(self, tokens: float, max_wait: float) -> tuple[float, float]:
        fast_path = self._fast_path
        if fast_path is None:
            return super().reserve(tokens, max_wait)
        if fast_path.on:
            # A token bucket whose row is one number: one statement (sqlite/fast_path.py),
            # which waits for no other process's lock (the full transaction does).
            try:
                decision = fast_path.reserve(tokens, max_wait, self._inner.stats)
            except LockTimeout as exc:  # this process's turn held by a thread that waits for the lock
                return self._refused(exc.waited)
            if decision is not None:
                self._decided(decision)
                return decision
        decision = super().reserve(tokens, max_wait)
        fast_path.after_full()
        return decision

    def reserve_level(self, tokens: float, max_wait: float) -> tuple[float, float, Level | None]:
        fast_path = self._fast_path
        if fast_path is None:
            return super().reserve_level(tokens, max_wait)
        if fast_path.on:
            try:
                got = fast_path.reserve_level(tokens, max_wait, self._inner.stats)
            except LockTimeout as exc:
                return (*self._refused(exc.waited), None)
            if got is not None:
                self._decided((got[0], got[1]))
                return got
        decision = super().reserve_level(tokens, max_wait)
        fast_path.after_full()
        return decision

    def restrict(self, remaining: float, seconds: float) -> None:
        super().restrict(remaining, seconds)
        top = self.top
        if top is not None and remaining <= EPSILON:
            # A pause fed back (a 429's Retry-After), counted for `ratelimit top`.
            self._backend.counts.paused(top, self._backend.now())


class SQLiteGroupHandle(_Unavailable[Sequence[float]]):
    """A composite's limits (or a limiter and its learned pace), in one transaction."""

    __slots__ = ("_group",)

    def __init__(
        self,
        backend: Owner,
        name: str,
        inner: MemoryGroupHandle,
        local: Fallback[Sequence[float]] | None,
    ) -> None:
        super().__init__(backend, name, inner, local)
        self._group = inner

    def throttle(self, decided: float | None, at: float | None) -> None:
        """A refusal of the request decided at ``decided`` to go at ``at``: the learned pace cuts its rate."""
        self._lost("throttle", lambda: self._group.throttle(decided, at), lambda local: None)

    async def throttle_async(self, decided: float | None, at: float | None) -> None:
        await self._off_loop(lambda: self.throttle(decided, at))

    def rate(self) -> float:
        """The learned pace's rate now (``BackendUnavailable`` while the file cannot be read)."""
        return self._group.rate()
