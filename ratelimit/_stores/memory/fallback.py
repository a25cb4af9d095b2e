"""The local fallback of a Redis handle (``on_unavailable="local"``): an in-process
limiter of the same algorithm at this process's share of the budget.

A fixed ``local_share`` builds it at bind time (:class:`Share`); ``"auto"`` builds it at
the first failure at one over the live processes counted by then (the store's count, :class:`Counted`), and again
when that count has changed (:class:`Rebuilt`, :class:`AutoShare`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar

from ... import _validate
from ..._algorithms.algorithm import Algorithm
from ..._algorithms.lanes import HIGH, LOW, Lanes
from ..._clock import Clock
from ..store import Handle, Pacing
from .backend import MemoryBackend

#: A fixed share of the budget, or ``"auto"``: one over the live processes last counted.
LocalShare = float | Literal["auto"]
T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Counted(Protocol):
    """A store's count of the live processes sharing its budget (the Redis store's
    ``redis/live.py``): ``share()`` is one over the count last seen."""

    def share(self) -> float: ...


class Fallback(Protocol[T_contra]):
    """What a handle falls back on when the store is unavailable."""

    def reserve(self, tokens: T_contra, max_wait: float) -> tuple[float, float]: ...

    def refund(self, tokens: T_contra, at: float | None) -> None: ...

    def charge(self, tokens: T_contra) -> object: ...

    def restrict(self, remaining: T_contra, seconds: float) -> None: ...

    def peek(self, tokens: T_contra) -> float: ...

    def reset(self) -> None: ...


def checked_local_share(value: object) -> LocalShare:
    """``local_share`` checked: ``"auto"``, or a fraction 0 < share <= 1."""
    if isinstance(value, str):
        if value == "auto":
            return "auto"
        raise TypeError(f"local_share must be a number (0 < share <= 1) or 'auto', got {value!r}")
    share = _validate.positive("local_share", value)
    if share > 1:
        raise ValueError(f"local_share must be <= 1, got {value!r}")
    return share


class Share(Generic[T]):
    """The local fallback of one limiter or a composite: a request heavier than this
    process's share of the largest request counts as that share (it could never be
    granted otherwise), and so do its refund and any charge, which stay in proportion;
    ``clamp`` says how, for one weight or one per limit."""

    __slots__ = ("_clamp", "_handle")

    def __init__(self, handle: Handle[T], clamp: Callable[[T], T]) -> None:
        self._handle = handle
        self._clamp = clamp

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        return self._handle.reserve(self._clamp(tokens), max_wait)

    def refund(self, tokens: T, at: float | None) -> None:
        self._handle.refund(self._clamp(tokens), at)

    def charge(self, tokens: T) -> None:
        # Not clamped: spent tokens are a debt of any size, and a smaller one would
        # let this process spend more than its share.
        self._handle.charge(tokens)

    def restrict(self, remaining: T, seconds: float) -> None:
        self._handle.restrict(remaining, seconds)

    def peek(self, tokens: T) -> float:
        return self._handle.peek(self._clamp(tokens))

    def reset(self) -> None:
        self._handle.reset()


class Rebuilt:
    """The local fallbacks of one bind under ``local_share="auto"``.

    Built at the first failure, at the share of the live processes counted by then;
    built again, with fresh state, when a later failure finds another share. The count
    changes only while Redis answers, so the fallbacks keep their state through an
    outage; only a count that changed between two outages costs a fresh local state
    (a full burst of the new share, as the first failure had).
    """

    __slots__ = ("_build", "_live", "_locals", "_lock", "_share")

    def __init__(self, live: Counted, build: Callable[[float], Sequence[Fallback[Any]]]) -> None:
        self._live = live
        self._build = build
        self._lock = threading.Lock()
        self._share: float | None = None
        self._locals: Sequence[Fallback[Any]] = ()

    @property
    def share(self) -> float | None:
        """The share the fallbacks were last built at (``None``: never built)."""
        return self._share

    def get(self, index: int) -> Fallback[Any]:
        share = self._live.share()
        with self._lock:
            if share != self._share:
                self._locals = self._build(share)
                self._share = share
            return self._locals[index]


class AutoShare(Generic[T]):
    """One of the local fallbacks a :class:`Rebuilt` keeps at the current share."""

    __slots__ = ("_index", "rebuilt")

    def __init__(self, rebuilt: Rebuilt, index: int) -> None:
        self.rebuilt = rebuilt
        self._index = index

    def current(self) -> Fallback[T]:
        """The fallback at the share of the live processes last counted."""
        local: Fallback[T] = self.rebuilt.get(self._index)
        return local

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        return self.current().reserve(tokens, max_wait)

    def refund(self, tokens: T, at: float | None) -> None:
        self.current().refund(tokens, at)

    def charge(self, tokens: T) -> None:
        self.current().charge(tokens)

    def restrict(self, remaining: T, seconds: float) -> None:
        self.current().restrict(remaining, seconds)

    def peek(self, tokens: T) -> float:
        return self.current().peek(tokens)

    def reset(self) -> None:
        self.current().reset()


def inner_handle(local: object) -> object:
    """The memory handle under a fallback's share."""
    if isinstance(local, AutoShare):
        local = local.current()
    return local._handle if isinstance(local, Share) else local


def throttle_fallback(local: object, decided: float | None, at: float | None) -> None:
    """A refusal told to a composite's fallback, when it learns a pace."""
    # A composite's fallback is a group too: its pace learns on its own meanwhile.
    handle = inner_handle(local)
    if isinstance(handle, Pacing):
        handle.throttle(decided, at)


def single_share(memory: MemoryBackend, alg: Algorithm[Any], clock: Clock | None, share: float) -> Share[float]:
    """One limiter's fallback on ``memory``, at ``share`` of its algorithm."""
    # The fallback keeps the algorithm but only this process's share of it.
    slowed = alg.slowed(share)
    most = slowed.most
    return Share(memory.bind(None, slowed, clock), lambda n: min(n, most))


def group_share(
    memory: MemoryBackend, algs: Sequence[Algorithm[Any]], clock: Clock | None, share: float
) -> Share[Sequence[float]]:
    """A composite's fallback on ``memory``, at ``share`` of each of its limits."""
    slowed = [alg.slowed(share) for alg in algs]
    mosts = [alg.most for alg in slowed]

    def clamp(tokens: Sequence[float]) -> Sequence[float]:
        return [min(n, most) for n, most in zip(tokens, mosts, strict=True)]

    return Share(memory.bind_group(None, slowed, clock), clamp)


def lanes_shares(
    memory: MemoryBackend, lanes: Lanes, clock: Clock | None, keep: float | None, share: float
) -> tuple[Share[float], Share[float]]:
    """The fallbacks of both lanes of a budget with priorities (high, low), at ``share``."""
    slowed = Lanes(lanes.high.slowed(share), lanes.low.slowed(share), lanes.low_share)
    bound = memory.bind_lanes(None, slowed, clock, keep)
    mosts = (slowed.high.most, slowed.low.most)
    return (
        Share(bound[HIGH], lambda n: min(n, mosts[HIGH])),
        Share(bound[LOW], lambda n: min(n, mosts[LOW])),
    )
