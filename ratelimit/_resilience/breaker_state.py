"""The circuit breaker's state machine, and the stores that keep its state (internal).

The transitions are pure functions on a small state; ``lua/breaker.lua`` is the same
machine, line for line, for state shared through Redis. Each transition (ask to pass,
report an outcome) is one atomic step: under a lock in process, one script call in
Redis. The protected call itself runs between two steps, with nothing held.

Failure rate: outcomes are counted in ``buckets`` buckets that together span
``window`` seconds (a bucket is ``window / buckets`` wide and the newest one is still
filling), so a failure ages out of the window within one bucket's width of
``window`` seconds. The circuit opens when, over that window, at least ``min_calls``
calls finished and the failing share reached ``failure_threshold``.

Generations: every opening starts a new generation, and a ticket remembers the one it
was issued in, so a slow call that began before an outage cannot close (or re-open)
a circuit that has moved on since.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from .. import _validate
from .._algorithms.algorithm import EPSILON
from .._clock import Clock, SystemClock
from .._errors import BackendUnavailable
from .._events import BreakerState
from .._stores.memory.backend import Lock, Slot
from .._stores.redis.scripts import breaker_script
from .._stores.sqlite import SQLiteBackend
from .._stores.sqlite.codec import allow as allow_in_rows

__all__ = ["Decision", "Kept", "MemoryStore", "Policy", "RedisStore", "SQLiteStore", "State", "allow", "record"]

logger = logging.getLogger("ratelimit")

R = TypeVar("R")

MODES: tuple[BreakerState, ...] = ("closed", "open", "half_open")


@dataclass(frozen=True)
class Policy:
    failure_threshold: float
    min_calls: int
    window: float
    buckets: int
    cooldown: float
    half_open_probes: int
    probe_timeout: float

    @classmethod
    def checked(
        cls,
        failure_threshold: object,
        min_calls: object,
        window: object,
        buckets: object,
        cooldown: object,
        half_open_probes: object,
        probe_timeout: object,
    ) -> Policy:
        threshold = _validate.positive("failure_threshold", failure_threshold)
        if threshold > 1:
            raise ValueError(f"failure_threshold must be a share in (0, 1], got {failure_threshold!r}")
        cool = _validate.duration("cooldown", cooldown)
        return cls(
            threshold,
            _whole("min_calls", min_calls),
            _validate.duration("window", window),
            _whole("buckets", buckets, most=1000),
            cool,
            _whole("half_open_probes", half_open_probes),
            cool if probe_timeout is None else _validate.duration("probe_timeout", probe_timeout),
        )

    def args(self) -> list[str]:
        """The policy as script arguments."""
        numbers = (
            self.failure_threshold,
            self.min_calls,
            self.window,
            self.buckets,
            self.cooldown,
            self.half_open_probes,
            self.probe_timeout,
        )
        return [repr(float(x)) for x in numbers]


def _whole(name: str, value: object, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 1 or (most is not None and value > most):
        bound = f"1 to {most}" if most is not None else ">= 1"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return value


@dataclass
class State:
    mode: BreakerState = "closed"
    opened_at: float = 0.0
    generation: int = 0
    probes: int = 0
    probe_at: float = 0.0
    #: Per bucket slot: the absolute bucket index it holds, its calls and failures.
    index: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)


class Decision(NamedTuple):
    """The answer to "may this call go?" and what it changed (a tuple: made per call,
    and a frozen dataclass costs a microsecond to build)."""

    admitted: bool
    probe: bool
    generation: int
    retry_after: float
    previous: BreakerState
    state: BreakerState


def _clear(policy: Policy, state: State) -> None:
    state.index = [-1] * policy.buckets
    state.calls = [0] * policy.buckets
    state.failures = [0] * policy.buckets


def _open(policy: Policy, state: State, now: float) -> None:
    state.mode = "open"
    state.opened_at = now
    state.generation += 1
    state.probes = 0
    _clear(policy, state)


def allow(policy: Policy, state: State, now: float) -> Decision:
    previous = state.mode
    if state.mode == "open":
        reopen = state.opened_at + policy.cooldown
        if reopen - now > EPSILON:
            return Decision(False, False, state.generation, reopen - now, previous, "open")
        state.mode = "half_open"
        state.probes = 0
    if state.mode == "half_open":
        if state.probes >= policy.half_open_probes:
            free_at = state.probe_at + policy.probe_timeout
            if free_at - now > EPSILON:
                return Decision(False, False, state.generation, free_at - now, previous, state.mode)
            # The probes in flight have taken longer than any call should: presumed lost.
            state.probes = 0
        state.probes += 1
        state.probe_at = now
        return Decision(True, True, state.generation, 0.0, previous, state.mode)
    return Decision(True, False, state.generation, 0.0, previous, state.mode)


def record(
    policy: Policy, state: State, now: float, generation: int, probe: bool, ok: bool | None
) -> tuple[BreakerState, BreakerState]:
    """Report a call's outcome (``ok``: ``None`` for neither); returns (previous, state)."""
    previous = state.mode
    if generation != state.generation:
        return previous, state.mode
    if probe:
        if state.mode != "half_open":
            return previous, state.mode
        state.probes = max(0, state.probes - 1)
        if ok is True:
            state.mode = "closed"
            state.probes = 0
            _clear(policy, state)
        elif ok is False:
            _open(policy, state, now)
        return previous, state.mode
    if state.mode != "closed" or ok is None:
        return previous, state.mode
    if not state.index:
        _clear(policy, state)
    width = policy.window / policy.buckets
    current = math.floor(now / width)
    slot = current % policy.buckets
    if state.index[slot] != current:
        state.index[slot], state.calls[slot], state.failures[slot] = current, 0, 0
    state.calls[slot] += 1
    if not ok:
        state.failures[slot] += 1
    # A success can trip it too: the one that brings the window up to min_calls. But
    # with no failure anywhere in the ring (a healthy provider) nothing can trip.
    if not ok or any(state.failures):
        calls, failures = counts(policy, state, now)
        if calls >= policy.min_calls and failures > 0 and failures >= policy.failure_threshold * calls - EPSILON:
            _open(policy, state, now)
    return previous, state.mode


