"""What a store must offer a ConcurrencyLimit, and what every store's slots share.

A backend's ``bind_slots`` (``store.py``) returns the slots of one limit, a
:class:`SlotStore`: the front (``_limiting/concurrency.py``) takes, waits, releases and
renews through it alone. Each store keeps them in its folder: ``memory/slots.py``,
``redis/slots.py``, ``sqlite/holders.py``. All of them run the transitions of
``_algorithms/semaphore.py`` (``HELD``, ``QUEUED``, ``FULL``), name each lease with
:func:`lease_id`, and answer a waiter's look with ``LOST`` when its place is gone.
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
    """Whether this process took lease ``name``. A forked child inherits its parent's
    leases and unwinds the blocks holding them, but a shared slot stays the parent's
    to release and to renew: the parent still holds it."""
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
        """Whether no slot is held nor waited for here, so that a key's view may be
        forgotten (``False`` where the store's keys expire by themselves)."""
        ...

    async def release_async(self, name: str) -> None:
        """:meth:`release` for asyncio, carried through if the caller is cancelled
        meanwhile. A store that needs no I/O releases without suspending, so that a
        coroutine being closed (which may not await) still frees its slot."""
        ...

    def check(self, name: str, waiting: Waiting) -> str:
        """A waiter's look at its place, renewing it: ``HELD`` (its wake-up was lost),
        ``QUEUED``, or ``LOST`` (its place is gone: it must queue anew)."""
        ...

    async def check_async(self, name: str, waiting: Waiting) -> str: ...

    def keep(self, names: list[str]) -> list[str]:
        """The heartbeat: renew these held leases, putting back any the store lost;
        returns those."""
        ...

    def renew(self, names: list[str]) -> None:
        """The heartbeat: renew these waiters' places (a lease, if one was granted
        meanwhile), putting nothing back."""
        ...
