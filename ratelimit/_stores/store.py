"""What a store must offer the limiter front (internal).

A backend *binds* a limiter's algorithm to its state once and hands back a handle;
every acquire is one call on it, so the front (waiting, timeouts, cancellation) is
written once for every store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._algorithms.algorithm import Algorithm
from .._algorithms.breaker import Decision, Policy
from .._algorithms.fair import Answer, Fair
from .._algorithms.lanes import Lanes
from .._clock import Clock
from .._events import BreakerState
from .keys import Keyed
from .landing import Late
from .slots import SlotStore
from .stats import Stats

__all__ = ["Backend", "BreakerHandle", "FairHandle", "Handle", "Level", "Leveled", "Pacing", "TakesLate"]

T_contra = TypeVar("T_contra", contravariant=True)


class Handle(Protocol[T_contra]):
    """One limiter (or one group of limits) bound to its state in a store."""

    #: The owning limiter's counters, updated inside the store's serialisation.
    stats: Stats | None
    #: Whether ``reserve_async`` really suspends (so a task can be cancelled meanwhile).
    suspends: bool

    def reserve(self, tokens: T_contra, max_wait: float) -> tuple[float, float]:
        """Decide and, if granted, record: ``(signed_wait, at)``. ``signed_wait >= 0``:
        granted, go after that many seconds, at store time ``at`` (what ``refund``
        names it by); ``< 0``: refused, nothing recorded, ``-signed_wait`` needed."""
        ...

    async def reserve_async(self, tokens: T_contra, max_wait: float) -> tuple[float, float]: ...

    def name_grants(self) -> None:
        """From now on, name grants that go at once by where their tokens sit (a
        ``holes.GrantTime``), so a refund never frees another's grant. Asked at a
        limiter's first give-back: one that never gives back pays nothing for it."""
        ...

    def reserve_here(self, tokens: T_contra, max_wait: float) -> tuple[float, float] | None:
        """``reserve``'s answer when this process can decide without suspending (a
        lease's grant, a free SQLite lock); ``None``: ask the store."""
        ...

    def refund(self, tokens: T_contra, at: float | None) -> None:
        """Give back tokens of the grant at store time ``at`` (``None``: one already made)."""
        ...

    async def refund_async(self, tokens: T_contra, at: float | None) -> None: ...

    def charge(self, tokens: T_contra) -> float | None:
        """Record ``tokens`` as taken now, whatever the budget; what a refund names the
        charge by (``None``: nothing)."""
        ...

    async def charge_async(self, tokens: T_contra) -> float | None: ...

    def restrict(self, remaining: T_contra, seconds: float) -> None:
        """At most ``remaining`` more tokens in the next ``seconds`` (see ``Algorithm.restrict``)."""
        ...

    async def restrict_async(self, remaining: T_contra, seconds: float) -> None: ...

    def peek(self, tokens: T_contra) -> float:
        """The wait a reserve of ``tokens`` with no timeout would be told now; records
        and counts nothing (see ``algorithm.peek_all``)."""
        ...

    async def peek_async(self, tokens: T_contra) -> float: ...

    def reset(self) -> None:
        """Forget the usage (an operator's change of the limit stays)."""
        ...

    async def reset_async(self) -> None: ...


#: What is left of a limit after a decision: the whole tokens that could go at once
#: now, as requests of one token one after another, and the seconds until one more
#: could (0: never at once). See ``algorithm.level_all``.
Level = tuple[float, float]


class Leveled(Protocol[T_contra]):
    """A handle that can tell the level a decision left, in the same store call
    (what the serving gate's ``RateLimit`` field says). Asked for alone: a plain
    ``reserve`` pays nothing for it. The memory, SQLite and Redis handles of one
    limiter and of a composite are; a handle of lanes is not."""

    def reserve_level(self, tokens: T_contra, max_wait: float) -> tuple[float, float, Level | None]:
        """``reserve``'s decision and the level it left, ``None`` where this decision
        cannot tell it (made in a round, an allotment, the local fallback or without
        the store)."""
        ...

    async def reserve_level_async(self, tokens: T_contra, max_wait: float) -> tuple[float, float, Level | None]: ...


class TakesLate(Protocol[T_contra]):
    """A handle whose ``reserve_async`` (and ``reserve_level_async``) gives what lands
    for a task that left to ``late`` itself (a ``takes_late`` attribute says so): the limiter's front then runs
    no task of its own per call (``landing.py``)."""

    takes_late: bool

    async def reserve_async(
        self, tokens: T_contra, max_wait: float, late: Late[tuple[float, float]] | None = None
    ) -> tuple[float, float]: ...

    async def reserve_level_async(
        self, tokens: T_contra, max_wait: float, late: Late[tuple[float, float, Level | None]] | None = None
    ) -> tuple[float, float, Level | None]: ...


