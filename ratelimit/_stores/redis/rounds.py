"""One script call per round for a limiter's concurrent acquires, and allotments.

**Coalescing.** The callers of one limiter in one process (its threads, or the tasks
of one event loop) take turns in *rounds*: while a round's call is in flight,
newcomers queue; when it lands, the first of them leads the next round, which carries
every request queued by then in one call. The script decides them in arrival order
(``batch`` in ``lua/_single.lua``) exactly as separate calls would, so each caller
gets its own exact wait. A caller alone makes one call.

**Allotments** (``lease=`` on a limiter). A round may also take an *allotment*: a
batch of the shared budget, granted like any request but spent here by callers that
make no call, until ``seconds`` after the round was sent; what is left goes back with
the next round (or at ``close``). Its size is this process's demand per second
(older measures fading over ``seconds``) times ``seconds``. It is taken only when
every request of its round went at once: a queue means the budget has no slack.

Why the fleet never exceeds the limit: every allotted token is granted by the shared
algorithm like any other, and is sent at most ``seconds`` after that grant. The
limiter adds ``seconds`` to its guard (see ``_limiting/guard.py``), which keeps the
limit for requests that leave that late: a token bucket keeps ``seconds x rate``
tokens of its capacity back, a window counts each grant ``seconds`` longer.

In arrival order within a process: a request that does not fit what is left of the
allotment voids the rest (it goes back with the round that carries the request), so
no later caller can take tokens here ahead of it.

**Leaving early.** A caller may leave on an exception at any point: a thread
interrupted while it waits (``KeyboardInterrupt``, a signal handler that raises, as
``SIGALRM``-based timeouts do), a task cancelled. Threads and tasks leave the same way
(``_leave``): out of the queue, the lead handed on if it had been given, the others
of a round it led put back first in the queue for the next leader (failed only when
the store was unavailable), and a grant made for it given back: at once if it was
decided, by the round's leader when the round lands if not.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..._errors import BackendUnavailable
from ..landing import Late, shielded

__all__ = ["MOST_PER_ROUND", "Ask", "Round", "RoundReply", "Rounds"]

logger = logging.getLogger("ratelimit")

#: A grant to give back: the request as the store was asked it, and the grant's time.
Owed = tuple[object, float]


#: The most requests one round carries: Redis runs one script at a time, so a bounded
#: round bounds how long it holds the server; the callers behind go in the next round.
MOST_PER_ROUND = 512


class Ask:
    """One caller's request in a round: its outcome, and how to wake it."""

    __slots__ = (
        "closed",
        "error",
        "gone",
        "lead",
        "max_wait",
        "reply",
        "request",
        "result",
        "round",
        "sent",
        "tokens",
        "waker",
    )

    def __init__(
        self,
        tokens: float,
        max_wait: float,
        waker: threading.Event | asyncio.Future[None] | None,
        request: object = None,
    ) -> None:
        #: The request's weight, and what the store is asked (a composite: per limit).
        self.tokens = tokens
        self.request: object = tokens if request is None else request
        self.max_wait = max_wait
        self.waker = waker
        self.result: tuple[float, float] | None = None
        self.error: BaseException | None = None
        #: Promoted to run the next round.
        self.lead = False
        #: The round this caller leads, from its arrival or promotion; whether its
        #: call has gone to the store, what it brought, and whether the round is
        #: closed and its lead handed on (each step once, see ``Rounds._complete``).
        self.round: Round | None = None
        self.sent = False
        self.reply: RoundReply | None = None
        self.closed = False
        #: Left (an exception) while a round led by another carried it: the leader
        #: gives its grant back.
        self.gone = False

    def wake(self) -> None:
        waker = self.waker
        if isinstance(waker, threading.Event):
            waker.set()
        elif waker is not None and not waker.done():
            waker.set_result(None)

    def outcome(self) -> tuple[float, float]:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(frozen=True, slots=True)
class Round:
    """What one call carries: the requests, an allotment's rest given back, an allotment asked."""

    asks: list[Ask]
    #: ``(tokens, at)`` of an ended allotment going back, or ``None``.
    give_back: tuple[float, float] | None
    #: Tokens of allotment wanted (0: none), and the least worth taking.
    want: float
    least: float
    #: Local time the call was sent: an allotment taken by it ends ``seconds`` later.
    sent: float


@dataclass(frozen=True, slots=True)
class RoundReply:
    #: ``(signed_wait, at)`` per request, in order.
    decisions: list[tuple[float, float]]
    #: Tokens allotted, and the store time they were granted at.
    allotted: float
    at: float


