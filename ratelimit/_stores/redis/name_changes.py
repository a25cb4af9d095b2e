"""A name's change by name, as this process last read it, for its keys' decisions to carry.

Each key of a name (``for_key``) decides in a hash slot of its own, whose script
cannot read its name's change. So ``set_limit(name, ...)`` also writes the change as
one string beside the name's hash (``ratelimit:{<name>}:config:keys``, see
:func:`~ratelimit._stores.keys.follow_key`): ``"<v> <rate> <burst> <until>"`` (``-``
for none; ``until`` the store time it ends) while it is in force, and ``"<v>"`` for
:data:`RESET_KEPT` seconds after a reset by name. ``v`` is the store's time in
microseconds when it was made, so later changes have larger ones.

Each process reads that string once every :data:`EVERY` seconds at most, per name
and only for names with keyed views, and each keyed decision (a reserve or a round)
carries it after its op (see ``carry`` in lua/_single.lua); the key's script takes a
newer change into its own hash, and goes back at a newer reset. While the name has no
change in force, nothing is carried: the decision is sent as without this. A synchronous
caller reads the string on the decision's path (one GET every ``EVERY`` seconds); on
an event loop it is read by a task beside the decisions, which carry what was read
last until it lands.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..keys import follow_key, text_of

__all__ = ["EVERY", "RESET_KEPT", "NameChanges", "carried_text"]

logger = logging.getLogger("ratelimit")

#: Seconds between two reads of a name's change by one process: how long a key first
#: used after a change (or a reset) by name may be decided at the limit before it.
EVERY = 1.0
#: Seconds a reset by name stays carried: a key that took the change from a process
#: yet to read the reset goes back at its next decision within them.
RESET_KEPT = 600.0
#: Seconds a read under way holds off another of the same name.
_READ_TIMEOUT = 10.0


def carried_text(version: int, rate: float | None, burst: float | None, until: float | None) -> str:
    """The string a change by name is carried as (``None`` for each: none)."""
    parts = ("-" if x is None else repr(x) for x in (rate, burst, until))
    return " ".join((str(version), *parts))


class NameChanges:
    """Each name's change by name as last read: ``read(key)`` and ``read_async(key)``
    return the string's value (``None``: no change in force)."""

    __slots__ = ("_held", "_pending", "_read", "_read_async", "_tasks", "every")

    def __init__(
        self,
        read: Callable[[str], Any] | None,
        read_async: Callable[[str], Awaitable[Any]],
        every: float = EVERY,
    ) -> None:
        self._read = read
        self._read_async = read_async
        #: Seconds between two reads of a name (0: at each decision, for tests).
        self.every = every
        # name -> (monotonic time it is due again, the text carried: '' none)
        self._held: dict[str, tuple[float, str]] = {}
        # name -> monotonic time until which a read under way is waited for
        self._pending: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def forget(self, name: str) -> None:
        """Read ``name``'s change again at its next keyed decision (this process changed it)."""
        self._held.pop(name, None)

    def carried(self, name: str) -> str:
        """What a keyed decision of ``name`` carries after its op: ``""`` for nothing,
        else a space and the change."""
        held = self._held.get(name)
        now = time.monotonic()
        if held is not None and now < held[0]:
            return held[1]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._pending.get(name, -math.inf) > now:
            pass  # being read (by another thread, or a task): what was read last meanwhile
        elif loop is None:
            self._pending[name] = now + _READ_TIMEOUT
            try:
                self._store(name, now, self._fetch(name))
            finally:
                self._pending.pop(name, None)
        else:
            # On an event loop: read beside the decisions, never blocking the loop (a
            # task its loop never ran, closed, is read again after _READ_TIMEOUT).
            self._pending[name] = now + _READ_TIMEOUT
            task = loop.create_task(self._fetch_async(name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        held = self._held.get(name)
        return "" if held is None else held[1]

    def _store(self, name: str, now: float, text: str | None) -> None:
        if text is None:  # not read (the store unavailable): kept, read again later
            previous = self._held.get(name)
            text = "" if previous is None else previous[1]
        self._held[name] = (now + self.every, text)

    def _fetch(self, name: str) -> str | None:
        if self._read is None:
            return None  # an asyncio client alone: read on its loops only
        try:
            return _text(self._read(follow_key(name)))
        except Exception as exc:  # the decision that follows meets the outage, if any
            logger.debug("limiter %r: its change by name was not read: %s", name, exc)
            return None

    async def _fetch_async(self, name: str) -> None:
        try:
            try:
                text = _text(await self._read_async(follow_key(name)))
            except Exception as exc:
                logger.debug("limiter %r: its change by name was not read: %s", name, exc)
                text = None
            self._store(name, time.monotonic(), text)
        finally:
            self._pending.pop(name, None)


def _text(raw: Any) -> str:
    return "" if raw is None else " " + text_of(raw)