@runtime_checkable
class Pacing(Protocol):
    """A group handle whose members include a learned pace (``adaptive=``)."""

    def throttle(self, decided: float | None, at: float | None) -> None:
        """The provider refused the request decided at ``decided`` to go at ``at``: the
        pace cuts its rate, once per congestion event."""
        ...

    async def throttle_async(self, decided: float | None, at: float | None) -> None: ...

    def rate(self) -> float:
        """The learned rate now, tokens per second."""
        ...


class FairHandle(Protocol):
    """A budget shared fairly among tenants (``_algorithms/fair.py``): each call one
    atomic decision in the store."""

    #: Whether ``ask_async`` really suspends.
    suspends: bool

    def ask(self, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None) -> Answer:
        """Decide a tenant's request: granted, refused or deferred (``fair.reserve``).
        ``Answer.wait`` and ``next_in`` are seconds from the decision; a ticket is
        the store's time."""
        ...

    async def ask_async(
        self, tenant: str, weight: float, tokens: float, max_wait: float, ticket: float | None
    ) -> Answer: ...

    def peek(self, tenant: str, tokens: float, ticket: float | None) -> float:
        """The wait a request of the tenant's would be told now, presenting ``ticket``;
        records nothing."""
        ...

    async def peek_async(self, tenant: str, tokens: float, ticket: float | None) -> float: ...

    def reset(self) -> None:
        """Forget the budget's usage and every tenant's pace."""
        ...

    async def reset_async(self) -> None: ...


class Views(Protocol):
    """A limiter's cache of per-key views: a sweep asks it to drop idle ones."""

    def forget_idle(self) -> int: ...

    def __len__(self) -> int: ...


class BreakerHandle(Protocol):
    """A circuit breaker's state in a store: each method one atomic transition of
    ``_algorithms/breaker.py``."""

    def allow(self) -> Decision: ...

    async def allow_async(self) -> Decision: ...

    def record(self, generation: int, probe: bool, ok: bool | None) -> tuple[BreakerState, BreakerState]:
        """Report the outcome of a call ``allow`` let through; ``(previous, state)``."""
        ...

    async def record_async(
        self, generation: int, probe: bool, ok: bool | None
    ) -> tuple[BreakerState, BreakerState]: ...

    def peek(self) -> tuple[BreakerState, int, int]:
        """The mode a call now would find, and the window's calls and failures."""
        ...

    async def peek_async(self) -> tuple[BreakerState, int, int]: ...


class Backend(Protocol):
    """Where limiters keep their state."""

    #: True when the state is shared beyond this process, which makes ``name`` required.
    shared: bool

    def bind(
        self,
        name: str | Keyed | None,
        alg: Algorithm[Any],
        clock: Clock | None,
        *,
        lease: float | None = None,
        shadow: bool = False,
    ) -> Handle[float]:
        """One limiter. ``lease``: spend the shared budget in leases of that many
        seconds (``alg``'s guard includes them). ``shadow``: decisions are never
        enforced. Both are passed only when set."""
        ...

    def bind_group(
        self, name: str | Keyed | None, algs: Sequence[Algorithm[Any]], clock: Clock | None
    ) -> Handle[Sequence[float]]: ...

    def bind_lanes(
        self, name: str | Keyed | None, lanes: Lanes, clock: Clock | None, keep: float | None
    ) -> tuple[Handle[float], Handle[float]]:
        """A budget with priorities: the high and low handles, on one state. ``keep``:
        what a low request borrowing the high lane must leave (``None``: no borrowing)."""
        ...

    def bind_fair(self, name: str | Keyed | None, fair: Fair, clock: Clock | None) -> FairHandle:
        """A budget shared fairly among tenants, in one state."""
        ...

    def bind_breaker(self, name: str | None, policy: Policy, clock: Clock | None) -> BreakerHandle:
        """A circuit breaker's state (``name`` given on a shared store)."""

    def bind_slots(
        self, name: str | Keyed | None, most: int, lease: float, clock: Clock | None, *, member: int | None = None
    ) -> SlotStore:
        """A ConcurrencyLimit's slots (``member`` of a composite): at most ``most``
        held at once, each a lease of ``lease`` seconds renewed by its holder's
        heartbeat. Limits that bind one name share its slots."""
        ...

    def keep_views(self, views: Views) -> None:
        """Have this store's sweeps ask ``views`` to drop idle keys' views first (a
        store whose keys expire by themselves keeps nothing)."""
        ...

    def idle(self, handle: object) -> bool:
        """Whether ``handle``'s state would decide as a new one, so its key's view may
        be forgotten (``False`` where keys expire by themselves)."""
        ...

    def calls_from_threads(self) -> bool:
        """Whether the store takes calls from threads (see ``unfinished.py``)."""
        ...
