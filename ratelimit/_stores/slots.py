"""What a store must offer a ConcurrencyLimit, and what every store's slots share.

``Backend.bind_slots`` returns a :class:`SlotStore`, through which alone the front
(``_limiting/concurrency.py``) takes, waits, releases and renews. Every store runs
the transitions of ``_algorithms/semaphore.py`` and names leases with :func:`lease_id`.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from .waiting import Waiting, process_id

__all__ = ["LOST", "SlotStore", "lease_id", "taken_here"]

#: What a waiter's check finds when its place is gone.
LOST = "lost"

_numbers = itertools.count(1)


def lease_id() -> str:
    """A new lease's id, ``<process>:<n>``: never reused, and naming the process that
    took it (its wake-up channel, and whose lease it is after a fork)."""
    return f"{process_id()}:{next(_numbers)}"


def taken_here(name: str) -> bool:
    """Whether this process took lease ``name``: a forked child unwinding inherited
    blocks must not release or renew its parent's slots."""
    return name.rpartition(":")[0] == process_id()


class SlotStore(Protocol):
    """The slots of one ConcurrencyLimit in a store: what the front needs of them."""

    #: How often a waiter looks for itself in the store in case its wake-up was lost,
    #: and a holder's lease is renewed (seconds; ``inf``: never needed).
    check_every: float

    def take(self, name: str, waiting: Waiting | None) -> str: ...

    async def take_async(self, name: str, waiting: Waiting | None) -> str: ...

    def release(self, name: str) -> None: ...

    def idle(self) -> bool:
        """Whether no slot is held nor waited for here (see ``Backend.idle``)."""
        ...

    async def release_async(self, name: str) -> None:
        """:meth:`release` for asyncio, carried through a cancellation. A store with
        no I/O does not suspend, so a coroutine being closed still frees its slot."""
        ...

    def check(self, name: str, waiting: Waiting) -> str:
        """A waiter's look at its place, renewing it: ``HELD``, ``QUEUED`` or ``LOST``."""
        ...

    async def check_async(self, name: str, waiting: Waiting) -> str: ...

    def keep(self, names: list[str]) -> list[str]:
        """The heartbeat: renew these held leases, putting back any the store lost;
        returns those."""
        ...

    def renew(self, names: list[str]) -> None:
        """The heartbeat: renew these waiters' places, putting nothing back."""
        ...
