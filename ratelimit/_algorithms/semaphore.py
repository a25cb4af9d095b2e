"""A counting semaphore with leases and a FIFO queue: the state of a ConcurrencyLimit.

A slot is not a time but a holder, held from its grant until its release. Across
processes:

- every holder is a *lease* with an expiry, renewed while its holder lives, so a
  process killed with SIGKILL frees its slots once their leases run out;
- waiters queue in arrival order, and a release hands the slot straight to the head
  of the queue in the same step, so a waiter never polls for its grant;
- a waiter's place is a lease too: a crashed waiter leaves the queue.

Identifiers are never reused, so a second release of a lease finds nothing under its
name. Twins: ``lua/concurrency.lua`` and ``_stores/sqlite/slots.py``, held by the
tests to the same outcomes.
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
            # Nothing runs out: the last transition promoted whoever it could.
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
            # The place's expiry becomes the lease's: a waiter that died in the queue
            # holds the slot no longer than its place would have lasted.
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
        Releasing what is not there (released already, expired) changes nothing."""
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
        any the store has lost (a restart, a failover). Returns ``(lost, promoted)``:
        which were put back, and whom expiry promoted."""
        promoted = self.expire(state, now)
        lost = [name for name in names if name not in state.holders]
        until = now + self.lease
        for name in names:
            state.waiters.pop(name, None)
            state.holders[name] = until
        return lost, promoted
