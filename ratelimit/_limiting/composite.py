"""Several limits at once, granted all-or-nothing."""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING

from .. import _validate
from .._clock import Clock, checked_clock
from .._errors import AcquireTimeout, RateLimitError
from .._headers.parse import RateLimitInfo
from .._stores.records import WINDOWS, Override
from .._stores.store import Backend, Level
from .concurrency import ConcurrencyLimit, Entries, Lease, entrant, rebound, release_all, release_all_async
from .feedback import restriction
from .front import Decorator, Limiter
from .limiters import SingleLimiter
from .quota import calendar_clock
from .reservation import Reservation
from .run_time import per_member

__all__ = ["Composite", "CompositeHold"]

Tokens = float | Sequence[float]


class Composite(Limiter[Sequence[float]]):
    """Acquire from several limits together: all of them grant, or none is charged.

    For a provider that enforces more than one limit (100 requests/s *and* 5,000 an
    hour; an LLM API's requests/min *and* tokens/min)::

        llm = Composite([TokenBucket(50, 50 / 60), TokenBucket(40_000, 40_000 / 60)])
        llm.acquire(tokens=[1, 1_200])   # one request, 1,200 tokens

    The grant happens when every limit allows it, at the latest of their times; a
    refusal by any one of them charges none. The members only describe the limits:
    the composite keeps its own state under its own ``backend`` and ``name`` (in
    Redis, one hash slot, one script call). ``shadow=True`` decides and counts but
    never holds a caller (see :class:`~ratelimit.TokenBucket`).

    ``tokens`` is one number for every member, or one per member; a member may be
    given 0 (it still waits its turn there, and takes nothing) as long as one is given
    more. A cost known only after the call is settled member by member::

        llm.acquire([1, 1_200])     # the estimate
        llm.settle([1, 1_200], [1, 950])   # the real cost: 250 tokens given back

    With a :class:`~ratelimit.ConcurrencyLimit` among the members, the composite also
    holds a slot for each request, and is used with :meth:`hold` only (no shadow)::

        github = Composite([TokenBucket(80, 5_000 / 3600), ConcurrencyLimit(100)], backend=..., name="github")
        with github.hold():
            response = client.get(url)

    ``tokens`` then gives one number per rate limit (each ConcurrencyLimit member
    holds one slot).
    """

    __slots__ = ("_algs", "_least", "_most", "_names", "_ones", "_places", "_slot_places", "_slots")

    def __init__(
        self,
        limits: Sequence[SingleLimiter | ConcurrencyLimit],
        *,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        shadow: bool = False,
    ) -> None:
        if not isinstance(shadow, bool):
            raise TypeError(f"shadow must be a bool, got {type(shadow).__name__} {shadow!r}")
        if isinstance(limits, (str, bytes)) or not isinstance(limits, Sequence):
            raise TypeError(f"limits must be a sequence of limiters, got {limits!r}")
        if not limits:
            raise ValueError("limits must name at least one limiter, got an empty sequence")
        for i, member in enumerate(limits):
            if not isinstance(member, (SingleLimiter, ConcurrencyLimit)):
                raise TypeError(
                    f"limits[{i}] must be a TokenBucket, LeakyBucket, SlidingWindow, Quota or ConcurrencyLimit, "
                    f"got {member!r}"
                )
            if isinstance(member, SingleLimiter) and member.low_share is not None:
                raise ValueError(
                    f"limits[{i}] has low_share={member.low_share:g}: a composite does not take priorities "
                    f"(build its members without low_share)"
                )
            if isinstance(member, SingleLimiter) and member.adaptive is not None:
                raise ValueError(
                    f"limits[{i}] has adaptive={member.adaptive!r}: a composite does not learn its members' rates "
                    f"yet (build its members without adaptive, or use the adaptive limiter on its own)"
                )
            if isinstance(member, SingleLimiter) and member.lease is not None:
                raise ValueError(
                    f"limits[{i}] has lease={member.lease:g}: a composite decides its limits together in the "
                    f"store and does not lease yet (build its members without lease)"
                )
        rates = [member for member in limits if isinstance(member, SingleLimiter)]
        if not rates:
            raise ValueError(
                "limits must hold at least one rate limit (TokenBucket, LeakyBucket, SlidingWindow, Quota): "
                "a ConcurrencyLimit alone is held with its own hold()"
            )
        # A calendar quota among the members counts its periods on Unix time.
        clock = calendar_clock([member.algorithm_for(clock) for member in rates], checked_clock(clock))
        super().__init__(backend=backend, name=name, clock=clock)
        self._algs = tuple(member.algorithm_for(clock) for member in rates)
        self._most = tuple(alg.most for alg in self._algs)
        # A plain number in (0, _least] passes every member's check (see _tokens).
        least = min(self._most)
        self._least = least if least < math.inf else sys.float_info.max
        self._ones = (1.0,) * len(self._most)  # the default request, made once
        self._names = tuple(member.most_name_for(clock) for member in rates)
        # Where each rate limit and each slot stand in `limits`: what failing_limit says.
        self._places = tuple(i for i, member in enumerate(limits) if isinstance(member, SingleLimiter))
        self._slot_places = tuple(i for i, member in enumerate(limits) if isinstance(member, ConcurrencyLimit))
        # Slots are kept under the composite's own name, each at its place in the list.
        self._slots = tuple(
            rebound(member, backend=self._backend, name=self._place, member=i, clock=clock)
            for i, member in enumerate(limits)
            if isinstance(member, ConcurrencyLimit)
        )
        if shadow and self._slots:
            raise ValueError(
                "shadow=True with a ConcurrencyLimit among the limits: a shadow never holds a caller, and a slot "
                "is nothing but holding; shadow the rate limits alone"
            )
        self._handle = self._backend.bind_group(self._place, self._algs, clock)
        self._handle.stats = self._stats
        self._shadow = shadow

    def _tokens(
        self, tokens: object, name: str = "tokens", *, zero: bool = False, cost: bool = False
    ) -> Sequence[float]:
        if (tokens.__class__ is float or tokens.__class__ is int) and 0 < tokens <= self._least:
            # One number every member's check passes (NaN fails the comparison).
            return self._ones if tokens == 1 else (float(tokens),) * len(self._most)
        mosts = (math.inf,) * len(self._most) if cost else self._most
        limits = tuple(zip(mosts, self._names, strict=True))
        if not isinstance(tokens, Sequence) or isinstance(tokens, (str, bytes)):
            return tuple(_validate.tokens(tokens, most, most_name, name, zero=zero) for most, most_name in limits)
        if len(tokens) != len(limits):
            raise ValueError(f"{name} must give one number per limit ({len(limits)}), got {tokens!r}")
        # Each member may be given 0, but not every one (as tokens=0 is refused).
        checked = tuple(
            _validate.tokens(n, most, most_name, name, zero=True)
            for n, (most, most_name) in zip(tokens, limits, strict=True)
        )
        if not zero and not any(n > 0 for n in checked):
            raise ValueError(f"{name} must give at least one limit more than 0, got {tokens!r}")
        return checked

    def _difference(
        self, estimate: Sequence[float], actual: Sequence[float]
    ) -> tuple[Sequence[float] | None, Sequence[float] | None]:
        back = tuple(e - a if e > a else 0.0 for e, a in zip(estimate, actual, strict=True))
        more = tuple(a - e if a > e else 0.0 for e, a in zip(estimate, actual, strict=True))
        return (back if any(back) else None), (more if any(more) else None)

    def __len__(self) -> int:
        """How many rate limits it holds: the numbers a list of ``tokens`` gives."""
        return len(self._algs)

    def _limit_changes(self, rate: object, burst: object, ttl: object) -> list[tuple[int | None, Override]]:
        # One value per rate limit (as tokens: ConcurrencyLimit members take none).
        changes = per_member(len(self._algs), rate, burst, ttl)
        for i, change in changes:
            kind = self._algs[i].kind
            if change.burst is not None and (kind in WINDOWS or kind == "quota"):
                # Refused here for every store: a window's or quota's limit is its rate
                # times its length, and a store would have nothing to do with a burst.
                raise ValueError(
                    f"burst={change.burst!r} for limit {i}: a {'quota' if kind == 'quota' else 'window'} has no "
                    f"burst apart from its limit (set its rate: the limit becomes rate x its length)"
                )
        return [(i, change) for i, change in changes]

    def _limit_members(self) -> tuple[int | None, ...]:
        return tuple(range(len(self._algs)))

    def _idle(self) -> bool:
        return super()._idle() and all(slots._idle() for slots in self._slots)

    def _no_slots(self) -> None:
        if self._slots:
            raise TypeError(
                "this Composite holds ConcurrencyLimit slots, which must be freed after the request: "
                "use `with composite.hold(...)` (or `async with`) instead of acquire"
            )

    def _alone(self, tokens: Sequence[float], i: int) -> tuple[float, ...]:
        return tuple(n if j == i else 0.0 for j, n in enumerate(tokens))

    def _blame(self, exc: AcquireTimeout, tokens: Tokens) -> None:
        """Name the rate limit that refused (``failing_limit``): the one with the longest
        wait of its own for its part of ``tokens``, peeked one limit at a time."""
        n = self._tokens(tokens)
        if len(n) == 1:
            exc.failing_limit = self._places[0]
            return
        try:
            waits = [self._handle.peek(self._alone(n, i)) if n[i] > 0 else -1.0 for i in range(len(n))]
        except RateLimitError:
            return  # the store cannot be asked now: the refusal stands without a name
        exc.failing_limit = self._places[waits.index(max(waits))]

    async def _blame_async(self, exc: AcquireTimeout, tokens: Tokens) -> None:
        n = self._tokens(tokens)
        if len(n) == 1:
            exc.failing_limit = self._places[0]
            return
        try:
            waits = [await self._handle.peek_async(self._alone(n, i)) if n[i] > 0 else -1.0 for i in range(len(n))]
        except RateLimitError:
            return
        exc.failing_limit = self._places[waits.index(max(waits))]

    def acquire(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> float:
        if self._slots:
            self._no_slots()
        try:
            # Limiter's method named, not super(): a lookup less on every call.
            return Limiter.acquire(self, tokens, timeout)  # type: ignore[arg-type]
        except AcquireTimeout as exc:
            self._blame(exc, tokens)
            raise

    def try_acquire(self, tokens: Tokens = 1) -> bool:
        if self._slots:
            self._no_slots()
        return Limiter.try_acquire(self, tokens)  # type: ignore[arg-type]

    async def acquire_async(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> float:
        self._no_slots()
        try:
            return await super().acquire_async(tokens, timeout)  # type: ignore[arg-type]
        except AcquireTimeout as exc:
            await self._blame_async(exc, tokens)
            raise

    async def try_acquire_async(self, tokens: Tokens = 1) -> bool:
        self._no_slots()
        return await super().try_acquire_async(tokens)  # type: ignore[arg-type]

    def reserve(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> Reservation[Sequence[float]]:
        """Reserve ``tokens`` from every limit together without sleeping (see
        :meth:`Limiter.reserve`); ``cancel`` gives every limit its part back. With
        ConcurrencyLimit members it raises ``TypeError``: a slot has no time to reserve."""
        self._no_slots()
        try:
            return Limiter.reserve(self, tokens, timeout)  # type: ignore[arg-type]
        except AcquireTimeout as exc:
            self._blame(exc, tokens)
            raise

    async def reserve_async(
        self, tokens: Tokens = 1, timeout: float | timedelta | None = None
    ) -> Reservation[Sequence[float]]:
        self._no_slots()
        try:
            return await Limiter.reserve_async(self, tokens, timeout)  # type: ignore[arg-type]
        except AcquireTimeout as exc:
            await self._blame_async(exc, tokens)
            raise

    def _acquire_level(self, tokens: float, timeout: float | timedelta | None) -> tuple[float, Level | None]:
        self._no_slots()
        return Limiter._acquire_level(self, tokens, timeout)

    async def _acquire_level_async(
        self, tokens: float, timeout: float | timedelta | None
    ) -> tuple[float, Level | None]:
        self._no_slots()
        return await Limiter._acquire_level_async(self, tokens, timeout)

    def hold(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> CompositeHold:
        """Hold a slot of every ConcurrencyLimit member and take ``tokens`` from every
        rate limit, for a ``with`` (or ``async with``) block; all or nothing.

        The slots come first, in arrival order, then the rate limits' grant. A
        ``timeout`` covers the whole wait; if it runs out (or the wait is cancelled)
        whatever was taken is given back. Without ConcurrencyLimit members this is
        ``acquire`` for the block.
        """
        self._tokens(tokens)
        if timeout is not None:
            _validate.timeout_seconds(timeout)
        return CompositeHold(self, tokens, timeout)

    def _restriction(self, info: RateLimitInfo, status: int | None) -> tuple[Sequence[float], float] | None:
        # The members count different units, so only a pause applies to all of them.
        change = restriction(info, status)
        if change is None or change[0] > 0:
            return None
        return (0.0,) * len(self._algs), change[1]

    if TYPE_CHECKING:
        # The inherited methods, typed to take one weight per member too.

        def refund(self, tokens: Tokens = 1) -> None: ...

        async def refund_async(self, tokens: Tokens = 1) -> None: ...

        def charge(self, tokens: Tokens) -> None: ...

        async def charge_async(self, tokens: Tokens) -> None: ...

        def settle(self, estimate: Tokens, actual: Tokens) -> None: ...

        async def settle_async(self, estimate: Tokens, actual: Tokens) -> None: ...

        def decorate(self, tokens: Tokens = 1, timeout: float | timedelta | None = None) -> Decorator: ...

        def peek(self, tokens: Tokens = 1) -> float: ...

        async def peek_async(self, tokens: Tokens = 1) -> float: ...


class CompositeHold:
    """What :meth:`Composite.hold` returns: ``with`` or ``async with`` it. It may be
    shared: each block entering it holds slots of its own, freed when that block is
    left, in whatever thread or task (a generator closed elsewhere)."""

    __slots__ = ("_entries", "_limit", "_timeout", "_tokens")

    def __init__(self, limit: Composite, tokens: Tokens, timeout: float | timedelta | None) -> None:
        self._limit = limit
        self._tokens = tokens
        self._timeout = timeout
        self._entries: Entries[list[Lease]] = Entries()

    def _left(self, started: float) -> float | None:
        if self._timeout is None:
            return None
        return max(0.0, _validate.timeout_seconds(self._timeout) - (time.monotonic() - started))

    def __enter__(self) -> CompositeHold:
        started = time.monotonic()
        limit = self._limit
        leases: list[Lease] = []
        try:
            for i, slot in enumerate(limit._slots):
                try:
                    leases.append(slot.take(self._left(started)))
                except AcquireTimeout as exc:
                    exc.failing_limit = limit._slot_places[i]
                    raise
            Limiter.acquire(limit, self._tokens, self._left(started))  # type: ignore[arg-type]
        except AcquireTimeout as exc:
            with contextlib.suppress(Exception):
                release_all(leases)
            if exc.failing_limit is None:
                limit._blame(exc, self._tokens)
            raise
        except BaseException:
            with contextlib.suppress(Exception):
                release_all(leases)
            raise
        self._entries.add(sys._getframe(1), threading.get_ident(), leases)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        release_all(self._entries.pop(sys._getframe(1), threading.get_ident()) or ())

    async def __aenter__(self) -> CompositeHold:
        frame = sys._getframe(1)
        started = time.monotonic()
        limit = self._limit
        leases: list[Lease] = []
        try:
            for i, slot in enumerate(limit._slots):
                try:
                    leases.append(await slot.take_async(self._left(started)))
                except AcquireTimeout as exc:
                    exc.failing_limit = limit._slot_places[i]
                    raise
            await Limiter.acquire_async(limit, self._tokens, self._left(started))  # type: ignore[arg-type]
        except AcquireTimeout as exc:
            with contextlib.suppress(Exception):
                await release_all_async(leases)
            if exc.failing_limit is None:
                await limit._blame_async(exc, self._tokens)
            raise
        except BaseException:
            with contextlib.suppress(Exception):
                await release_all_async(leases)
            raise
        self._entries.add(frame, entrant(), leases)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await release_all_async(self._entries.pop(sys._getframe(1), entrant()) or ())
