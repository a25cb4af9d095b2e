"""A ConcurrencyLimit's slots in Redis, shared by every process: what
``RedisBackend.bind_slots`` returns.

Each transition is one call of ``lua/concurrency.lua`` (the twin of
``_algorithms/semaphore.py``): a take, a release, a renewal. The script that hands a
slot over publishes the news, and the waiter's process hears it on its listener
(``wakeups.py``); a waiter also looks at its place every ``check_every`` seconds in
case that message was lost.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from ..._algorithms.semaphore import FULL, HELD, QUEUED
from ..._clock import Clock
from ..._errors import BackendUnavailable
from ..keys import text_of
from ..memory.slots import Elsewhere
from ..slots import LOST, taken_here
from ..unfinished import finish_later, release_outlasting
from ..waiting import Waiting
from .scripts import concurrency_script
from .wakeups import CHANNEL_PREFIX, Listener, listener_for

__all__ = ["RedisSlots"]


class RedisSlots:
    """Slots in Redis, shared by every process; each transition is one script call.

    When Redis cannot be reached the backend's ``on_unavailable`` decides: ``"raise"``
    raises :class:`~ratelimit.BackendUnavailable`; ``"allow"`` grants a slot the
    store never hears of; ``"local"`` takes it from this process's own share,
    ``max(1, floor(max_in_flight * share))`` slots, ``share`` the backend's
    ``fallback_share()`` when the limit is made (``local_share``; with ``"auto"``, one
    over the live processes counted by then). A slot is released where it
    was taken.
    """

    def __init__(self, backend: Any, key: str, most: int, lease: float, clock: Clock | None) -> None:
        client = backend.client
        if client is None:
            raise TypeError(
                "ConcurrencyLimit needs a RedisBackend with a synchronous client, which listens for wake-ups "
                "and renews leases from a thread: make it with RedisBackend.from_url(...) "
                "or RedisBackend(redis.Redis(...))"
            )
        self._backend = backend
        self._keys = (key,)
        self._now = backend.now_source(clock)
        self._script = concurrency_script()
        self._params = (str(most), repr(float(lease)), CHANNEL_PREFIX)
        self._client = client
        self.check_every = lease / 3
        self._elsewhere = Elsewhere(backend, key, "Redis", most, backend.fallback_share(), clock)
        #: Takes on their way to Redis whose caller was cancelled meanwhile, by name.
        self._landing: dict[str, asyncio.Future[Any]] = {}

    @property
    def _listener(self) -> Listener:
        # Looked up at each use: a forked child has a listener (and a channel) of its own.
        return listener_for(self._client)

    def _args(self, op: str, *extra: str) -> list[str]:
        return [op, self._now(), *self._params, *extra]

    def _fallback(self, exc: BackendUnavailable, name: str, waiting: Waiting | None) -> str:
        self._listener.forget(name)
        return self._elsewhere.take(exc, name, waiting)

    def _taken(self, reply: Any, name: str) -> str:
        outcome = text_of(reply[0])
        if outcome not in (HELD, QUEUED, FULL):
            raise ValueError(f"unexpected reply from the concurrency script: {reply!r}")
        if outcome != QUEUED:
            self._listener.forget(name)
        return outcome

    def take(self, name: str, waiting: Waiting | None) -> str:
        if waiting is not None:
            self._listener.expect(name, waiting)
        try:
            reply = self._backend.run(self._script, self._keys, self._args("take", name, "1" if waiting else ""))
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        except BaseException:
            self._listener.forget(name)
            raise
        return self._taken(reply, name)

    async def take_async(self, name: str, waiting: Waiting | None) -> str:
        if waiting is not None:
            # Subscribing blocks, once per idle period: not on the event loop.
            await asyncio.to_thread(self._listener.expect, name, waiting)
        # A take whose caller is cancelled still lands (a call in a thread cannot be
        # stopped, a command sent is run): if its release overtook it, the slot it
        # then took would be held by nobody. It goes on as a task of its own, and the
        # release of its name waits for it (see _release_async).
        call = asyncio.ensure_future(
            self._backend.run_async(self._script, self._keys, self._args("take", name, "1" if waiting else ""))
        )
        self._landing[name] = call
        call.add_done_callback(functools.partial(self._landed, name))
        try:
            reply = await asyncio.shield(call)
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        except BaseException:
            self._listener.forget(name)
            raise
        return self._taken(reply, name)

    def _released_elsewhere(self, name: str) -> bool:
        """Forget ``name``'s wake-up; free its slot if it was taken without the store."""
        self._listener.forget(name)
        return self._elsewhere.release(name)

    def idle(self) -> bool:
        return False  # its keys expire by themselves

    def release(self, name: str) -> None:
        if not self._released_elsewhere(name) and taken_here(name):
            self._release(name)

    def _release(self, name: str) -> None:
        try:
            self._backend.run(self._script, self._keys, self._args("release", name))
        except BackendUnavailable as exc:
            self._elsewhere.lost_release(exc)

    async def release_async(self, name: str) -> None:
        if self._released_elsewhere(name) or not taken_here(name):
            return
        await release_outlasting(
            functools.partial(self._release, name),
            functools.partial(self._release_async, name),
            functools.partial(self._release_in_thread, name),
        )

    def _release_in_thread(self, name: str) -> None:
        # (A store of an asyncio client alone takes no call from a thread.)
        if self._backend.client is not None:
            finish_later(functools.partial(self._release, name), f"the slot of lease {name}")

    def _landed(self, name: str, call: asyncio.Future[Any]) -> None:
        if self._landing.get(name) is call:
            del self._landing[name]
        if not call.cancelled():
            # Seen here, whether or not its caller is still there to see it.
            call.exception()

    async def _release_async(self, name: str) -> None:
        try:
            call = self._landing.get(name)
            if call is not None:
                await asyncio.wait([call])
            try:
                await self._backend.run_async(self._script, self._keys, self._args("release", name))
            except BackendUnavailable as exc:
                self._elsewhere.lost_release(exc)
        except asyncio.CancelledError:
            self._release_in_thread(name)
            raise

    def _checked(self, reply: Any, name: str) -> str:
        held = [text_of(x) for x in reply]
        if name in held[: held.index("|")]:
            self._listener.forget(name)
            return HELD
        return LOST if name in held else QUEUED

    def check(self, name: str, waiting: Waiting) -> str:
        try:
            reply = self._backend.run(self._script, self._keys, self._args("renew", name))
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        return self._checked(reply, name)

    async def check_async(self, name: str, waiting: Waiting) -> str:
        try:
            reply = await self._backend.run_async(self._script, self._keys, self._args("renew", name))
        except BackendUnavailable as exc:
            return self._fallback(exc, name, waiting)
        return self._checked(reply, name)

    def keep(self, names: list[str]) -> list[str]:
        here = [n for n in names if n not in self._elsewhere and taken_here(n)]
        if not here:
            return []
        return [text_of(x) for x in self._backend.run(self._script, self._keys, self._args("keep", *here))]

    def renew(self, names: list[str]) -> None:
        here = [n for n in names if n not in self._elsewhere and taken_here(n)]
        if here:
            self._backend.run(self._script, self._keys, self._args("renew", *here))
