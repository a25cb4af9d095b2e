"""What the operator's commands read and write, whichever store holds the limiter:
:class:`Override`, :class:`Inspection`, :class:`FleetRow` (see ``operated.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import _validate

__all__ = [
    "ACTIVE_SECONDS",
    "FAIR_KEPT",
    "MAX_SET",
    "MAX_TTL_SECONDS",
    "MIN_SET",
    "PARAMETERS",
    "QUOTA_BURST",
    "TENANTS_SHOWN",
    "WAIT_BOUNDS",
    "WINDOWS",
    "FleetRow",
    "Inspection",
    "Override",
    "Slots",
    "Tenants",
    "UnchangeableLimit",
    "checked_override",
    "p99_wait",
]

#: The range a run-time ``rate`` (tokens per second) or ``burst`` must lie in: a
#: token per eleven days to a trillion. The scripts ignore a stored value outside it.
MIN_SET = 1e-6
MAX_SET = 1e12
#: The longest a change may be set to last, and the longest a TTL may hold a key.
MAX_TTL_SECONDS = 366 * 86400.0


@dataclass(frozen=True)
class Override:
    """A limit as changed at run time: ``None`` keeps what the code says."""

    rate: float | None
    burst: float | None
    #: Seconds until the change ends by itself; ``None``: until reset.
    ttl: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"rate": self.rate, "burst": self.burst, "ttl": self.ttl}


def _bounded(argument: str, value: object) -> float:
    if argument == "rate" and _validate.real(argument, value) == 0:
        # A token bucket's code may say 0 (an allowance); a change may not: a
        # window's limit would be none, a leaky queue's would never drain.
        raise ValueError(
            f"rate must be > 0 at run time (between {MIN_SET:g} and {MAX_SET:g}), got {value!r}: a rate of 0 "
            f"is set in the code (TokenBucket(capacity, 0)), not at run time"
        )
    number = _validate.positive(argument, value)
    if not MIN_SET <= number <= MAX_SET:
        raise ValueError(f"{argument} must be between {MIN_SET:g} and {MAX_SET:g}, got {value!r}")
    return number


def checked_override(rate: object, burst: object, ttl: object) -> Override:
    """The change asked for, checked; ``ValueError``/``TypeError`` naming the argument."""
    if rate is None and burst is None:
        raise ValueError("give rate, burst or both: to return to what the code says, reset the limit")
    seconds = None
    if ttl is not None:
        seconds = _validate.duration("ttl", ttl)
        if not 0 < seconds <= MAX_TTL_SECONDS:
            raise ValueError(f"ttl must be > 0 and at most {MAX_TTL_SECONDS:g} seconds (a year), got {ttl!r}")
    return Override(
        None if rate is None else _bounded("rate", rate),
        None if burst is None else _bounded("burst", burst),
        seconds,
    )


class UnchangeableLimit(ValueError):
    """A change at run time asked of a limiter that would never read it."""


#: What a FairShare's budget is, for the refusal of a change (every store says it).
FAIR_KEPT = (
    "a FairShare's budget (its line and its tenants' paces are a state of their own, at the rate "
    "the code gave the FairShare's limiter)"
)


@dataclass(frozen=True)
class Slots:
    """A ConcurrencyLimit's slots now."""

    #: Slots held (leases not run out) and callers queued for one.
    held: int
    queued: int
    #: The most holders at once, as the latest process to take or give back a slot
    #: was built with; ``None``: not stored (compatibility: see the Redis store's note).
    most: int | None

    def as_dict(self) -> dict[str, int | None]:
        return {"held": self.held, "max": self.most, "queued": self.queued}


#: How many of a fair share's tenants an inspection reads and shows, furthest ahead first.
TENANTS_SHOWN = 5