def counts(policy: Policy, state: State, now: float) -> tuple[int, int]:
    """Calls and failures in the window ending ``now``."""
    if not state.index:
        return 0, 0
    current = math.floor(now / (policy.window / policy.buckets))
    live = [i for i in range(policy.buckets) if current - policy.buckets < state.index[i] <= current]
    return sum(state.calls[i] for i in live), sum(state.failures[i] for i in live)


def observed_mode(policy: Policy, state: State, now: float) -> BreakerState:
    """The mode a call arriving ``now`` would find (an open circuit past its cooldown
    is half-open, even before anyone has asked)."""
    if state.mode == "open" and state.opened_at + policy.cooldown - now <= EPSILON:
        return "half_open"
    return state.mode


# -- stores -----------------------------------------------------------------------------


class _Held:
    """What a :class:`MemoryStore` keeps its state in (a ``Slot`` of the SQLite store's
    has the same attribute)."""

    __slots__ = ("state",)

    def __init__(self, state: State) -> None:
        self.state = state


class MemoryStore:
    """Breaker state in this process, behind a lock held only for a transition."""

    def __init__(self, policy: Policy, clock: Clock) -> None:
        self._policy = policy
        self._now = clock.now
        self._held: _Held | Slot = _Held(State())
        self._lock: Lock = threading.Lock()

    def allow(self) -> Decision:
        with self._lock:
            return allow(self._policy, self._held.state, self._now())

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        with self._lock:
            return record(self._policy, self._held.state, self._now(), generation, probe, ok)

    def peek(self) -> tuple[BreakerState, int, int]:
        with self._lock:
            now = self._now()
            state = self._held.state
            return observed_mode(self._policy, state, now), *counts(self._policy, state, now)

    async def allow_async(self) -> Decision:
        return self.allow()

    async def record_async(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        return self.record(generation, probe, ok)

    async def peek_async(self) -> tuple[BreakerState, int, int]:
        return self.peek()


@dataclass(frozen=True)
class Kept:
    """The breaker's state as a SQLite store keeps it in a row (``SQLiteBackend.cell``)."""

    policy: Policy
    kind = "breaker"

    def new_state(self) -> State:
        return State()

    def idle_until(self, state: State) -> float:
        """A closed breaker of the first generation whose window has emptied decides
        as a new one; one that ever opened is kept (a late ticket names its generation)."""
        if state.mode != "closed" or state.generation:
            return math.inf
        if not state.index or max(state.index) < 0:
            return -math.inf
        return (max(state.index) + self.policy.buckets) * (self.policy.window / self.policy.buckets)


allow_in_rows(State)


class SQLiteStore(MemoryStore):
    """Breaker state in a row of a :class:`~ratelimit.SQLiteBackend` file: the memory
    store's transitions, each in one transaction. When the file cannot be used, the
    backend's ``on_unavailable`` decides, as for Redis (see :class:`RedisStore`)."""

    def __init__(self, backend: SQLiteBackend, name: str, policy: Policy, clock: Clock | None, local: MemoryStore):
        super().__init__(policy, clock or SystemClock())
        slot, rows = backend.cell(name, Kept(policy), clock)
        self._held = slot
        self._lock = rows
        self._now = rows.now
        self._backend = backend
        self._name = name
        self._local = local

    def _or_local(self, exc: BackendUnavailable, local: Callable[[], R]) -> R:
        says = "SQLite store unavailable; the circuit breaker %r goes on locally: %s"
        return self._backend.without_store(exc, self._name, local=local, otherwise=local, says=(says, says))

    def allow(self) -> Decision:
        try:
            return super().allow()
        except BackendUnavailable as exc:
            return self._or_local(exc, self._local.allow)

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        try:
            return super().record(generation, probe, ok)
        except BackendUnavailable as exc:
            return self._or_local(exc, lambda: self._local.record(generation, probe, ok))

    def peek(self) -> tuple[BreakerState, int, int]:
        try:
            return super().peek()
        except BackendUnavailable as exc:
            return self._or_local(exc, self._local.peek)

    # The memory store's async methods run the transition on the loop; the file's lock
    # may be another process's for up to busy_timeout, which the loop must not wait on.

    async def allow_async(self) -> Decision:
        return await self._backend.file.off_loop(self.allow)

    async def record_async(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        return await self._backend.file.off_loop(lambda: self.record(generation, probe, ok))

    async def peek_async(self) -> tuple[BreakerState, int, int]:
        return await self._backend.file.off_loop(self.peek)


def _mode(value: Any) -> BreakerState:
    return MODES[int(value)]


class RedisStore:
    """Breaker state in one Redis hash; every transition is one call of ``breaker.lua``.

    When Redis cannot be reached, the backend's ``on_unavailable`` decides: ``"raise"``
    raises :class:`~ratelimit.BackendUnavailable`; ``"allow"`` and ``"local"`` go on
    with this process's own breaker state until Redis answers again.
    """

    def __init__(self, backend: Any, key: str, policy: Policy, clock: Clock | None, local: MemoryStore) -> None:
        self._backend = backend
        self._keys = (key,)
        self._policy_args = policy.args()
        self._now = backend.now_source(clock)
        self._script = breaker_script()
        self._local = local

    def _args(self, op: str, *extra: str) -> list[str]:
        return [op, self._now(), *self._policy_args, *extra]

    def _or_local(self, exc: BackendUnavailable, local: Callable[[], R]) -> R:
        # Under "allow" as under "local": a breaker has no grant to make without state.
        says = "Redis unavailable; the circuit breaker %r goes on locally: %s"
        result: R = self._backend.without_store(exc, self._keys[0], local=local, otherwise=local, says=(says, says))
        return result

    def _call(self, args: list[str], read: Callable[[Any], R], local: Callable[[], R]) -> R:
        try:
            return read(self._backend.run(self._script, self._keys, args))
        except BackendUnavailable as exc:
            return self._or_local(exc, local)

    async def _call_async(self, args: list[str], read: Callable[[Any], R], local: Callable[[], R]) -> R:
        try:
            return read(await self._backend.run_async(self._script, self._keys, args))
        except BackendUnavailable as exc:
            return self._or_local(exc, local)

    @staticmethod
    def _decision(reply: Any) -> Decision:
        admitted, probe, generation, retry_after, previous, state = reply
        return Decision(
            int(admitted) == 1, int(probe) == 1, int(generation), float(retry_after), _mode(previous), _mode(state)
        )

    @staticmethod
    def _transition(reply: Any) -> tuple[BreakerState, BreakerState]:
        return _mode(reply[0]), _mode(reply[1])

    @staticmethod
    def _peek(reply: Any) -> tuple[BreakerState, int, int]:
        return _mode(reply[0]), int(reply[1]), int(reply[2])

    def _record_args(self, generation: int, probe: bool, ok: bool | None) -> list[str]:
        return self._args("record", str(generation), "1" if probe else "0", _ok(ok))

    def allow(self) -> Decision:
        return self._call(self._args("allow"), self._decision, self._local.allow)

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        local = functools.partial(self._local.record, generation, probe, ok)
        return self._call(self._record_args(generation, probe, ok), self._transition, local)

    def peek(self) -> tuple[BreakerState, int, int]:
        return self._call(self._args("peek"), self._peek, self._local.peek)

    async def allow_async(self) -> Decision:
        return await self._call_async(self._args("allow"), self._decision, self._local.allow)

    async def record_async(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        local = functools.partial(self._local.record, generation, probe, ok)
        return await self._call_async(self._record_args(generation, probe, ok), self._transition, local)

    async def peek_async(self) -> tuple[BreakerState, int, int]:
        return await self._call_async(self._args("peek"), self._peek, self._local.peek)


def _ok(ok: bool | None) -> str:
    return "" if ok is None else ("1" if ok else "0")
