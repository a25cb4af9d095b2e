"""A counting semaphore with leases and a FIFO queue: the state of a ConcurrencyLimit.

Unlike the rate algorithms, a slot is not a time but a holder: it is held from the
moment it is granted until it is released. What makes it shareable across processes:

- every holder is a *lease* with an expiry, renewed while its holder lives, so a
  process killed with SIGKILL frees its slots once their leases run out;
- waiters queue in arrival order, and a release hands the slot straight to the head
  of the queue (it becomes a holder in the same step), so a waiter learns of its grant
  from whoever released and never has to poll for it;
- a waiter's place is a lease too, renewed while it waits: a crashed waiter leaves the
  queue instead of blocking it for ever.

Identifiers are unique for the life of a lease and never reused, so a lease that has
been released or has expired can never be released twice: the second release finds
nothing under its name. Mirrored by ``lua/concurrency.lua`` and, in a SQLite file,
by ``_stores/sqlite/slots.py``, transition for transition; the tests hold each twin to
the same outcomes.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["FULL", "HELD", "QUEUED", "Semaphore", "Slots"]

#: What a take says: the slot is held, the caller is queued, or (not willing to wait)
#: there was no slot for it.
HELD = "held"
QUEUED = "queued"
FULL = "full"


@dataclass(slots=True)
class Slots:
    """Who holds a slot and who waits for one, each with the expiry of their lease."""

    holders: dict[str, float] = field(default_factory=dict)
    #: Arrival order is insertion order.
    waiters: OrderedDict[str, float] = field(default_factory=OrderedDict)


@dataclass(frozen=True, slots=True)
class Semaphore:
    """At most ``most`` holders; leases last ``lease`` seconds unless renewed."""

    most: int
    lease: float

    kind = "concurrency"

    def new_state(self) -> Slots:
        return Slots()

    def idle_until(self, state: Slots) -> float:
        # Nothing held and no one waiting: as good as new at once.
        return math.inf if state.holders or state.waiters else -math.inf

    def expire(self, state: Slots, now: float) -> list[str]:
        """Drop leases that ran out, then hand freed slots to waiters; returns the ids
        of the waiters who now hold a slot."""
        if self.lease == math.inf:
            # Nothing runs out, so nothing was freed since the last transition, which
            # promoted whoever it could.
            return []
        # A scan: fine for the in-process twin; the Lua keeps sorted sets instead.
        for name in [name for name, until in state.holders.items() if until <= now]:
            del state.holders[name]
        for name in [name for name, until in state.waiters.items() if until <= now]:
            del state.waiters[name]
        return self._promote(state, now)

    def _promote(self, state: Slots, now: float) -> list[str]:
        promoted: list[str] = []
        while state.waiters and len(state.holders) < self.most:
            # The waiter's place becomes its lease, expiring when the place would have:
            # a waiter that died in the queue holds the slot no longer than its place
            # would have lasted (a live one is renewed within a third of a lease).
            name, until = state.waiters.popitem(last=False)
            state.holders[name] = until
            promoted.append(name)
        return promoted

    def take(self, state: Slots, now: float, name: str, wait: bool) -> tuple[str, list[str]]:
        """A slot for ``name``: held at once if one is free and no one waits ahead;
        otherwise queued (``wait``) or refused. Also returns whom expiry promoted."""
        promoted = self.expire(state, now)
        if name in state.holders or name in state.waiters:
            # A repeated request (a retried call): what it already has.
            return (HELD if name in state.holders else QUEUED), promoted
        if not state.waiters and len(state.holders) < self.most:
            state.holders[name] = now + self.lease
            return HELD, promoted
        if not wait:
            return FULL, promoted
        state.waiters[name] = now + self.lease
        return QUEUED, promoted

    def release(self, state: Slots, now: float, name: str) -> list[str]:
        """Free ``name``'s slot, or its place in the queue; returns whom that promoted.

        Releasing what is not there (released already, expired) changes nothing.
        """
        promoted = self.expire(state, now)
        state.holders.pop(name, None)
        state.waiters.pop(name, None)
        if state.waiters:
            promoted += self._promote(state, now)
        return promoted

    def renew(self, state: Slots, now: float, names: list[str]) -> tuple[list[str], list[str], list[str]]:
        """Extend the leases of ``names``. Returns ``(held, lost, promoted)``: which of
        them hold a slot, which are no longer known (expired), and whom expiry promoted."""
        promoted = self.expire(state, now)
        held: list[str] = []
        lost: list[str] = []
        until = now + self.lease
        for name in names:
            if name in state.holders:
                state.holders[name] = until
                held.append(name)
            elif name in state.waiters:
                state.waiters[name] = until
            else:
                lost.append(name)
        return held, lost, promoted

    def keep(self, state: Slots, now: float, names: list[str]) -> tuple[list[str], list[str]]:
        """The heartbeat of live holders: extend the leases of ``names``, putting back
        any the store has lost (a restart, a failover, an outage past the lease),
        since their holders still hold them. Returns ``(lost, promoted)``: which had
        to be put back, and whom expiry promoted."""
        promoted = self.expire(state, now)
        lost = [name for name in names if name not in state.holders]
        until = now + self.lease
        for name in names:
            state.waiters.pop(name, None)
            state.holders[name] = until
        return lost, promoted