@dataclass(frozen=True)
class Tenants:
    """A ``FairShare``'s budget now: its tenants whose pace runs ahead of now."""

    #: The budget's algorithm (``token_bucket``, ...).
    kind: str
    #: Tenants whose pace runs ahead of now (each counts in the split).
    active: int
    #: The few furthest ahead (at most :data:`TENANTS_SHOWN`): the tenant, seconds its
    #: pace runs ahead of now, its weight (``None``: not stored).
    ahead: tuple[tuple[str, float, float | None], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "active": self.active,
            "ahead": [{"tenant": t, "ahead_seconds": s, "weight": w} for t, s, w in self.ahead],
        }


@dataclass(frozen=True)
class Inspection:
    """What a shared store holds of one limiter name (or of one of its keys).

    A SQLite file keeps no ConcurrencyLimit's ``most`` (``None`` there); the other
    fields are filled as Redis fills them (``sqlite/inspection.py``)."""

    name: str
    #: The algorithm its processes run; ``None``: none decided in the last day.
    kind: str | None = None
    #: The parameters the code configured (guard included), and the guard's seconds.
    code: Mapping[str, float] | None = None
    slack: float = 0.0
    #: Whether the latest process to decide runs it in shadow mode (never enforced).
    shadow: bool = False
    override: Override | None = None
    #: The parameters the decisions use now: the code's, or as changed.
    effective: Mapping[str, float] | None = None
    #: The most tokens one request could take now, and the wait for one token.
    available: float | None = None
    wait_for_one: float | None = None
    #: Seconds until the latest grant already promised (0: none ahead).
    promised_ahead: float | None = None
    #: Seconds until a pause fed back from a provider (a 429) ends; ``None``: none.
    paused_for: float | None = None
    #: A breaker of this name: ``closed``, ``open`` or ``half-open``; ``None``: none.
    breaker: str | None = None
    breaker_opened_at: float | None = None
    #: Other state of this name: members (``0:token_bucket``), lanes (``hi:...``).
    other_keys: tuple[str, ...] = ()
    now: float | None = None
    #: What else the name is (``adaptive``, ``composite``, ``priorities``,
    #: ``concurrency``, ``fair``); none of them reads a change.
    forms: tuple[str, ...] = ()
    #: A ConcurrencyLimit of this name: its slots now.
    concurrency: Slots | None = None
    #: The key whose budget this is (``limiter.for_key``); ``None``: the name's own.
    key: str | None = None
    #: A FairShare's budget of this name: its tenants now.
    fair: Tenants | None = None

    @property
    def known(self) -> bool:
        return (
            self.kind is not None
            or self.breaker is not None
            or bool(self.other_keys)
            or self.override is not None
            or bool(self.forms)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "known": self.known,
            "kind": self.kind,
            "code": None if self.code is None else dict(self.code),
            "guard_seconds": self.slack,
            "shadow": self.shadow,
            "override": None if self.override is None else self.override.as_dict(),
            "effective": None if self.effective is None else dict(self.effective),
            "available": self.available,
            "wait_for_one": self.wait_for_one,
            "promised_ahead": self.promised_ahead,
            "paused_for": self.paused_for,
            "breaker": self.breaker,
            "breaker_opened_at": self.breaker_opened_at,
            "other_keys": list(self.other_keys),
            "forms": list(self.forms),
            "concurrency": None if self.concurrency is None else self.concurrency.as_dict(),
            "now": self.now,
            # A FairShare's budget alone has it: every other name reads as it always has.
            **({} if self.fair is None else {"fair": self.fair.as_dict()}),
        }


#: What each kind's two parameters are called (the limiter's own argument names).
PARAMETERS = {
    "token_bucket": ("capacity", "refill_per_sec"),
    "leaky_bucket": ("capacity", "leak_per_sec"),
    "sliding_window": ("limit", "window"),
    "sliding_window_counter": ("limit", "window"),
    # A calendar quota: its limit per period, and the period's length in seconds (the
    # current one's, 23 or 25 hours for a day across a clock change).
    "quota": ("limit", "period"),
}
WINDOWS = ("sliding_window", "sliding_window_counter")
#: Why a quota takes no burst at run time (``format(burst=..., name=...)``).
QUOTA_BURST = (
    "burst={burst!r}: limiter {name!r} is a quota, which has no burst apart from its limit "
    "(set its rate: the new limit per period)"
)


