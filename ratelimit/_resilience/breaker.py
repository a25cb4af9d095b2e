"""The circuit breaker: stop calling a provider that is down, and find out when it is back.

Closed, calls go through and their outcomes are counted. When the failing share over
the last ``window`` seconds reaches ``failure_threshold`` (with at least ``min_calls``
calls), the circuit opens: for ``cooldown`` seconds every call fails fast with
:class:`CircuitOpen`. Then it is half-open: up to ``half_open_probes`` calls go through
as probes; a probe that succeeds closes the circuit, one that fails opens it again.

With a shared store (:class:`RedisBackend`, :class:`SQLiteBackend`) the state is
shared: the first process to see the outage protects every one, and the half-open
probe limit holds across all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple, ParamSpec, TypeVar, overload

from .. import _validate
from .._algorithms.breaker import Decision, Policy
from .._clock import Clock, SystemClock, checked_clock
from .._errors import CircuitOpen
from .._events import BreakerState, Emitter, Event, Rejected, StateChanged
from .._stores.memory import MemoryBackend
from .._stores.store import Backend
from .._wrap import wrap
from .outcome import classify, status_of

__all__ = ["BreakerStats", "CircuitBreaker", "Ticket"]

P = ParamSpec("P")
R = TypeVar("R")


class Ticket(NamedTuple):
    """Permission for one call; hand it back to :meth:`CircuitBreaker.record`."""

    generation: int
    probe: bool


@dataclass(frozen=True)
class BreakerStats:
    """What one :class:`CircuitBreaker` object has seen (its own calls, not other
    processes'), and the state as of the snapshot."""

    state: BreakerState
    #: Calls and failures in the current window (of every process sharing the state).
    window_calls: int
    window_failures: int
    #: Calls let through by this object, of which probes.
    allowed: int
    probes: int
    #: Calls failed fast.
    rejected: int
    #: Outcomes reported.
    successes: int
    failures: int
    #: Times this object saw the circuit open.
    opened: int


class CircuitBreaker:
    """Fail fast while a provider is down, in one process or across many.

    Args:
        failure_threshold: the failing share of calls (0 < share <= 1) that opens the
            circuit (default 0.5).
        min_calls: no opening on fewer calls than this in the window (default 10).
        window: the sliding window the failure rate is measured over, seconds
            (default 60), counted in ``buckets`` buckets (default 10).
        cooldown: how long the circuit stays open, seconds (default 30).
        half_open_probes: how many probe calls may be in flight when half-open
            (default 1), in every process together with a shared backend.
        probe_timeout: a probe that has not reported after this long (a crashed
            worker) frees its slot; default ``cooldown``.
        backend: ``None`` for this object's own state; a shared store
            (:class:`RedisBackend`, :class:`SQLiteBackend`) to share it (``name``
            required).
        name: names the shared state (and the breaker in events and logs).
        clock: time, for tests.

    The breaker holds no lock while a call runs: :meth:`allow` and :meth:`record` are
    each one short atomic step, and calls through one breaker run concurrently.
    """

    def __init__(
        self,
        *,
        failure_threshold: float = 0.5,
        min_calls: int = 10,
        window: float | timedelta = 60.0,
        cooldown: float | timedelta = 30.0,
        half_open_probes: int = 1,
        probe_timeout: float | timedelta | None = None,
        buckets: int = 10,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.policy = Policy.checked(
            failure_threshold, min_calls, window, buckets, cooldown, half_open_probes, probe_timeout
        )
        checked_clock(clock)
        if backend is None:
            backend = MemoryBackend()
        elif not hasattr(type(backend), "bind_breaker"):  # on its class: a class passed is refused too
            raise TypeError(
                "backend must be a MemoryBackend, RedisBackend or SQLiteBackend instance (a Backend with "
                f"bind_breaker), got {type(backend).__name__} {backend!r}"
            )
        self.name = _validate.name(name, backend, shared=backend.shared)
        self.clock: Clock = clock or SystemClock()
        self.backend = backend
        self._store = backend.bind_breaker(self.name, self.policy, clock)
        self._events = Emitter()
        self._lock = threading.Lock()
        # allowed, probes, rejected, successes, failures, opened
        self._counts = [0, 0, 0, 0, 0, 0]

    def __repr__(self) -> str:
        p = self.policy
        return (
            f"CircuitBreaker(failure_threshold={p.failure_threshold:g}, min_calls={p.min_calls}, "
            f"window={p.window:g}, cooldown={p.cooldown:g}, half_open_probes={p.half_open_probes}, "
            f"name={self.name!r})"
        )

    # -- events and counters ------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` on this breaker's events; returns the unsubscriber."""
        return self._events.subscribe(callback)

    def _count(self, index: int) -> None:
        with self._lock:
            self._counts[index] += 1

    def _changed(self, previous: BreakerState, state: BreakerState) -> None:
        if previous != state:
            if state == "open":
                self._count(5)
            self._events.emit(StateChanged(self.name, previous, state))

    def stats(self) -> BreakerStats:
        """A snapshot: the state now, the window's counts, and this object's counters."""
        state, calls, failures = self._store.peek()
        with self._lock:
            return BreakerStats(state, calls, failures, *self._counts)

    async def stats_async(self) -> BreakerStats:
        """:meth:`stats` for asyncio."""
        state, calls, failures = await self._store.peek_async()
        with self._lock:
            return BreakerStats(state, calls, failures, *self._counts)

    @property
    def state(self) -> BreakerState:
        """``"closed"``, ``"open"`` or ``"half_open"``, as a call arriving now would find it."""
        return self._store.peek()[0]

    # -- the two steps --------------------------------------------------------------------

    def _admit(self, decision: Decision) -> Ticket:
        self._changed(decision.previous, decision.state)
        if not decision.admitted:
            self._count(2)
            self._events.emit(Rejected(self.name, decision.retry_after))
            raise CircuitOpen(self.name, decision.retry_after)
        with self._lock:
            self._counts[0] += 1
            self._counts[1] += decision.probe
        return Ticket(decision.generation, decision.probe)

    def allow(self) -> Ticket:
        """Ask to make one call: a :class:`Ticket`, or :class:`CircuitOpen` at once."""
        return self._admit(self._store.allow())

    async def allow_async(self) -> Ticket:
        """:meth:`allow` for asyncio."""
        return self._admit(await self._store.allow_async())

    def _tally(self, ok: bool | None) -> None:
        if ok is not None:
            self._count(3 if ok else 4)

    def record(self, ticket: Ticket, ok: bool | None) -> None:
        """Report the outcome of the call ``ticket`` let through: ``True`` it worked,
        ``False`` it failed, ``None`` neither (cancelled, or an answer that says nothing
        about the provider's health): frees a probe slot and counts nothing."""
        _check_ticket(ticket)
        self._tally(ok)
        self._changed(*self._store.record(ticket.generation, ticket.probe, ok))

    async def record_async(self, ticket: Ticket, ok: bool | None) -> None:
        """:meth:`record` for asyncio."""
        _check_ticket(ticket)
        self._tally(ok)
        self._changed(*await self._store.record_async(ticket.generation, ticket.probe, ok))

    # -- around a call ----------------------------------------------------------------------

    def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``fn`` through the breaker. Any exception it raises, or a transient
        HTTP status it returns (408, 5xx), counts as a failure; a 429 counts as
        neither (the provider is up, just busy)."""
        ticket = self.allow()
        try:
            result = fn(*args, **kwargs)
        except Exception:
            self.record(ticket, False)
            raise
        except BaseException:
            self.record(ticket, None)
            raise
        self.record(ticket, _healthy(result))
        return result

    async def call_async(self, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """:meth:`call` for asyncio: ``fn(*args, **kwargs)`` is awaited."""
        ticket = await self.allow_async()
        try:
            result = await fn(*args, **kwargs)
        except Exception:
            await self.record_async(ticket, False)
            raise
        except BaseException:
            await self.record_async(ticket, None)
            raise
        await self.record_async(ticket, _healthy(result))
        return result

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Callable[..., Any]:
        """Use the breaker as a decorator on a plain or ``async def`` function."""
        return wrap(fn, self.call, self.call_async)


def _check_ticket(ticket: object) -> None:
    if not isinstance(ticket, Ticket):
        raise TypeError(f"ticket must be the Ticket that allow() returned, got {ticket!r}")


def _healthy(result: object) -> bool | None:
    if status_of(result) == 429:
        return None
    return classify(result, None) != "transient"
