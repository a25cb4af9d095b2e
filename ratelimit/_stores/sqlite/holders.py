"""A ConcurrencyLimit's slots in a SQLite file, shared by the processes of one box:
what ``SQLiteBackend.bind_slots`` returns.

Each transition is one transaction of the file (``slots.py``, the SQL twin of
``_algorithms/semaphore.py``). A waiter is told of its grant, never polls: its row
names its process's wake socket (``wake_sockets.py``), and whoever promotes it (a release, or a
transition that finds a lease run out) sends a wake message there after the commit. A holder's
lease is renewed by the limit's heartbeat, so a process killed with SIGKILL frees
its slots once their leases run out; the wake socket's thread then looks at the file when
the first holder's lease is due to run out, since no release will announce it.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable
from typing import Protocol, TypeVar

from ..._algorithms.semaphore import FULL, HELD, QUEUED
from ..._clock import Clock
from ..._errors import BackendUnavailable
from ..keys import Keyed
from ..memory.slots import Elsewhere
from ..slots import LOST, taken_here
from ..unfinished import finish_later, release_outlasting
from ..waiting import Waiting
from .file import Busy, LockTimeout, StoreFile, Waited
from .slots import Promoted, SlotRows
from .wake_sockets import WakeSockets, wake_sockets_for

__all__ = ["SQLiteSlots"]

R = TypeVar("R")


class Binder(Protocol):
    """What the slots use of the backend that binds them (``SQLiteBackend``), beside
    the failure policy that :class:`~.memory.slots.Elsewhere` reads."""

    file: StoreFile
    local_share: float

    def sweep_if_due(self) -> None: ...


class SQLiteSlots:
    """Slots in a :class:`~ratelimit.SQLiteBackend` file, shared by every process that
    opens it. When the file cannot be used the backend's ``on_unavailable`` decides,
    as for every shared store's slots: ``"raise"``, ``"allow"`` (a slot the
    file never hears of) or ``"local"`` (this process's share of the slots)."""

    def __init__(
        self, backend: Binder, rows: SlotRows, name: str | Keyed, most: int, lease: float, clock: Clock | None
    ) -> None:
        self._backend = backend
        self._rows = rows
        self._label = str(name.name if isinstance(name, Keyed) else name)
        self.check_every = lease / 3
        # One bound method for the wake sockets to group the looks they make by.
        self._holding = self._rows.holding
        self._elsewhere = Elsewhere(backend, self._label, "SQLite store", most, backend.local_share, clock)
        #: Takes in a thread (the file was locked) whose caller may be gone, by name.
        self._landing: dict[str, asyncio.Future[str]] = {}
        #: Takes refused while another process held the file: nothing of them is in
        #: the file, so their release (the front's, after any refusal) waits for nothing.
        self._unwritten: set[str] = set()

    @property
    def _wake_sockets(self) -> WakeSockets:
        # Looked up at each use: a forked child has wake sockets of its own.
        return wake_sockets_for(self._rows.path)

    @property
    def queued(self) -> int:
        """How many wait for a slot now, in every process."""
        return self._rows.counts()[1]

    @property
    def held(self) -> int:
        """How many slots are held now, in every process."""
        return self._rows.counts()[0]

    # -- what the file cannot decide -------------------------------------------------

    def _fallback(self, exc: BackendUnavailable, name: str, waiting: Waiting | None) -> str:
        self._wake_sockets.forget(name)
        return self._elsewhere.take(exc, name, waiting)

    # -- wake-ups ----------------------------------------------------------------------

    def _told(self, promoted: list[Promoted]) -> None:
        if promoted:
            self._wake_sockets.wake(promoted)

    def _remind(self) -> None:
        """Have the wake sockets' thread look at the file when the first holder's lease runs out."""
        seconds = self._rows.first_expiry
        if seconds != math.inf:
            # A little after the lease's end, so that the look finds it run out.
            self._wake_sockets.remind(self._rows, seconds + 0.01, self._look)

    def _look(self) -> None:
        promoted, waiting = self._rows.expire()
        self._told(promoted)
        if waiting:
            self._remind()  # still waiters: look again when the next lease is due

    # -- transitions ---------------------------------------------------------------------

    def take(self, name: str, waiting: Waiting | None) -> str:
        wake_socket = None
        if waiting is not None:
            wake_socket = self._wake_sockets.expect(name, waiting, self._holding)
        calls = self._backend.file.calls
        # A take does not wait for another process's lock past its caller's timeout (at
        # least a moment, file.py's LOCK_GRACE; one that will not wait for a slot,
        # ``timeout=0``, that moment): no slot, as the file is busy, not unavailable.
        calls.patience = 0.0 if waiting is None else waiting.patience
        waited = False
        try:
            try:
                outcome, promoted = self._rows.take(name, waiting is not None, wake_socket)
            except Waited:
                waited = True
            if waited:
                # Had the lock after a wait: the take is made in the transaction that wait
                # opened (out of the handler, as SQLiteHandle's decision after one is).
                outcome, promoted = self._rows.take(name, waiting is not None, wake_socket)
        except LockTimeout:
            self._wake_sockets.forget(name)
            self._unwritten.add(name)
            return FULL
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        except BaseException:
            self._wake_sockets.forget(name)
            raise
        finally:
            calls.patience = None
            if waited:
                self._backend.file.let_go()  # kept, if the take never began again
        self._told(promoted)
        if outcome == QUEUED:
            self._remind()
        else:
            self._wake_sockets.forget(name)
        self._backend.sweep_if_due()
        return outcome

    async def take_async(self, name: str, waiting: Waiting | None) -> str:
        # At once when the file is free (a transaction of microseconds); else the wait
        # for its lock is a thread's, never the event loop's.
        try:
            with self._rows.at_once():
                return self.take(name, waiting)
        except Busy:
            pass
        # A take whose caller is cancelled meanwhile still lands (a thread cannot be
        # stopped): the release of its name waits for it (see release_async), so that
        # the slot it takes is not left held by nobody.
        call = asyncio.ensure_future(asyncio.to_thread(self.take, name, waiting))
        self._landing[name] = call
        call.add_done_callback(functools.partial(self._landed, name))
        return await asyncio.shield(call)

    def _landed(self, name: str, call: asyncio.Future[str]) -> None:
        if self._landing.get(name) is call:
            del self._landing[name]
        if not call.cancelled():
            call.exception()  # seen here, whether or not its caller is still there

    async def _off_loop(self, call: Callable[[], R]) -> R:
        return await self._rows.off_loop(call)

    def _released_elsewhere(self, name: str) -> bool:
        self._wake_sockets.forget(name)
        return self._elsewhere.release(name)

    def idle(self) -> bool:
        return False  # its keys expire by themselves

    def release(self, name: str) -> None:
        if self._released_elsewhere(name) or not taken_here(name):
            return
        if name in self._unwritten:
            self._unwritten.discard(name)
            return
        # Not past a moment behind another process's lock (file.py's LOCK_GRACE): a
        # holder done, or a waiter whose timeout passed, goes on at once, and a thread
        # of the pool makes the release when the file is free.
        calls = self._backend.file.calls
        calls.patience = 0.0
        try:
            promoted = self._rows.release(name)
        except LockTimeout:
            finish_later(functools.partial(self._release_waiting, name), f"the slot of lease {name}")
            return
        except BackendUnavailable as exc:
            self._elsewhere.lost_release(exc)
            return
        finally:
            calls.patience = None
        self._told(promoted)

    def _release_waiting(self, name: str) -> None:
        """:meth:`release` waiting for the file's lock (up to ``busy_timeout``)."""
        try:
            promoted = self._rows.release(name)
        except BackendUnavailable as exc:
            self._elsewhere.lost_release(exc)
            return
        self._told(promoted)

    async def release_async(self, name: str) -> None:
        landing = self._landing.get(name)
        if landing is None:
            try:
                # At once when the file is free: nothing suspends, so a coroutine
                # being closed (which may not await) still frees its slot.
                with self._rows.at_once():
                    self.release(name)
                return
            except Busy:
                pass
        await release_outlasting(
            functools.partial(self.release, name),
            functools.partial(self._release_later, name, landing),
            functools.partial(self._release_in_thread, name),
        )

    def _release_in_thread(self, name: str) -> None:
        finish_later(functools.partial(self.release, name), f"the slot of lease {name}")

    async def _release_later(self, name: str, landing: asyncio.Future[str] | None) -> None:
        try:
            if landing is not None:
                await asyncio.wait([landing])
            await self._off_loop(lambda: self.release(name))
        except asyncio.CancelledError:
            self._release_in_thread(name)
            raise

    def check(self, name: str, waiting: Waiting) -> str:
        calls = self._backend.file.calls
        if waiting.patience is not None:
            # A waiter with a timeout does not wait for another process's lock past a
            # moment to look: its place stays as it was (its wake socket still wakes it), and
            # its timeout is kept.
            calls.patience = 0.0
        try:
            held, lost, promoted = self._rows.renew([name])
        except LockTimeout:
            return QUEUED
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        finally:
            calls.patience = None
        self._told(promoted)
        if name in held:
            self._wake_sockets.forget(name)
            return HELD
        if name in lost:
            return LOST
        self._remind()
        return QUEUED

    async def check_async(self, name: str, waiting: Waiting) -> str:
        return await self._off_loop(lambda: self.check(name, waiting))

    def renew(self, names: list[str]) -> None:
        here = [n for n in names if n not in self._elsewhere and taken_here(n)]
        if here:
            _, _, promoted = self._rows.renew(here)
            self._told(promoted)

    def keep(self, names: list[str]) -> list[str]:
        here = [n for n in names if n not in self._elsewhere and taken_here(n)]
        if not here:
            return []
        lost, promoted = self._rows.keep(here)
        self._told(promoted)
        return lost
