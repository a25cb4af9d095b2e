"""The circuit breaker's state machine: closed, open, half-open (CircuitBreaker's state).

Pure transitions on a small state; the caller passes ``now``. ``lua/breaker.lua`` is
the same machine for state shared through Redis. A store runs each transition (ask
to pass, report an outcome) as one atomic step (the ``breaker.py`` of each
``_stores/`` folder); the protected call runs between two steps, with nothing held.

Failure rate: outcomes are counted in ``buckets`` buckets spanning ``window`` seconds
(the newest still filling), so a failure ages out within a bucket's width of
``window``. The circuit opens when over the window at least ``min_calls`` calls
finished and the failing share reached ``failure_threshold``.

Generations: every opening starts a new one, and a ticket remembers its own, so a
slow call that began before an outage cannot close (or re-open) the circuit since.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import _validate
from .._events import BreakerState
from .algorithm import EPSILON

__all__ = ["MODES", "Decision", "Policy", "State", "allow", "counts", "idle_until", "observed_mode", "record"]

#: The modes in the order the Lua twin numbers them (0 closed, 1 open, 2 half-open).
MODES: tuple[BreakerState, ...] = ("closed", "open", "half_open")


@dataclass(frozen=True)
class Policy:
    """A breaker's settings (``CircuitBreaker``'s arguments, checked)."""

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
    """The answer to "may this call go?" and what it changed (a tuple: one is made per
    call, and a tuple is cheaper to build than a frozen dataclass)."""

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


def idle_until(policy: Policy, state: State) -> float:
    """From when ``state`` decides as a new one would: a closed breaker of the first
    generation whose window has emptied; one that ever opened never does (a late
    ticket names its generation)."""
    if state.mode != "closed" or state.generation:
        return math.inf
    if not state.index or max(state.index) < 0:
        return -math.inf
    return (max(state.index) + policy.buckets) * (policy.window / policy.buckets)