class _Queue:
    """The callers of one thread world (this process's threads, or one event loop)."""

    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        #: False: free; else held by a round's leader (True), or by a caller alone
        #: (its own marker, see ``Rounds._alone``) until it hands the lead on.
        self.busy: object = False
        self.waiting: collections.deque[Ask] = collections.deque()


class Rounds:
    """The acquires of one bound limiter in this process (see the module's doc).

    ``decide`` / ``decide_async`` make a round's call; ``give_back`` /
    ``give_back_async`` return a grant (``request, at``) made for a caller that left;
    ``now`` is the limiter's clock; ``lease`` the seconds of an allotment (``None``:
    coalescing only); ``most`` the largest grant the limit makes, which caps an allotment.
    """

    __slots__ = (
        "__weakref__",
        "_allotting",
        "_asked",
        "_decide",
        "_decide_async",
        "_decide_one",
        "_decide_one_async",
        "_give_back",
        "_give_back_async",
        "_lock",
        "_loop_queue",
        "_loops",
        "_now",
        "_opened",
        "_pool",
        "_pool_at",
        "_rate",
        "_threads",
        "_until",
        "_voids",
        "lease",
        "most",
        "on_allotment",
    )

    def __init__(
        self,
        decide: Callable[[Round], RoundReply],
        decide_async: Callable[[Round], Awaitable[RoundReply]],
        give_back: Callable[[Any, float], None],
        give_back_async: Callable[[Any, float], Awaitable[None]],
        now: Callable[[], float],
        lease: float | None,
        most: float,
        decide_one: Callable[[Any, float], tuple[float, float]] | None = None,
        decide_one_async: Callable[[Any, float, Late[tuple[float, float]] | None], Awaitable[tuple[float, float]]]
        | None = None,
    ) -> None:
        self._decide = decide
        self._decide_async = decide_async
        # A round of one request and nothing else (no allotment: see _alone), decided as a
        # plain reserve of ``(request, max_wait)``; None: as any round.
        self._decide_one = decide_one if lease is None else None
        self._decide_one_async = decide_one_async if lease is None else None
        self._give_back = give_back
        self._give_back_async = give_back_async
        self._now = now
        self.lease = lease
        self.most = most
        # False once the backend has closed: no allotment is taken any more, as nothing
        # would give its rest back.
        self._allotting = lease is not None
        self._lock = threading.Lock()
        self._threads = _Queue()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()
        # The last loop's queue, the loop weakly: found without the weak dictionary's
        # look-up, which makes a weak reference each time.
        self._loop_queue: tuple[weakref.ref[asyncio.AbstractEventLoop], _Queue] | None = None
        # The allotment being spent: tokens left, the store time they were granted at, and
        # the local time after which none may be spent.
        self._pool = 0.0
        self._pool_at = math.nan
        self._until = -math.inf
        # Rests of allotments to give back, one per round.
        self._voids: list[tuple[float, float]] = []
        # Demand: tokens asked since the last round was opened, and the rate measured.
        self._asked = 0.0
        self._opened: float | None = None
        self._rate: float | None = None
        #: Told the seconds a new allotment has to run (see ``redis/allotment_returns.py``).
        self.on_allotment: Callable[[float], None] | None = None
        _EVERY.add(self)

    def _forked(self) -> None:
        # In a forked child: the allotment is the parent's to spend (the child spending it
        # too would grant it twice), and the callers queued were the parent's threads.
        self._lock = threading.Lock()
        self._threads = _Queue()
        self._loops = weakref.WeakKeyDictionary()
        self._loop_queue = None
        self._pool, self._pool_at, self._until = 0.0, math.nan, -math.inf
        self._voids = []
        self._asked, self._opened, self._rate = 0.0, None, None

    # -- what is here ---------------------------------------------------------------

    @property
    def allotted(self) -> float:
        """Tokens of the current allotment still to spend (0 once it has ended)."""
        with self._lock:
            return self._pool if self._now() < self._until else 0.0

    def _from_pool(self, tokens: float, queue: _Queue) -> tuple[float, float] | None:
        """A grant from the allotment, or ``None`` (the rest then voided: see the module)."""
        pool = self._pool
        if not pool > 0:
            return None
        if queue.busy:
            return None  # callers queued here are ahead: the allotment is not theirs to skip
        if tokens <= pool + 1e-9 and self._now() < self._until:
            self._pool = pool - tokens if tokens < pool else 0.0
            return 0.0, self._pool_at
        self._void()
        return None

    def _void(self) -> None:
        if self._pool > 0:
            self._voids.append((self._pool, self._pool_at))
        self._pool = 0.0
        self._until = -math.inf

    def void(self) -> None:
        """End the allotment now (a provider's pause; the rest goes back with the next round)."""
        with self._lock:
            self._void()

    def reserve_here(self, tokens: float, *, threads: bool) -> tuple[float, float] | None:
        """A grant from the allotment for a task of the running event loop (or, with
        ``threads``, one served by the threads' rounds), made without awaiting;
        ``None``: it needs a round (``reserve_async``)."""
        if not self._pool > 0:
            return None
        with self._lock:
            queue = self._threads if threads else self._loops.get(asyncio.get_running_loop(), _IDLE)
            got = self._from_pool(tokens, queue)
            if got is not None:
                self._asked += tokens
            return got

    def take_ended(self) -> list[tuple[float, float]]:
        """The rests to give back now: the current allotment's if it has ended, and any
        voided one no round has carried yet."""
        with self._lock:
            if self._pool > 0 and self._now() >= self._until:
                self._void()
            voids, self._voids = self._voids, []
            return voids

    def stop_allotting(self) -> None:
        """Take no allotment from now on (the backend closes); one a round in flight
        brings goes back at once."""
        with self._lock:
            self._allotting = False

    def take_voids(self) -> list[tuple[float, float]]:
        """Every rest not yet given back, and the current allotment's (at ``close``); from
        now on no allotment is taken, and one a round in flight brings goes back at once."""
        with self._lock:
            self._allotting = False
            self._void()
            voids, self._voids = self._voids, []
            return voids

    # -- a round --------------------------------------------------------------------

    def _open(self, asks: list[Ask]) -> Round:
        now = self._now()
        want = least = 0.0
        if self.lease is not None and self._allotting:
            asked, self._asked = self._asked, 0.0
            if self._opened is not None and now > self._opened:
                # The demand since the last round, against the estimate before it,
                # which counts less the longer ago it was measured (by the allotment's
                # length): after a pause, the pause is the demand.
                sample = asked / (now - self._opened)
                kept = 0.0 if self._rate is None else math.exp(-(now - self._opened) / self.lease)
                self._rate = sample * (1 - kept) + (self._rate or 0.0) * kept
            demand = sum(ask.tokens for ask in asks) if self._rate is None else self._rate * self.lease
            least = min(ask.tokens for ask in asks)
            want = float(math.ceil(min(demand, self.most)))
            if want > self.most:
                want = math.floor(self.most)
            if want < least:
                want = 0.0
        self._opened = now
        give_back = self._voids.pop(0) if self._voids else None
        return Round(asks, give_back, want, least, now)

    def _close(self, rnd: Round, reply: RoundReply, queue: _Queue) -> list[Owed]:
        # Run again by _leave if an interrupt cut it short: each caller's outcome set
        # once, and each woken again (the interrupt may have fallen inside a wake).
        owed: list[Owed] = []
        for ask, decision in zip(rnd.asks, reply.decisions, strict=True):
            if ask.result is None and ask.error is None:
                ask.result = decision
                if ask.gone and decision[0] >= 0:
                    owed.append((ask.request, decision[1]))
            ask.wake()
        if reply.allotted > 0 and (self.lease is None or not self._allotting):
            owed.append((reply.allotted, reply.at))  # asked before the backend closed
        elif reply.allotted > 0 and self.lease is not None:
            self._void()  # an allotment taken by another thread world meanwhile
            self._pool, self._pool_at, self._until = reply.allotted, reply.at, rnd.sent + self.lease
            if self.on_allotment is not None:
                self.on_allotment(self._until - self._now())
        # Those who queued while the call was out are served from the new allotment, in
        # order, as far as it goes.
        while queue.waiting:
            head = queue.waiting[0]
            got = self._from_pool(head.tokens, _IDLE)
            if got is None:
                break
            queue.waiting.popleft()
            head.result = got
            head.wake()
        return owed

    def _fail(self, rnd: Round, exc: BackendUnavailable) -> None:
        # A rest given back by the failed call is lost with it: the budget is the
        # poorer for it, never the richer.
        for ask in rnd.asks:
            ask.error = exc
            ask.wake()

    def _hand_over(self, queue: _Queue) -> None:
        if queue.waiting:
            head = queue.waiting[0]
            head.lead = True
            queue.busy = True  # held by the next leader now, not by a caller alone
            head.wake()
        else:
            queue.busy = False

    def _lead_next(self, ask: Ask, queue: _Queue) -> Round:
        # Promoted: this caller carries the requests queued by now, its own first, up
        # to a round's most; the rest wait for the next. The round is known before
        # any leaves the queue, so that an interrupt in between loses none.
        waiting = queue.waiting
        n = min(len(waiting), MOST_PER_ROUND)
        asks = list(itertools.islice(waiting, n))
        assert asks[0] is ask
        ask.round = self._open(asks)
        for _ in range(n):
            waiting.popleft()
        return ask.round

    # -- a caller's way through: the same for threads and tasks, but for the waits ------
    #
    # A caller may be interrupted at any point (a signal handler raising in the main
    # thread): each step leaves a state _leave can finish from.

    def _arrive(
        self, ask: Ask, queue: _Queue, waker: Callable[[], threading.Event | asyncio.Future[None]]
    ) -> tuple[float, float] | None:
        """A grant from the allotment; or ``None``: ``ask`` queued behind a round in
        flight, or (``ask.round`` set) leading a round of its own now."""
        with self._lock:
            self._asked += ask.tokens
            got = self._from_pool(ask.tokens, queue)
            if got is not None:
                return got
            if queue.busy:
                ask.waker = waker()
                queue.waiting.append(ask)
            else:
                ask.round = self._open([ask])
                queue.busy = True
            return None

    def _woken(self, ask: Ask, queue: _Queue) -> Round | None:
        """After a queued ask was woken: the round it now leads, or ``None`` (its
        outcome has come)."""
        if not ask.lead:
            return None
        with self._lock:
            return self._lead_next(ask, queue)

    def _complete(self, ask: Ask, queue: _Queue) -> list[Owed]:
        # The round ``ask`` led has its reply: its callers told, the lead handed on;
        # the grants of callers that left meanwhile, to give back.
        assert ask.round is not None
        assert ask.reply is not None
        owed = self._close(ask.round, ask.reply, queue)
        if not ask.closed:
            self._hand_over(queue)  # twice at worst, if interrupted: one more leader
            ask.closed = True
        return owed

    def _finish(self, ask: Ask, queue: _Queue) -> list[Owed]:
        with self._lock:
            return self._complete(ask, queue)

    def _leave(self, ask: Ask, queue: _Queue, exc: BaseException) -> list[Owed]:
        """A caller leaving on ``exc`` (see the module's doc), wherever it was; the
        grants to give back now (its own, if one was decided for it)."""
        with self._lock:
            owed: list[Owed] = []
            rnd = ask.round
            if rnd is not None and ask.reply is not None and not ask.closed:
                owed = self._complete(ask, queue)  # the landing an interrupt cut short
            if ask.result is not None:
                wait, at = ask.result
                if wait >= 0:
                    owed.append((ask.request, at))
                return owed
            if ask.error is not None:
                return owed
            if ask in queue.waiting:
                queue.waiting.remove(ask)
                if ask.lead:
                    self._hand_over(queue)
                return owed
            if rnd is None:
                ask.gone = True  # in a round another caller leads (or never queued)
                return owed
            if ask.sent and isinstance(exc, BackendUnavailable):
                self._fail(rnd, exc)  # unavailable to them too: they fail at once
            else:
                # The leader's own exception (an interrupt; a bug, which the next
                # leader meets for itself): the others go first in the queue again.
                # If the call went out, the store may have recorded it: their tokens
                # may count twice (never too few), and the rest of an allotment it carried
                # is lost rather than given back twice.
                waiting = queue.waiting
                queued = {id(other) for other in waiting}
                waiting.extendleft(reversed([other for other in rnd.asks[1:] if id(other) not in queued]))
                if rnd.give_back is not None and not ask.sent:
                    self._voids.insert(0, rnd.give_back)
            self._hand_over(queue)
            return owed

    # -- a caller alone: no allotment, nobody queued, no round in flight ---------------
    #
    # Its round would carry its request and nothing else: the same single call as a
    # reserve without rounds, made without the round's bookkeeping. It holds the
    # queue busy as a round's leader does, so that callers arriving meanwhile queue,
    # and hands the lead on as a leader does, whatever happens. Leaving on an
    # exception: a grant decided for it goes back (as _leave's); one the store may
    # have made with no reply heard is lost, as a leader's is.
    #
    # The queue names who holds it (``busy`` is the caller's own marker), not a local
    # the caller sets after taking it: an interrupt falling between the two would
    # leave the queue held by nobody, and every later caller waiting for ever.

    def _alone(self, queue: _Queue, me: object) -> bool:
        """Whether the queue was free; then ``me`` holds it."""
        with self._lock:
            if queue.busy:
                return False
            queue.busy = me
            return True

    def _let_go(self, queue: _Queue, me: object) -> None:
        """The lead handed on if ``me`` still holds the queue: once, wherever an
        interrupt fell."""
        with self._lock:
            if queue.busy is me:
                self._hand_over(queue)

    def reserve(self, tokens: float, max_wait: float, request: object = None) -> tuple[float, float]:
        """Decide ``tokens`` (``request``, if the store is asked otherwise) for a
        thread: from the allotment, or in a round."""
        queue = self._threads
        one = self._decide_one
        if one is not None:
            me = object()
            decision: tuple[float, float] | None = None
            try:
                if self._alone(queue, me):
                    decision = one(tokens if request is None else request, max_wait)
                    self._let_go(queue, me)
                    return decision
            except BaseException:
                self._let_go(queue, me)
                if decision is not None and decision[0] >= 0:
                    self._return((tokens if request is None else request, decision[1]))
                raise
        ask = Ask(tokens, max_wait, None, request)
        try:
            got = self._arrive(ask, queue, threading.Event)
            if got is not None:
                return got
            rnd = ask.round
            if rnd is None:
                assert isinstance(ask.waker, threading.Event)
                ask.waker.wait()
                rnd = self._woken(ask, queue)
                if rnd is None:
                    return ask.outcome()
            ask.sent = True
            ask.reply = self._decide(rnd)
            owed = self._finish(ask, queue)
        except BaseException as exc:
            for grant in self._leave(ask, queue, exc):
                self._return(grant)
            raise
        for grant in owed:
            self._return(grant)
        return ask.outcome()

    async def reserve_async(
        self, tokens: float, max_wait: float, request: object = None, late: Late[tuple[float, float]] | None = None
    ) -> tuple[float, float]:
        """Decide ``tokens`` (or ``request``) for a task of the running loop: from the
        allotment, or in a round. With ``late``, a decision that lands once the task
        has left (cancelled) is handed to it: a caller alone's by its call (the held
        connection reads the reply on), one made in a round by the round run in a task
        of its own (a round's leader must see it land for the others it carries)."""
        loop = asyncio.get_running_loop()
        last = self._loop_queue
        if last is not None and last[0]() is loop:
            queue = last[1]
        else:
            with self._lock:
                queue = self._loops.setdefault(loop, _Queue())
            self._loop_queue = (weakref.ref(loop), queue)
        one = self._decide_one_async
        if one is not None:
            me = object()
            decision: tuple[float, float] | None = None
            try:
                if self._alone(queue, me):
                    decision = await one(tokens if request is None else request, max_wait, late)
                    self._let_go(queue, me)
                    return decision
            except BaseException:
                self._let_go(queue, me)
                if decision is not None and decision[0] >= 0:
                    await self._return_async((tokens if request is None else request, decision[1]))
                raise
        if late is not None:
            return await shielded(self.reserve_async(tokens, max_wait, request), late)
        ask = Ask(tokens, max_wait, None, request)
        try:
            got = self._arrive(ask, queue, loop.create_future)
            if got is not None:
                return got
            rnd = ask.round
            if rnd is None:
                assert isinstance(ask.waker, asyncio.Future)
                await ask.waker
                rnd = self._woken(ask, queue)
                if rnd is None:
                    return ask.outcome()
            ask.sent = True
            ask.reply = await self._decide_async(rnd)
            owed = self._finish(ask, queue)
        except BaseException as exc:
            for grant in self._leave(ask, queue, exc):
                await self._return_async(grant)
            raise
        for grant in owed:
            await self._return_async(grant)
        return ask.outcome()

    def _return(self, grant: Owed) -> None:
        try:
            self._give_back(*grant)
        except Exception:  # another's grant must not fail this caller; its own, its exit
            logger.warning("could not give back the grant of a caller that left", exc_info=True)

    async def _return_async(self, grant: Owed) -> None:
        try:
            await self._give_back_async(*grant)
        except Exception:
            logger.warning("could not give back the grant of a caller that left", exc_info=True)


#: A queue with nobody in it, for serving the waiters of a round just closed.
_IDLE = _Queue()

#: Every ``Rounds`` of this process, for a forked child to forget their allotments.
_EVERY: weakref.WeakSet[Rounds] = weakref.WeakSet()


def _forget_allotments_in_child() -> None:
    for rounds in list(_EVERY):
        rounds._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_allotments_in_child)
