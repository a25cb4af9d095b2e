"""The limiter front: validate, reserve once, sleep exactly the wait.

Every limiter is this front over a store's handle. An acquire makes one call to the
store, which decides and records the grant in one atomic step (a *reservation*), then
sleeps the wait it was given, outside any lock: no polling, and grants come out in
arrival order.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast, overload, runtime_checkable

from .. import _validate
from .._clock import Clock, SystemClock, checked_clock
from .._errors import AcquireTimeout
from .._events import EVERYONE, Denied, Emitter, Event, Granted, Paused, Throttled
from .._headers.parse import RateLimitInfo, parse_rate_limit_headers
from .._stores.keys import Keyed
from .._stores.landing import shielded
from .._stores.memory import MemoryBackend
from .._stores.records import Override, checked_override
from .._stores.stats import LimiterStats, Stats, weight
from .._stores.store import Backend, Handle, Level, Leveled, Pacing, TakesLate
from .._stores.unfinished import finish
from .._wrap import wrap
from .adaptive import LastGrant
from .feedback import throttled
from .keyed import Keyable
from .named import Named, covers, equal
from .reservation import Reservation
from .run_time import apply

__all__ = [
    "Acquirer",
    "Decorator",
    "Limiter",
    "LimiterStats",
    "acquire_level",
    "acquire_level_async",
    "difference",
    "placed",
]

logger = logging.getLogger("ratelimit")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: ``timeout=None``: no wait is too long.
_FOREVER = math.inf


@runtime_checkable
class Acquirer(Protocol):
    """The interface every limiter implements; program against this.

    ``acquire`` blocks until granted and returns the wait; ``try_acquire`` never
    blocks; ``charge`` takes tokens without asking; ``settle`` squares a grant's
    estimate with the call's real cost. The ``_async`` twins do the same for asyncio.
    """

    def acquire(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> float: ...

    def try_acquire(self, tokens: float = 1.0) -> bool: ...

    async def acquire_async(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> float: ...

    async def try_acquire_async(self, tokens: float = 1.0) -> bool: ...

    def refund(self, tokens: float = 1) -> None: ...

    async def refund_async(self, tokens: float = 1) -> None: ...

    def charge(self, tokens: float) -> None: ...

    async def charge_async(self, tokens: float) -> None: ...

    def settle(self, estimate: float, actual: float) -> None: ...

    async def settle_async(self, estimate: float, actual: float) -> None: ...

    def feedback(self, headers: Any, status: int | None = None) -> RateLimitInfo: ...

    async def feedback_async(self, headers: Any, status: int | None = None) -> RateLimitInfo: ...


def placed(backend: object, name: object, clock: object) -> tuple[Backend, str | None, Clock]:
    """Where a limit keeps its state and its time, checked: ``(backend, name, clock)``,
    with the in-process store and real time for ``None``."""
    checked = checked_clock(clock)
    if backend is None:
        backend = MemoryBackend()
    elif isinstance(backend, str):
        raise TypeError(
            f"backend must be a store instance, got the text {backend!r}: "
            "for a URL use RedisBackend.from_url(url), for a file SQLiteBackend(path)"
        )
    elif isinstance(backend, type) or not hasattr(backend, "bind"):
        raise TypeError(f"backend must be a MemoryBackend, RedisBackend or SQLiteBackend instance, got {backend!r}")
    store: Backend = backend  # type: ignore[assignment]
    return store, _validate.name(name, store, shared=store.shared), checked or SystemClock()


class Limiter(Keyable, ABC, Generic[T]):
    """Shared front of every limiter; ``T`` is what one request's ``tokens`` becomes."""

    __slots__ = (
        "__weakref__",
        "_backend",
        "_clock",
        "_events",
        "_fast_most",
        "_handle",
        "_last_grant",
        "_name",
        "_named",
        "_pacing",
        "_place",
        "_shadow",
        "_stats",
    )

    _handle: Handle[T]

    def __init__(self, *, backend: Backend | None, name: object, clock: Clock | None) -> None:
        self._backend, self._name, self._clock = placed(backend, name, clock)
        # What a store binds: the name, or the name and key of a for_key view.
        self._place: str | Keyed | None = self._place_of(self._name)
        # A plain int up to this many tokens needs no further checks (see _tokens).
        self._fast_most: float = 0
        # Shadow mode: decide and record, but never wait or refuse.
        self._shadow = False
        self._events = Emitter()
        self._stats = Stats()
        # A learned pace (adaptive=) and each caller's latest grant; None skips both.
        self._pacing: Pacing | None = None
        self._last_grant: LastGrant | None = None
        # Each caller's grant for a refund or settle to name, made at the first give-back.
        self._named: Named[T] | None = None

    # -- keys (keyed.py) ------------------------------------------------------------

    def _unnamed_in_process(self) -> bool:
        return self._name is None

    def _idle(self) -> bool:
        # A learned pace's group holds the limiter's own state beside the pace.
        return self._backend.idle(self._pacing if self._pacing is not None else self._handle)

    def _adopt(self, parent: Any) -> None:
        # The limiter's subscribers hear every key's events.
        self._events = parent._events

    # -- what subclasses provide --------------------------------------------------

    @abstractmethod
    def _tokens(self, tokens: object, name: str = "tokens", *, zero: bool = False, cost: bool = False) -> T:
        """Validate one request's ``tokens`` (argument ``name``), raising ``ValueError`` or
        ``TypeError``. ``zero``: 0 is valid; ``cost``: may exceed the largest request."""

    @abstractmethod
    def _difference(self, estimate: T, actual: T) -> tuple[T | None, T | None]:
        """What settling ``estimate`` against ``actual`` gives back and what it
        charges (``None``: nothing)."""

    # -- properties ---------------------------------------------------------------

    @property
    def name(self) -> str | None:
        """The shared budget's name (``None`` for private in-process state)."""
        return self._name

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- events and counters --------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` on this limiter's events (:class:`~ratelimit.events.Granted`,
        ``Denied``, ``Paused``); returns a function that unsubscribes it."""
        return self._events.subscribe(callback)

    def stats(self) -> LimiterStats:
        """A snapshot of this limiter object's counters."""
        return self._stats.snapshot()

    @property
    def shadow(self) -> bool:
        """Whether this limiter is in shadow mode: it decides, records and counts every
        request as usual (``stats()``, events, metrics), but never makes a caller wait
        nor refuses one."""
        return self._shadow

    def _shadowed(self, tokens: T, wait: float, at: float) -> None:
        if wait == -math.inf:
            self._never(tokens)
        # The decision stands in the store and the counters; only the caller ignores it.
        if wait >= 0 and self._last_grant is not None:
            self._last_grant.saw(wait, at)
        if self._events.callbacks or EVERYONE.callbacks:
            w = weight(tokens)
            self._events.emit(Granted(self._name, w, wait, True) if wait >= 0 else Denied(self._name, w, -wait, True))

    def _granted(self, tokens: T, wait: float) -> None:
        # Callers check for listeners first: on the hot path, no call when nobody listens.
        self._events.emit(Granted(self._name, weight(tokens), wait))

    def _never(self, tokens: T) -> None:
        """Called with a request the store refused for ever (a wait of ``inf``): raise
        ``ValueError`` if no limit in force can grant it (``SingleLimiter``)."""

    def _denied(self, tokens: T, needed: float) -> None:
        if needed == math.inf:
            self._never(tokens)
        if self._events.callbacks or EVERYONE.callbacks:
            self._events.emit(Denied(self._name, weight(tokens), needed))

    # -- acquiring ----------------------------------------------------------------

    def acquire(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> float:
        """Block until ``tokens`` are granted; return the seconds waited.

        Args:
            tokens: the request's weight (an LLM call may cost 500). Must be > 0 and
                no more than the limiter can ever grant at once.
            timeout: the longest wait acceptable, in seconds (or a ``timedelta``);
                ``None`` waits as long as needed.

        Raises:
            AcquireTimeout: the grant needs longer than ``timeout`` (or a leaky
                bucket's queue is full). Raised at once, without sleeping and without
                consuming anything; ``retry_after`` holds the wait it needed.
            ValueError: ``tokens`` or ``timeout`` out of range.

        If the sleep is interrupted (``KeyboardInterrupt``, a signal handler raising),
        the reserved tokens are given back before the exception propagates.
        """
        if (tokens.__class__ is float or tokens.__class__ is int) and tokens > 0.0 and tokens <= self._fast_most:
            # A plain limiter and the usual argument (see try_acquire).
            n: T = tokens  # type: ignore[assignment]
            wait, at = self._handle.reserve(n, _FOREVER if timeout is None else _validate.timeout_seconds(timeout))
            if wait == 0.0:
                if self._events.callbacks or EVERYONE.callbacks:
                    self._granted(n, 0.0)
                return 0.0
        else:
            n = self._tokens(tokens)
            max_wait = _FOREVER if timeout is None else _validate.timeout_seconds(timeout)
            if self._shadow:
                self._shadowed(n, *self._handle.reserve(n, max_wait))
                return 0.0
            wait, at = self._handle.reserve(n, max_wait)
        if wait < 0:
            self._denied(n, -wait)
            raise AcquireTimeout(-wait)
        if self._last_grant is not None:
            self._last_grant.saw(wait, at)
        if self._named is not None:
            self._named.saw(n, at)
        if wait > 0:
            try:
                self._clock.sleep(wait)
            except BaseException:
                if self._named is not None:
                    self._named.forget()  # withdrawn here: no settle may name it again
                self._give_back(n, at)
                raise
        if self._events.callbacks or EVERYONE.callbacks:
            self._granted(n, wait)
        return wait

    def try_acquire(self, tokens: float = 1.0) -> bool:
        """Take ``tokens`` if they can be granted right now; never blocks."""
        # The hottest path. A plain float or int in (0, _fast_most] is valid as it stands
        # (NaN fails the comparison), and a plain limiter (_fast_most set: no shadow, no
        # grant remembered) has nothing else to do. The default is a float: the stores'
        # arithmetic runs faster on floats alone.
        if (tokens.__class__ is float or tokens.__class__ is int) and tokens > 0.0 and tokens <= self._fast_most:
            wait = self._handle.reserve(tokens, 0.0)[0]  # type: ignore[arg-type]
            if self._events.callbacks or EVERYONE.callbacks:
                self._events.emit(Granted(self._name, tokens, 0.0) if wait >= 0 else Denied(self._name, tokens, -wait))
            if wait >= 0.0:  # noqa: SIM103 (a compare then a jump keeps CPython's float specialisation)
                return True
            return False
        n = self._tokens(tokens)
        wait, at = self._handle.reserve(n, 0.0)
        if self._shadow:
            self._shadowed(n, wait, at)
            return True
        if wait >= 0:
            if self._last_grant is not None:
                self._last_grant.saw(wait, at)
            if self._named is not None:
                self._named.saw(n, at)
            if self._events.callbacks or EVERYONE.callbacks:
                self._granted(n, 0.0)
            return True
        self._denied(n, -wait)
        return False

    async def acquire_async(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> float:
        """:meth:`acquire` for asyncio: suspends the task, not the thread. Cancelling the
        task gives the reserved tokens back (once the store's answer lands, if it is
        still deciding), so ``asyncio.wait_for(limiter.acquire_async(), 5)`` wastes no
        budget."""
        n = self._tokens(tokens)
        wait, at = await self._reserve_async(n, _max_wait(timeout))
        if self._shadow:
            self._shadowed(n, wait, at)
            return 0.0
        if wait < 0:
            self._denied(n, -wait)
            raise AcquireTimeout(-wait)
        if self._last_grant is not None:
            self._last_grant.saw(wait, at)
        if self._named is not None:
            self._named.saw(n, at, asyncio.current_task())
        if wait > 0:
            try:
                await self._clock.sleep_async(wait)
            except BaseException:
                if self._named is not None:
                    self._named.forget(asyncio.current_task())
                await self._give_back_async(n, at, outlasting=True)
                raise
        if self._events.callbacks or EVERYONE.callbacks:
            self._granted(n, wait)
        return wait

    async def _reserve_async(self, tokens: T, max_wait: float) -> tuple[float, float]:
        handle = self._handle
        if not handle.suspends:
            return await handle.reserve_async(tokens, max_wait)
        here = handle.reserve_here(tokens, max_wait)
        if here is not None:
            return here
        # A grant that lands once this task has left (cancelled) is given back: by the
        # store's call itself where it takes ``late``, or else by the call run in a task
        # of its own.
        late = functools.partial(self._landed, tokens)
        if getattr(handle, "takes_late", False):
            return await cast("TakesLate[T]", handle).reserve_async(tokens, max_wait, late)
        return await shielded(handle.reserve_async(tokens, max_wait), late)

    async def _landed(self, tokens: T, decision: tuple[float, float] | tuple[float, float, Level | None]) -> None:
        """A decision on ``tokens`` that landed for a task that left: a grant goes back."""
        if decision[0] >= 0:
            await self._give_back_async(tokens, decision[1])

    async def try_acquire_async(self, tokens: float = 1.0) -> bool:
        """:meth:`try_acquire` for asyncio."""
        if (tokens.__class__ is float or tokens.__class__ is int) and tokens > 0.0 and tokens <= self._fast_most:
            # A plain limiter and the usual argument, as in try_acquire.
            wait = (await self._reserve_async(tokens, 0.0))[0]  # type: ignore[arg-type]
            if self._events.callbacks or EVERYONE.callbacks:
                self._events.emit(Granted(self._name, tokens, 0.0) if wait >= 0 else Denied(self._name, tokens, -wait))
            return wait >= 0
        n = self._tokens(tokens)
        wait, at = await self._reserve_async(n, 0.0)
        if self._shadow:
            self._shadowed(n, wait, at)
            return True
        if wait >= 0:
            if self._last_grant is not None:
                self._last_grant.saw(wait, at)
            if self._named is not None:
                self._named.saw(n, at, asyncio.current_task())
            if self._events.callbacks or EVERYONE.callbacks:
                self._granted(n, 0.0)
            return True
        self._denied(n, -wait)
        return False

    # -- reserving: the grant now, the wait the caller's --------------------------

    def reserve(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> Reservation[T]:
        """Take ``tokens`` as :meth:`acquire` would, but return at once: when to go.

        The grant is decided and recorded now, in arrival order with every acquire; the
        caller is told its wait instead of sleeping it. A scheduler runs the call at
        :attr:`Reservation.due` (a task queue's ``eta``), or gives the place back with
        :meth:`Reservation.cancel` while it is not yet due.

        Args:
            tokens: as for :meth:`acquire`.
            timeout: the longest wait acceptable, as for :meth:`acquire`.

        Raises:
            AcquireTimeout: the grant needs longer than ``timeout`` (or a leaky
                bucket's queue is full): nothing is reserved; ``retry_after`` holds
                the wait it needed.
            ValueError: ``tokens`` or ``timeout`` out of range.
            BackendUnavailable: the store cannot be reached and the backend says to
                raise (``"local"`` reserves on the local fallback, ``"allow"`` grants
                at once with nothing recorded).

        A shadow limiter records the reservation and says to go at once. Counted and
        observed as an acquire granted with its wait.
        """
        n = self._tokens(tokens)
        return self._reservation(n, *self._handle.reserve(n, _max_wait(timeout)))

    async def reserve_async(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> Reservation[T]:
        """:meth:`reserve` for asyncio; a task cancelled while the store decides keeps
        nothing."""
        n = self._tokens(tokens)
        wait, at = await self._reserve_async(n, _max_wait(timeout))
        return self._reservation(n, wait, at, asyncio.current_task())

    def _reservation(self, tokens: T, wait: float, at: float, owner: object = None) -> Reservation[T]:
        wait, at, cell = self._reserved(tokens, wait, at, owner)
        return Reservation(tokens, wait, at, self._clock, self._withdraw, self._withdraw_async, cell)

    def _reserved(self, tokens: T, wait: float, at: float, owner: object) -> tuple[float, float, list[float] | None]:
        """A reservation's decision as the caller is told it, recorded, observed and
        named (the cell a refund names it by); an ``AcquireTimeout`` for a refusal."""
        if self._shadow:
            self._shadowed(tokens, wait, at)
            # Never made to wait, so never withdrawn either; a refusal grants at once.
            wait, at = 0.0, (at if wait >= 0 else math.nan)
        elif wait < 0:
            self._denied(tokens, -wait)
            raise AcquireTimeout(-wait)
        else:
            if self._last_grant is not None:
                self._last_grant.saw(wait, at)
            if self._events.callbacks or EVERYONE.callbacks:
                self._granted(tokens, wait)
        # Named for a refund or a settle by the same caller, as an acquire's grant is.
        cell = None if self._named is None or self._shadow else self._named.saw(tokens, at, owner)
        return wait, at, cell

    def _acquire_level(self, tokens: float, timeout: float | timedelta | None) -> tuple[float, Level | None]:
        """:meth:`acquire`, and the level its decision left, told by the same store call
        (``Leveled``); ``None`` where the store or this decision cannot tell it, or the
        limiter is in shadow mode (its grants go whatever the level). The grant is
        reserved and its wait slept here: an interrupted sleep withdraws it (as
        :meth:`Reservation.cancel`). See :func:`acquire_level`."""
        # A plain limiter and the usual argument need no further checks (see acquire).
        if (tokens.__class__ is float or tokens.__class__ is int) and tokens > 0.0 and tokens <= self._fast_most:
            n: T = tokens  # type: ignore[assignment]
        else:
            n = self._tokens(tokens)
        handle = self._handle
        level = None
        if hasattr(handle, "reserve_level"):
            wait, at, level = cast("Leveled[T]", handle).reserve_level(n, _max_wait(timeout))
        else:
            wait, at = handle.reserve(n, _max_wait(timeout))
        wait, at, cell = self._reserved(n, wait, at, None)
        if wait > 0:
            reservation = Reservation(n, wait, at, self._clock, self._withdraw, self._withdraw_async, cell)
            try:
                self._clock.sleep(wait)
            except BaseException:
                reservation.cancel()
                raise
        return wait, None if self._shadow else level

    async def _acquire_level_async(
        self, tokens: float, timeout: float | timedelta | None
    ) -> tuple[float, Level | None]:
        """:meth:`_acquire_level` for asyncio: a task cancelled while the store decides
        keeps nothing (a grant that lands afterwards is given back), nor one cancelled
        while it waits."""
        n = self._tokens(tokens)
        handle = self._handle
        level = None
        if not hasattr(handle, "reserve_level_async"):
            wait, at = await self._reserve_async(n, _max_wait(timeout))
        elif not handle.suspends:
            wait, at, level = await cast("Leveled[T]", handle).reserve_level_async(n, _max_wait(timeout))
        else:
            # As _reserve_async's: a grant landing after a cancel is given back.
            late = functools.partial(self._landed, n)
            if getattr(handle, "takes_late", False):
                wait, at, level = await cast("TakesLate[T]", handle).reserve_level_async(n, _max_wait(timeout), late)
            else:
                leveled = cast("Leveled[T]", handle).reserve_level_async(n, _max_wait(timeout))
                wait, at, level = await shielded(leveled, late)
        task = asyncio.current_task()
        wait, at, cell = self._reserved(n, wait, at, task)
        if wait > 0:
            reservation = Reservation(n, wait, at, self._clock, self._withdraw, self._withdraw_async, cell)
            try:
                await self._clock.sleep_async(wait)
            except BaseException:
                await reservation.cancel_async()
                raise
        return wait, None if self._shadow else level

    # -- reading the wait, forgetting the usage ------------------------------------

    def peek(self, tokens: float = 1.0) -> float:
        """The wait a request of ``tokens`` would get now, in seconds; nothing recorded.

        What :meth:`reserve` would tell it with no ``timeout``, or where it would be
        refused (a leaky bucket's full queue) what ``AcquireTimeout.retry_after`` says.
        ``0.0``: it would go at once; ``inf``: more than the limit, as changed at run
        time (``set_limit``), could ever grant. Nothing is taken, written or counted;
        the answer is a snapshot other callers may change a moment later.

        Places given back by cancelled reservations are not offered, so after
        cancellations a request may get less than ``peek`` said. On a store that
        cannot be reached the backend's ``on_unavailable`` applies:
        ``BackendUnavailable``, the local fallback's answer, or ``0.0`` (fail open).
        """
        n = self._tokens(tokens)
        wait = self._handle.peek(n)
        if wait == math.inf:
            self._never(n)
        return wait

    async def peek_async(self, tokens: float = 1.0) -> float:
        """:meth:`peek` for asyncio."""
        n = self._tokens(tokens)
        wait = await self._handle.peek_async(n)
        if wait == math.inf:
            self._never(n)
        return wait

    def reset(self) -> None:
        """Forget this limiter's usage: its budget is whole again, as a new limiter's.

        For every process sharing it: grants, reservations and pauses from feedback are
        forgotten (reservations handed out keep their times but no longer count). A
        limit changed by an operator (``set_limit``) stays; a learned rate
        (``adaptive=``) starts over; a budget with priorities forgets both lanes. The
        counters of :meth:`stats` stay.
        """
        self._handle.reset()

    async def reset_async(self) -> None:
        """:meth:`reset` for asyncio."""
        await self._handle.reset_async()

    # -- changing the limit at run time (run_time.py) ------------------------------

    def set_limit(
        self,
        rate: float | Sequence[float | None] | None = None,
        burst: float | Sequence[float | None] | None = None,
        ttl: float | timedelta | Sequence[float | timedelta | None] | None = None,
    ) -> None:
        """Change this limit at run time, from its next decision on.

        ``rate`` in tokens per second (a token bucket's refill, a leaky bucket's
        leak; a window's limit becomes ``rate`` times its length), ``burst`` a
        bucket's capacity (a window has none), ``None`` keeping what the code says;
        ``ttl`` (seconds or a ``timedelta``): the change ends by itself after it. A
        new change replaces the last one whole; the state moves to the new limit
        (the tokens owed keep their count), so lowering a limit grants no burst above
        it. A ``Composite`` takes one value per member (``None``: that member is
        left as it is).

        The change is the store's, the same as ``backend.set_limit(name, ...)``: on
        a shared store every process follows it, and a limiter's change reaches the
        views of its keys (``for_key``; on Redis, the keys in use when it is made);
        a view's changes its key's budget alone. A composite's members change in
        process and on Redis (not on SQLite). Raises ``ValueError`` naming the argument and the value, or
        ``UnchangeableLimit`` (a ``ValueError``) for a limit that keeps the code's
        values; either changes nothing. See docs/run-time-limits.md.
        """
        for member, change in self._limit_changes(rate, burst, ttl):
            apply(self._backend, self._place, self._handle, self._clock, member, change, self._keys_backend())

    def reset_limit(self) -> bool:
        """Return this limit to what the code says, from its next decision on (see
        :meth:`set_limit`); whether a change was in force."""
        was = False
        for member in self._limit_members():
            was = (
                apply(self._backend, self._place, self._handle, self._clock, member, None, self._keys_backend()) or was
            )
        return was

    def _limit_changes(self, rate: object, burst: object, ttl: object) -> list[tuple[int | None, Override]]:
        """The change asked for, per member (``None``: a limiter of one algorithm)."""
        return [(None, checked_override(rate, burst, ttl))]

    def _limit_members(self) -> tuple[int | None, ...]:
        return (None,)

    def _keys_backend(self) -> Backend | None:
        """Where an unnamed limiter's views keep their budgets (a named limiter's
        change reaches its keys by name)."""
        if self._name is not None or self._key is not None:
            return None
        store: Backend = self._keys_store()
        return store

    # -- listening to the provider -------------------------------------------------

    @abstractmethod
    def _restriction(self, info: RateLimitInfo, status: int | None) -> tuple[T, float] | None:
        """What to tell the store, in this limiter's terms (``None``: nothing)."""

    def _read(
        self, headers: Any, status: int | None, now: float | None
    ) -> tuple[RateLimitInfo, tuple[T, float] | None]:
        if status is not None and (isinstance(status, bool) or not isinstance(status, int)):
            raise TypeError(f"status must be an int HTTP status or None, got {status!r}")
        # A RateLimitInfo already read (an LLM API's tokens part, say) is taken as is.
        info = headers if isinstance(headers, RateLimitInfo) else parse_rate_limit_headers(headers, now)
        return info, self._restriction(info, status)

    def feedback(self, headers: Any, status: int | None = None, *, now: float | None = None) -> RateLimitInfo:
        """Correct the budget from a response's rate-limit headers; return what they said.

        Only ever lowers the budget, atomically for every worker sharing it:
        ``remaining`` with a reset bounds every grant until the reset, spread evenly
        over it; a 429/503 with ``Retry-After`` (or ``remaining: 0`` with a reset)
        pauses every worker until then, after which grants resume at the configured
        rate, in order, without a burst. A reset already past, garbage headers or a
        higher ``remaining`` change nothing; waits are capped at an hour. With
        ``adaptive=``, a throttle (a 429, or a 503 with ``Retry-After``) also cuts the
        learned rate, once per congestion event (:class:`~ratelimit.Adaptive`).

        Args:
            headers: the response's headers (any mapping, or ``(name, value)`` pairs),
                or a :class:`RateLimitInfo` already read from them (its ``tokens``
                part, for a limiter of an LLM API's tokens).
            status: the response's HTTP status, if known.
            now: the current time as epoch seconds, for absolute resets (tests).
        """
        info, change = self._read(headers, status, now)
        if change is not None:
            self._handle.restrict(*change)
            self._restricted(status, *change)
        if self._pacing is not None and throttled(info, status):
            self._pacing.throttle(*self._refused(status))
        return info

    async def feedback_async(
        self, headers: Any, status: int | None = None, *, now: float | None = None
    ) -> RateLimitInfo:
        """:meth:`feedback` for asyncio."""
        info, change = self._read(headers, status, now)
        if change is not None:
            await self._handle.restrict_async(*change)
            self._restricted(status, *change)
        if self._pacing is not None and throttled(info, status):
            await self._pacing.throttle_async(*self._refused(status))
        return info

    def _refused(self, status: int | None) -> tuple[float | None, float | None]:
        # The refused request is the caller's own latest grant (see LastGrant).
        self._stats.count_throttled()
        self._events.emit(Throttled(self._name, status))
        return (None, None) if self._last_grant is None else self._last_grant.take()

    def _restricted(self, status: int | None, remaining: T, seconds: float) -> None:
        self._stats.count_restricted()
        self._events.emit(Paused(self._name, status, weight(remaining), seconds))

    # -- giving back --------------------------------------------------------------

    def refund(self, tokens: float = 1) -> None:
        """Give back ``tokens`` that were granted but not used.

        For a call acquired and not sent, or that used less than it reserved (an LLM
        call that spent 600 of 1,000 tokens refunds 400). The limiter never ends up
        with more budget than its algorithm allows. For a sliding window, refund within
        ``window_seconds`` of the grant: later, its tokens have aged out already.

        The refund names this caller's (thread's, task's) latest grant when that is its
        only grant since it last gave back and took at least ``tokens``; a token bucket
        then takes the tokens back even with grants queued behind it. Otherwise, with
        grants queued, a token bucket's refund frees nothing (it could put a new grant
        beside a reserved one).
        """
        n = self._tokens(tokens)
        self._handle.refund(n, self._naming().take(lambda held: covers(held, n)))

    async def refund_async(self, tokens: float = 1) -> None:
        """:meth:`refund` for asyncio."""
        n = self._tokens(tokens)
        at = self._naming().take(lambda held: covers(held, n), asyncio.current_task())
        await self._handle.refund_async(n, at)

    def _naming(self) -> Named[T]:
        named = self._named
        if named is None:
            named = self._named = Named()
            # From now on every grant is remembered (no fast path), and the store names
            # grants made at once too, so a refund frees its own slot, never another's.
            self._fast_most = 0
            self._handle.name_grants()
        return named

    # -- costs known after the call ------------------------------------------------

    def charge(self, tokens: float) -> None:
        """Take ``tokens`` now, without waiting, into debt if need be.

        For a cost learnt only after the call (an LLM's output tokens, a query's rows).
        Never refused, never waits: the tokens were spent already. They are recorded
        behind every grant already promised, and later requests wait the debt off: an
        emptied ``TokenBucket(10, 1)`` charged 5 makes the next acquire wait 5 s longer.
        :meth:`settle` squares an estimate with the real cost; a refund right after a
        charge by the same caller takes back from it.

        Args:
            tokens: the cost: > 0, and finite. It may be more than the limiter could
                ever grant at once (a call's real cost is what it is): the debt is
                then longer than a full refill.

        Raises:
            ValueError: ``tokens`` out of range.
            BackendUnavailable: the store cannot be reached and the backend says to
                raise (``on_unavailable="local"`` charges the local fallback;
                ``"allow"`` loses the charge, with a warning in the log).
        """
        n = self._tokens(tokens, cost=True)
        self._charged(n, self._handle.charge(n))

    async def charge_async(self, tokens: float) -> None:
        """:meth:`charge` for asyncio; a cancellation does not stop the record."""
        n = self._tokens(tokens, cost=True)
        self._charged(n, await self._settled(self._handle.charge_async(n)), asyncio.current_task())

    def _charged(self, tokens: T, name: float | None, owner: object = None) -> None:
        self._stats.count_charged(weight(tokens))
        named = self._naming()
        # A charge is the caller's latest take, and the one a refund after it means.
        named.forget(owner)
        if name is not None:
            named.saw(tokens, name, owner)

    async def _settled(self, call: Coroutine[Any, Any, R]) -> R:
        # A record of what was spent survives a cancellation during the store's write.
        if self._handle.suspends:
            return await asyncio.shield(call)
        return await call

    def settle(self, estimate: float, actual: float) -> None:
        """Square a grant of ``estimate`` with what the call really cost, ``actual``.

        Acquire the estimate before the call, settle once the cost is known: less gives
        ``estimate - actual`` back as :meth:`refund` would, more is charged
        ``actual - estimate`` as :meth:`charge` would, without waiting. ``actual=0``
        gives the whole estimate back.

        It names this caller's (thread's, task's) latest grant when that is its only
        grant since it last gave back and took exactly ``estimate``: a token bucket
        then takes the unused tokens back even with grants queued behind it, which
        keeps a budget of LLM tokens in use when estimates run high.

        Args:
            estimate: the tokens acquired for the call, as for :meth:`acquire`.
            actual: the tokens the call used: >= 0, and finite (more than the
                largest request is a charge into a longer debt).

        Raises:
            ValueError: ``estimate`` or ``actual`` out of range.
            BackendUnavailable: as for :meth:`charge`.
        """
        est = self._tokens(estimate, "estimate")
        back, more = self._difference(est, self._tokens(actual, "actual", zero=True, cost=True))
        at = self._naming().take(lambda held: equal(held, est))
        # Refund first: after a charge, reservations are ahead and an unnamed refund frees nothing.
        if back is not None:
            self._handle.refund(back, at)
        if more is not None:
            self._charged(more, self._handle.charge(more))

    async def settle_async(self, estimate: float, actual: float) -> None:
        """:meth:`settle` for asyncio; a cancellation does not stop it."""
        est = self._tokens(estimate, "estimate")
        back, more = self._difference(est, self._tokens(actual, "actual", zero=True, cost=True))
        owner = asyncio.current_task()
        at = self._naming().take(lambda held: equal(held, est), owner)
        if back is not None:
            await self._settled(self._handle.refund_async(back, at))
        if more is not None:
            self._charged(more, await self._settled(self._handle.charge_async(more)), owner)

    def _withdraw(self, tokens: T, at: float) -> None:
        """Give back a cancelled ``Reservation`` of ``tokens`` at store time ``at``;
        counted once given back, raising if it was not."""
        self._handle.refund(tokens, at)
        self._stats.count_cancelled()

    async def _withdraw_async(self, tokens: T, at: float) -> None:
        await self._settled(self._handle.refund_async(tokens, at))
        self._stats.count_cancelled()

    def _give_back(self, tokens: T, at: float) -> None:
        self._stats.count_cancelled()
        try:
            self._handle.refund(tokens, at)
        except Exception:
            # The interruption that brought us here matters more; say what was lost.
            logger.warning("could not give back a cancelled reservation of %r on %r", tokens, self, exc_info=True)

    async def _give_back_async(self, tokens: T, at: float, *, outlasting: bool = False) -> None:
        """Give back a grant its task no longer wants. ``outlasting``: the task is
        being cancelled, and the give-back must outlast it."""
        self._stats.count_cancelled()
        handle = self._handle
        if outlasting and handle.suspends and self._blocking_calls():
            # In a thread: a cancellation (asyncio.run cancels every task left) could stop
            # a store call half made, and a refund made twice frees another grant's place.
            what = f"a cancelled reservation of {tokens!r} on {self!r}"
            await finish(functools.partial(handle.refund, tokens, at), what)
            return
        try:
            await handle.refund_async(tokens, at)
        except Exception:
            logger.warning("could not give back a cancelled reservation of %r on %r", tokens, self, exc_info=True)

    def _blocking_calls(self) -> bool:
        """Whether the store takes calls from threads (not a Redis store of an asyncio client)."""
        return self._backend.calls_from_threads()

    # -- sugar: context managers and decorators -----------------------------------

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def __aenter__(self) -> None:
        await self.acquire_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> Callable[P, R]: ...

    def __call__(self, func: Callable[..., Any], /) -> Callable[..., Any]:
        """Use the limiter as a decorator: one token per call (see :meth:`decorate`)."""
        return self.decorate()(func)

    def decorate(self, tokens: float = 1, timeout: float | timedelta | None = None) -> Decorator:
        """A decorator that acquires ``tokens`` before every call of the function.

        Works on plain and ``async def`` functions alike::

            @limiter.decorate(tokens=5)
            async def embed(batch): ...
        """
        self._tokens(tokens)
        if timeout is not None:
            _validate.timeout_seconds(timeout)
        return Decorator(self, tokens, timeout)


def acquire_level(limiter: object, tokens: float, timeout: float | timedelta | None) -> tuple[float, Level | None]:
    """``limiter.acquire(tokens, timeout)`` and the level its decision left (see
    ``store.Level``), for the serving gate's ``RateLimit`` field, from the decision's
    own store call. The level is ``None`` where the limiter, its store or this decision
    cannot tell it; a limiter of another kind is acquired from as it is."""
    if isinstance(limiter, Limiter):
        return limiter._acquire_level(tokens, timeout)
    return limiter.acquire(tokens, timeout), None  # type: ignore[attr-defined]


async def acquire_level_async(
    limiter: object, tokens: float, timeout: float | timedelta | None
) -> tuple[float, Level | None]:
    """:func:`acquire_level` for asyncio: a task cancelled while the store decides or
    while it waits keeps nothing."""
    if isinstance(limiter, Limiter):
        return await limiter._acquire_level_async(tokens, timeout)
    return await limiter.acquire_async(tokens, timeout), None  # type: ignore[attr-defined]


def _max_wait(timeout: float | timedelta | None) -> float:
    return math.inf if timeout is None else _validate.timeout_seconds(timeout)


def difference(estimate: float, actual: float) -> tuple[float | None, float | None]:
    """What settling ``estimate`` against ``actual`` gives back and charges (one weight)."""
    if actual < estimate:
        return estimate - actual, None
    if actual > estimate:
        return None, actual - estimate
    return None, None


class Decorator:
    """What ``limiter.decorate(tokens=..., timeout=...)`` returns: applied to a
    function, it acquires before each call."""

    __slots__ = ("_limiter", "_timeout", "_tokens")

    def __init__(self, limiter: Limiter[Any], tokens: float, timeout: float | timedelta | None) -> None:
        self._limiter = limiter
        self._tokens = tokens
        self._timeout = timeout

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> Callable[P, R]: ...

    def __call__(self, func: Callable[..., Any], /) -> Callable[..., Any]:
        limiter, tokens, timeout = self._limiter, self._tokens, self._timeout

        def run(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            limiter.acquire(tokens, timeout)
            return fn(*args, **kwargs)

        async def run_async(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            await limiter.acquire_async(tokens, timeout)
            return await fn(*args, **kwargs)

        return wrap(func, run, run_async)
