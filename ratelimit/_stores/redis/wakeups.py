"""Being told of a grant instead of asking for it: a Redis store's wake-ups.

A caller waiting for a slot of a shared semaphore is woken by whoever frees one: the
script that releases a slot hands it to the head of the queue and publishes that
waiter's id on its process's channel, ``ratelimit:wake:<process>``. One listener per
backend and process, a thread on its own connection, reads the channel and wakes the
waiter. A grant therefore costs the waiter no round trip at all, and nobody polls.

A message can be lost (a reconnect at the wrong moment): a waiter also looks for
itself in the store now and then (see ``ConcurrencyLimit``), so a lost message costs
time, never a slot.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from typing import Any

from ..waiting import Waiting, process_id

__all__ = ["CHANNEL_PREFIX", "Listener", "listener_for"]

logger = logging.getLogger("ratelimit")

#: A process's channel is this prefix and its id.
CHANNEL_PREFIX = "ratelimit:wake:"

#: A listener with nobody to wake stops after this long (seconds), closing its
#: connection; the next waiter starts another.
IDLE_SECONDS = 10.0


class Listener:
    """The wake-ups of one process on one Redis client: a thread on a pub/sub
    connection of its own, started by the first waiter and stopped once idle."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._channel = CHANNEL_PREFIX + process_id()
        self._lock = threading.Lock()
        self._waiting: dict[str, Waiting] = {}
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def channel(self) -> str:
        return self._channel

    def expect(self, name: str, waiting: Waiting) -> None:
        """Wake ``waiting`` when ``name`` is published; subscribed before this returns,
        so a grant made by the very next script call is heard."""
        with self._lock:
            self._waiting[name] = waiting
            if self._thread is None or not self._thread.is_alive():
                self._ready.clear()
                self._thread = threading.Thread(target=self._run, name="ratelimit-wakeups", daemon=True)
                self._thread.start()
        # Subscribing takes a round trip, once per idle period; without waiting for it
        # the message of a release racing the take would be missed.
        self._ready.wait(5.0)

    def forget(self, name: str) -> None:
        with self._lock:
            self._waiting.pop(name, None)

    def wake(self, name: str) -> None:
        with self._lock:
            waiting = self._waiting.pop(name, None)
        if waiting is not None:
            waiting.wake()

    def _run(self) -> None:
        idle = 0.0
        pubsub = None
        try:
            while True:
                if pubsub is None:
                    try:
                        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                        pubsub.subscribe(self._channel)
                        # The subscription is confirmed by its first reply.
                        pubsub.get_message(timeout=1.0)
                    except Exception:
                        logger.warning(
                            "ratelimit: cannot listen for wake-ups; waiters will look for themselves", exc_info=True
                        )
                        pubsub = self._drop(pubsub)
                        self._ready.set()
                        if self._idle_stop(1.0):
                            return
                        continue
                    self._ready.set()
                try:
                    message = pubsub.get_message(timeout=1.0)
                except Exception:
                    logger.warning("ratelimit: lost the wake-up connection; reconnecting", exc_info=True)
                    pubsub = self._drop(pubsub)
                    continue
                if message is None:
                    idle += 1.0
                    if idle >= IDLE_SECONDS and self._idle_stop(0.0):
                        return
                    continue
                idle = 0.0
                data = message.get("data")
                if isinstance(data, bytes):
                    data = data.decode("utf-8", "replace")
                if isinstance(data, str):
                    self.wake(data)
        finally:
            self._drop(pubsub)

    def _idle_stop(self, pause: float) -> bool:
        """Stop (returning True) if nobody waits; ``pause`` first, to not spin."""
        if pause:
            threading.Event().wait(pause)
        with self._lock:
            if self._waiting:
                return False
            self._thread = None
            return True

    @staticmethod
    def _drop(pubsub: Any) -> None:
        if pubsub is not None:
            # Closing a broken connection: nothing more to do if that fails too.
            with contextlib.suppress(Exception):
                pubsub.close()


_listeners: weakref.WeakKeyDictionary[Any, Listener] = weakref.WeakKeyDictionary()
_listeners_lock = threading.Lock()


def _forget_listeners() -> None:
    # A forked child must not inherit its parent's listeners, whose threads did not
    # survive the fork (its channel is its own: process_id changes too).
    _listeners.clear()


os.register_at_fork(after_in_child=_forget_listeners)


def listener_for(client: Any) -> Listener:
    """The listener of ``client`` in this process."""
    with _listeners_lock:
        listener = _listeners.get(client)
        if listener is None:
            listener = _listeners[client] = Listener(client)
        return listener
