"""What ``limiter.reserve()`` returns: a grant taken now, to be used later.

The first half of an ``acquire``: the store decides and records the grant, and the
caller is told when it may go instead of sleeping. Until due, :meth:`Reservation.cancel`
withdraws it; whether it is due the reservation tells by its own clock against its
wait, not the store. Only the front (``front.py``) makes them.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Generic, TypeVar

from .._clock import Clock

__all__ = ["Reservation", "wall_due"]

T = TypeVar("T")

#: The latest moment a ``datetime`` can say; a wait reaching past it is due then.
_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def wall_due(wait: float, wall_now: datetime) -> datetime:
    """``wall_now`` plus ``wait`` seconds as a UTC ``datetime``, held at the latest one
    there is."""
    try:
        return wall_now + timedelta(seconds=wait)
    except OverflowError:
        return _LATEST


class Reservation(Generic[T]):
    """A grant reserved by :meth:`~ratelimit.TokenBucket.reserve`, due at a known moment.

    The request may go :attr:`wait` seconds after ``reserve`` returned, at :attr:`due`
    on the wall clock. Until then :meth:`cancel` gives it back; once due (or cancelled
    already), ``cancel`` does nothing.

    Attributes:
        tokens: what was reserved (one number, or one per limit for a ``Composite``).
        wait: seconds from the moment ``reserve`` returned until the grant; fixed then.
        at: the grant's time on the limiter's own clock: ``time.monotonic()`` in
            process (or the test clock), the Redis server's ``TIME`` through Redis.
            ``nan`` for a grant made without the store (``on_unavailable="allow"``).
        due: the wall-clock moment of the grant, a UTC ``datetime``: this machine's
            wall clock when ``reserve`` returned, plus ``wait`` (what a scheduler's
            ``eta`` takes; other machines' clocks may drift from it).
    """

    __slots__ = (
        "_back",
        "_back_async",
        "_cancelled",
        "_clock",
        "_deadline",
        "_left",
        "_named",
        "at",
        "due",
        "tokens",
        "wait",
    )

    def __init__(
        self,
        tokens: T,
        wait: float,
        name: float,
        clock: Clock,
        back: Callable[[T, float], None],
        back_async: Callable[[T, float], Awaitable[None]],
        named: list[float] | None,
    ) -> None:
        self.tokens = tokens
        self.wait = wait
        self.at = float(name)
        self.due = wall_due(wait, datetime.now(timezone.utc))
        self._clock = clock
        # When it is due on the limiter's clock, read as reserve returns.
        self._deadline = clock.now() + wait
        # The store's name for the grant, until the first cancel takes it: a list's pop
        # is atomic, so two threads never both give it back.
        self._left = [name] if wait > 0 and not math.isnan(name) else []
        self._back = back
        self._back_async = back_async
        # The cell by which a later refund or settle would name this grant (named.py).
        self._named = named
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` gave this reservation back."""
        return self._cancelled

    def _take(self) -> float | None:
        """The grant's name if it may still be given back (not due, not given back), taken."""
        if not self._clock.now() < self._deadline:
            return None
        try:
            name = self._left.pop()
        except IndexError:
            return None
        if self._named is not None:
            self._named.clear()
        return name

    def cancel(self) -> bool:
        """Give the reservation back if it is not yet due; return whether it was.

        Requests queued behind it keep their times; its place goes to a later request
        that fits, or is rolled back if none is queued behind it. Once due, or after a
        first cancel, it does nothing and returns ``False``.

        Raises:
            BackendUnavailable: the store cannot be reached and the backend says to
                raise; the reservation is then still held, and may be cancelled again.
        """
        name = self._take()
        if name is None:
            return False
        self._cancelled = True
        try:
            self._back(self.tokens, name)
        except BaseException:
            self._cancelled = False
            self._left.append(name)
            raise
        return True

    async def cancel_async(self) -> bool:
        """:meth:`cancel` for asyncio. A cancellation of the caller while the store
        records it does not stop it."""
        name = self._take()
        if name is None:
            return False
        # Set first: a cancellation of the caller lets the give-back run on (shielded).
        self._cancelled = True
        try:
            await self._back_async(self.tokens, name)
        except Exception:
            self._cancelled = False
            self._left.append(name)
            raise
        return True

    def __repr__(self) -> str:
        return f"Reservation(tokens={self.tokens!r}, wait={self.wait!r}, due={self.due.isoformat()})"