#: The wait histogram's bucket bounds, seconds (as ``lua/_single.lua``): field ``w<i>``
#: counts waits up to the i-th (1-based), the one after the last longer ones.
WAIT_BOUNDS = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: Seconds of history a hash keeps; ``top`` shows what was active within a minute.
ACTIVE_SECONDS = 60


@dataclass(frozen=True)
class FleetRow:
    """One limiter across the fleet, over the last ``window`` seconds."""

    name: str
    kind: str
    #: A shadow limiter's counts are what it would have done (see ``shadow=True``).
    shadow: bool
    #: Requests granted and refused, leased tokens, per second (``None`` for a
    #: ConcurrencyLimit and a FairShare); withdrawn reservations are not grants.
    grants_per_sec: float | None
    refusals_per_sec: float | None
    leased_per_sec: float | None
    #: The 99th percentile of the waits granted, as the bound of its histogram bucket
    #: (``inf``: longer than the last bound); ``None``: no grant in the window.
    p99_wait: float | None
    #: Pauses fed back by a provider (a 429's ``Retry-After``) in the last minute.
    pauses: int
    #: Seconds left of a pause in force, ``None``: none.
    paused_for: float | None
    #: A breaker of the same name: ``closed``, ``open``, ``half-open``; ``None``: none.
    breaker: str | None
    #: Seconds since its latest second of activity (``None``: a ConcurrencyLimit).
    idle: float | None
    #: A ConcurrencyLimit's slots held, callers queued, its maximum (as in ``Slots``).
    held: int | None = None
    queued: int | None = None
    most: int | None = None
    #: Reservations withdrawn before they were due, per second (a timeout, a cancel).
    withdrawn_per_sec: float | None = None
    #: A FairShare's budget (kind ``fair``): its tenants paced ahead of now.
    tenants: int | None = None

    @classmethod
    def uncounted(cls, name: str, kind: str, breaker: str | None, **state: int | None) -> FleetRow:
        """The row of what a store counts no decisions of (a ConcurrencyLimit's slots, a
        FairShare's budget): no rates, pauses or idle time, only ``state``."""
        return cls(
            name=name,
            kind=kind,
            shadow=False,
            grants_per_sec=None,
            refusals_per_sec=None,
            leased_per_sec=None,
            p99_wait=None,
            pauses=0,
            paused_for=None,
            breaker=breaker,
            idle=None,
            **state,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "shadow": self.shadow,
            "grants_per_sec": self.grants_per_sec,
            "refusals_per_sec": self.refusals_per_sec,
            "leased_per_sec": self.leased_per_sec,
            "withdrawn_per_sec": self.withdrawn_per_sec,
            "p99_wait": None if self.p99_wait is None else (self.p99_wait if math.isfinite(self.p99_wait) else "inf"),
            "pauses_last_minute": self.pauses,
            "paused_for": self.paused_for,
            "breaker": self.breaker,
            "idle_seconds": self.idle,
            "in_flight": None if self.held is None else {"held": self.held, "max": self.most, "queued": self.queued},
            # A FairShare's row alone has it: every other row reads as it always has.
            **({} if self.tenants is None else {"tenants": self.tenants}),
        }


def p99_wait(buckets: dict[int, float]) -> float | None:
    """The bound of the bucket where 99 % of the granted waits are reached, from the
    counts per bucket index (1-based, as the fields ``w<i>``)."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    seen = 0.0
    for index in sorted(buckets):
        seen += buckets[index]
        if seen >= 0.99 * total:
            return WAIT_BOUNDS[index - 1] if index <= len(WAIT_BOUNDS) else math.inf
    return math.inf
