"""A limit changed at run time from the limiter itself (``limiter.set_limit``).

The one way to change a limit: the limiter's store holds the change, as
``backend.set_limit(name, ...)`` does from outside, so that every process and every
limiter of the name follows it at its next decision. This module only turns the
limiter's arguments into the store's: its name (a view's name and ``key=``), a
composite's member (``member=``), its test clock; an unnamed in-process limiter's
change goes to its own handle (``set_private_limit``). Called by ``front.py``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from .._clock import Clock, SystemClock
from .._stores.keys import Keyed
from .._stores.records import Override, UnchangeableLimit, checked_override

__all__ = ["Ttl", "apply", "per_member"]

#: What ``ttl=`` takes: seconds, a ``timedelta``, or ``None`` (until reset).
Ttl = float | timedelta | None


def per_member(count: int, rate: object, burst: object, ttl: object) -> list[tuple[int, Override]]:
    """A composite's change: one value per member for each argument given as a
    sequence (``None`` in it: that member's value unchanged), one value for all
    otherwise; the members given neither a rate nor a burst are left as they are."""

    def spread(argument: str, value: object) -> list[object]:
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            if len(value) != count:
                raise ValueError(f"{argument} must give one value per limit ({count}), got {value!r}")
            return list(value)
        return [value] * count

    rates, bursts, ttls = spread("rate", rate), spread("burst", burst), spread("ttl", ttl)
    if all(r is None for r in rates) and all(b is None for b in bursts):
        raise ValueError(
            f"give rate, burst or both, got rate={rate!r}, burst={burst!r}: to return to what the code says, "
            f"call reset_limit()"
        )
    changes = []
    for i, (r, b, t) in enumerate(zip(rates, bursts, ttls, strict=True)):
        if r is None and b is None:
            continue
        try:
            changes.append((i, checked_override(r, b, t)))
        except ValueError as exc:
            raise ValueError(f"limit {i}: {exc}") from None
    return changes


def _test_clock(clock: Clock) -> Clock | None:
    """The clock a store is told of: a test clock's (its time), ``None`` for real time."""
    return None if isinstance(clock, SystemClock) else clock


def apply(
    backend: Any,
    place: str | Keyed | None,
    handle: object,
    clock: Clock,
    member: int | None,
    change: Override | None,
    keys: Any = None,
) -> bool:
    """Make ``change`` (``None``: a reset) to the limit kept under ``place`` in
    ``backend``; for a reset, whether a change was in force. ``keys``: where an
    unnamed limiter's views keep their budgets, if it has made any."""
    at = _test_clock(clock)
    if place is None or (isinstance(place, Keyed) and place.name is None):
        # Unnamed, in process: its own state, and its keys' (or one key's).
        private = getattr(backend, "set_private_limit", None)
        if private is None:
            raise UnchangeableLimit(f"{backend!r} cannot change an unnamed limiter's limit: give it a name")
        if isinstance(place, Keyed):
            return bool(backend.set_unnamed_limit(place.key, change, at, member))
        was = bool(private(handle, change, at, member))
        if keys is not None:
            was = bool(keys.set_unnamed_limit(None, change, at, member)) or was
        return was
    name = place if isinstance(place, str) else place.name
    options: dict[str, Any] = {} if isinstance(place, str) else {"key": place.key}
    if member is not None:
        # A store says it can keep a composite's member's change (``member=``) with
        # ``changes_members = True``; one without the flag is asked for none.
        if not getattr(backend, "changes_members", False):
            raise UnchangeableLimit(
                f"limiter {name!r} is a composite's members on {backend!r}, which changes a single limiter's "
                f"limit (and its keys') only: nothing was changed"
            )
        options["member"] = member
    if getattr(backend, "set_limit", None) is None:
        raise UnchangeableLimit(f"{backend!r} keeps the code's values: it has no set_limit; nothing was changed")
    if change is None:
        return bool(backend.reset_limit(name, clock=at, **options))
    backend.set_limit(name, rate=change.rate, burst=change.burst, ttl=change.ttl, clock=at, **options)
    return False


#: Limiters that refuse every change at run time, and why: what decides for their budget
#: (a ``FairShare``'s state) never reads one.
_kept: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def keep_code_values(limiter: Any, why: str) -> None:
    """Have ``limiter`` refuse every change at run time from now on (``why``: what it is)."""
    _kept[limiter] = why


def kept_by(limiter: Any) -> str | None:
    """Why ``limiter`` refuses every change at run time, or ``None``."""
    return _kept.get(limiter)
