"""``FairShare``: many tenants on one limiter's budget, its grants split by weight.

``FairShare(limiter)`` binds a state of its own in the limiter's store, under the
limiter's name: the budget's line (the limiter's algorithm, so its bound holds) and a
pace line per active tenant (``_algorithms/fair.py`` explains the decision).
``share.for_key(tenant)`` is what callers acquire on.

Each process asks the store for one request of a tenant at a time: a *gate* per
tenant queues its callers in arrival order and opens at the slot the store booked for
the gate's next request, which presents it as its ticket; so a tenant's flood in one
process costs one store call per grant and never reaches the store ahead of its pace.
A request the store defers (a first request of a tenant busy in other processes)
sleeps to its ticket and asks once more.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .. import _validate
from .._algorithms.fair import Answer, Fair
from .._clock import Clock
from .._errors import AcquireTimeout
from .._stores.keys import Keyed
from .._stores.records import FAIR_KEPT
from .._stores.store import FairHandle
from .run_time import keep_code_values

__all__ = ["FairShare", "TenantShare"]

#: A gate's callers are woken this long after the turn they wait for, at most, to look
#: at their timeout again.
_LOOK_AGAIN = 0.05
#: How many idle tenants' gates (and the time each opens) a share keeps.
_KEPT_GATES = 4096
#: The algorithms whose rate a fair share paces its tenants at.
_PACED_KINDS = frozenset({"token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter"})
#: How many lead intervals (seconds per token of the budget's rate) a tenant's pace may
#: run ahead of now and still be admitted, by default.
DEFAULT_LEAD_INTERVALS = 4.0


def _weight(name: str, value: object) -> float:
    weight = _validate.real(name, value)
    if not 0.0 < weight < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return weight


class _Turn:
    """One caller's place in a gate. A caller that finds the gate empty is its head at
    once and needs nothing to wait on; one queued behind others gets an event (a
    thread) or a future (a task), which the caller before it sets when it leaves."""

    __slots__ = ("event", "future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.event: threading.Event | None = None
        self.future: asyncio.Future[None] | None = None

    def queue(self) -> None:
        """Made ready to wait (under the share's lock, before it joins the queue)."""
        if self.loop is None:
            self.event = threading.Event()
        else:
            self.future = self.loop.create_future()

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
        elif self.loop is not None and self.future is not None:
            self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Gate:
    """A tenant's callers in this process, in arrival order; when the store admits its
    next request (on the share's clock), and the ticket that request presents."""

    __slots__ = ("opens", "ticket", "turns")

    def __init__(self) -> None:
        self.turns: deque[_Turn] = deque()
        self.opens = -math.inf
        self.ticket: float | None = None


class FairShare:
    """One limiter's budget shared fairly among tenants.

    While the budget is saturated, the grants split in proportion to the weights of the
    tenants with requests waiting; a tenant left idle gives its share to the others at
    once, and a lone tenant gets the whole rate. A tenant's requests go in arrival
    order, and a tenant seen for the first time is not queued behind another tenant's
    flood: its first grant comes within about ``lead`` of asking. Through a shared
    store (Redis, SQLite) the shares are kept across every process, each grant one
    store call (two for a request the store defers: see ``docs/fair-shares.md``).

    Args:
        limiter: the budget (a ``TokenBucket``, ``LeakyBucket`` or ``SlidingWindow``);
            its store, name and clock are the share's. The share keeps a state of its
            own under the limiter's name: acquire on the share's tenants, not on the
            limiter itself.
        weights: each tenant's weight (a number > 0) by its key.
        default_weight: the weight of a tenant ``weights`` does not name.
        lead: seconds a tenant's pace may run ahead of now and still be admitted (a
            ``timedelta`` too); ``None``: four intervals of the budget's rate. Longer
            lets a lone tenant use the limiter's burst, and makes a newcomer wait
            about that long behind a busy tenant.

    Raises:
        TypeError, ValueError: an argument out of range, named with its value.

    Every process sharing a budget should give its tenants the same weights: each
    request is paced with the weight its own process gives it.
    """

    def __init__(
        self,
        limiter: Any,
        *,
        weights: Mapping[str, float] | None = None,
        default_weight: float = 1,
        lead: float | timedelta | None = None,
    ) -> None:
        algorithm_for = getattr(limiter, "algorithm_for", None)
        if algorithm_for is None or getattr(limiter, "low", None) is not None:
            raise TypeError(
                f"limiter must be a TokenBucket, LeakyBucket or SlidingWindow without low_share, got {limiter!r}"
            )
        if getattr(limiter, "shadow", False):
            raise ValueError(f"limiter={limiter!r} is in shadow mode: a fair share decides for real")
        self._default = _weight("default_weight", default_weight)
        self._weights: dict[str, float] = {}
        if weights is not None:
            if not isinstance(weights, Mapping):
                raise TypeError(f"weights must be a mapping of tenant keys to numbers, got {_validate.shown(weights)}")
            for tenant, weight in weights.items():
                key = _validate.key(tenant)
                self._weights[key] = _weight(f"weights[{_validate.shown(key)}]", weight)
        self._clock: Clock = limiter.clock
        alg = algorithm_for(self._clock)
        if alg.kind not in _PACED_KINDS:
            # A calendar quota's rate is its period's: a pace at it would spread a day's
            # allowance over the day, which is not what a quota promises.
            raise TypeError(f"limiter must be a TokenBucket, LeakyBucket or SlidingWindow, got {limiter!r}")
        rate = alg.sustained_rate
        if lead is None:
            seconds = DEFAULT_LEAD_INTERVALS / rate if 0.0 < rate < math.inf else 0.0
        else:
            given = lead.total_seconds() if isinstance(lead, timedelta) else lead
            seconds = _validate.real("lead", given)
            if not 0.0 <= seconds < math.inf:
                raise ValueError(f"lead must be seconds >= 0 and finite, got {lead!r}")
        self._limiter = limiter
        self._fair = Fair(alg, seconds)
        self._most = alg.most
        viewed = getattr(limiter, "key", None)
        place: str | Keyed | None = limiter.name if viewed is None else Keyed(limiter.name, viewed)
        self._handle: FairHandle = limiter.backend.bind_fair(place, self._fair, self._clock)
        # The share's state never reads a change at run time: the limiter refuses one.
        keep_code_values(limiter, FAIR_KEPT)
        self._lock = threading.Lock()
        self._gates: OrderedDict[str, _Gate] = OrderedDict()
        #: How many gates the last sweep left (see _forget_gates).
        self._left = 0

    # -- tenants ------------------------------------------------------------------------

    def for_key(self, tenant: str) -> TenantShare:
        """What ``tenant``'s callers acquire on."""
        return TenantShare(self, _validate.key(tenant))

    def set_weight(self, tenant: str, weight: float) -> None:
        """Give ``tenant`` this weight (a number > 0) from its next request on."""
        key = _validate.key(tenant)
        self._weights[key] = _weight("weight", weight)

    def weight(self, tenant: str) -> float:
        """The weight ``tenant``'s requests are paced with."""
        return self._weights.get(tenant, self._default)

    @property
    def limiter(self) -> Any:
        """The limiter whose budget is shared."""
        return self._limiter

    @property
    def lead(self) -> float:
        """Seconds a tenant's pace may run ahead of now and still be admitted."""
        return self._fair.lead

    def reset(self) -> None:
        """Forget the budget's usage and every tenant's pace."""
        self._handle.reset()
        with self._lock:
            for gate in self._gates.values():
                gate.opens = -math.inf
                gate.ticket = None

    def __repr__(self) -> str:
        return f"FairShare({self._limiter!r}, default_weight={self._default:g})"

    # -- gates --------------------------------------------------------------------------

    def _enter(self, tenant: str, turn: _Turn, *, only_first: bool = False) -> _Gate | None:
        """Join the tenant's gate (``only_first``: only if no one else is in it and its
        turn has come, else ``None``)."""
        with self._lock:
            gate = self._gates.get(tenant)
            if gate is None:
                gate = self._gates[tenant] = _Gate()
                gate.turns.append(turn)
                self._forget_gates()
                return gate
            if only_first and (gate.turns or gate.opens > self._clock.now()):
                return None
            self._gates.move_to_end(tenant)
            if gate.turns:
                turn.queue()
            gate.turns.append(turn)
            return gate

    def _leave(self, tenant: str, gate: _Gate, turn: _Turn) -> None:
        with self._lock:
            turns = gate.turns
            head = bool(turns) and turns[0] is turn
            if turn in turns:
                turns.remove(turn)
            if head and turns:
                turns[0].wake()

    def _forget_gates(self) -> None:
        """Bound the gates kept: the least recently used idle ones go (a tenant whose
        gate went may be deferred once by the store, which knows its pace). A sweep
        that could not bring them within ``_KEPT_GATES`` (thousands of tenants waiting
        at once) is not done again before their number doubles: each new tenant's gate
        would scan them all under the lock, quadratic in the tenants waiting. So at most
        ``_KEPT_GATES``, or twice the most tenants that waited here at once, are kept."""
        count = len(self._gates)
        if count <= _KEPT_GATES or (self._left > _KEPT_GATES and count <= 2 * self._left):
            return
        now = self._clock.now()
        for tenant, gate in list(self._gates.items()):
            if len(self._gates) <= _KEPT_GATES // 2:
                break
            if not gate.turns and (gate.opens <= now or len(self._gates) > _KEPT_GATES):
                del self._gates[tenant]
        self._left = len(self._gates)

    def _ticket(self, tenant: str) -> float | None:
        """The ticket the tenant's next request here presents."""
        gate = self._gates.get(tenant)
        return None if gate is None else gate.ticket

    def _gates_kept(self) -> int:
        return len(self._gates)


class _Asking:
    """One acquire's steps that need no I/O, shared by the sync and async paths: its
    timeout, what it has waited so far, and what each answer means."""

    __slots__ = ("budget", "n", "started", "tenant", "waited", "weight")

    def __init__(self, tenant: str, weight: float, n: float, budget: float, now: float) -> None:
        self.tenant = tenant
        self.weight = weight
        self.n = n
        self.budget = budget
        self.started = now
        self.waited = 0.0

    def look_again(self) -> float | None:
        """How long to wait for the turn before looking at the timeout again."""
        return _LOOK_AGAIN if self.budget < math.inf else None

    def queued(self, now: float) -> None:
        """The caller waited for its turn behind its tenant's earlier requests until ``now``."""
        self.waited = now - self.started
        if self.waited > self.budget:
            raise AcquireTimeout(self.waited)

    def delay(self, gate: _Gate, now: float) -> float:
        """Seconds to sleep before asking: until the gate opens (the tenant's turn, or a
        ticket's); refused at once if that is past the timeout."""
        delay = gate.opens - now
        if delay <= 0:
            return 0.0
        if self.waited + delay > self.budget:
            raise AcquireTimeout(self.waited + delay)
        self.waited += delay
        return delay

    def request(self, gate: _Gate) -> tuple[str, float, float, float, float | None]:
        """The store call's arguments: what is left of the timeout is the longest wait,
        and the gate's ticket is presented."""
        left = self.budget - self.waited
        return self.tenant, self.weight, self.n, left if left > 0.0 else 0.0, gate.ticket

    def answered(self, answer: Answer, gate: _Gate, now: float) -> float | None:
        """The line's wait of a grant (the gate then opens at the slot it booked for the
        next request), or ``None`` for a deferral (the gate opens at its ticket); a
        refusal raises, the gate's ticket kept for the next request."""
        if answer.wait < 0 and not answer.deferred:
            raise AcquireTimeout(self.waited - answer.wait)
        gate.ticket = answer.ticket
        if answer.deferred:
            gate.opens = now + answer.wait
            return None
        gate.opens = now + answer.next_in
        return answer.wait


class TenantShare:
    """One tenant's view of a :class:`FairShare`: ``share.for_key(tenant)``."""

    __slots__ = ("_share", "_tenant")

    def __init__(self, share: FairShare, tenant: str) -> None:
        self._share = share
        self._tenant = tenant

    @property
    def key(self) -> str:
        """The tenant."""
        return self._tenant

    @property
    def share(self) -> FairShare:
        return self._share

    @property
    def weight(self) -> float:
        """The weight this tenant's requests are paced with."""
        return self._share.weight(self._tenant)

    def __repr__(self) -> str:
        return f"{self._share!r}.for_key({_validate.shown(self._tenant)})"

    def _tokens(self, tokens: object) -> float:
        share = self._share
        # A plain float or int in (0, most] is valid as it stands (NaN fails the test).
        if (tokens.__class__ is float or tokens.__class__ is int) and 0.0 < tokens <= share._most:
            return tokens
        return _validate.tokens(tokens, share._most, share._fair.line.most_name)

    def _asking(self, tokens: object, timeout: float | timedelta | None) -> _Asking:
        share = self._share
        n = self._tokens(tokens)
        budget = math.inf if timeout is None else _validate.timeout_seconds(timeout)
        return _Asking(self._tenant, share.weight(self._tenant), n, budget, share._clock.now())

    def acquire(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> float:
        """Block until ``tokens`` are granted to this tenant; return the seconds waited.

        ``timeout``: the longest wait acceptable (``None``: as long as needed). The
        wait in the budget's line is known when the tenant's turn comes; a refusal
        then raises ``AcquireTimeout`` at once, consuming nothing. Waiting for the
        turn behind this tenant's own earlier requests counts towards ``timeout``.
        """
        asking = self._asking(tokens, timeout)
        share, clock = self._share, self._share._clock
        turn = _Turn(None)
        gate = share._enter(self._tenant, turn)
        assert gate is not None
        try:
            event = turn.event
            if event is not None:
                while not event.wait(asking.look_again()):
                    asking.queued(clock.now())
                asking.queued(clock.now())
            while True:
                delay = asking.delay(gate, clock.now())
                if delay > 0:
                    clock.sleep(delay)
                answer = share._handle.ask(*asking.request(gate))
                wait = asking.answered(answer, gate, clock.now())
                if wait is not None:
                    break
        finally:
            share._leave(self._tenant, gate, turn)
        if wait > 0:
            clock.sleep(wait)
        return asking.waited + wait

    async def acquire_async(self, tokens: float = 1.0, timeout: float | timedelta | None = None) -> float:
        """:meth:`acquire` for asyncio."""
        asking = self._asking(tokens, timeout)
        share, clock = self._share, self._share._clock
        turn = _Turn(asyncio.get_running_loop())
        gate = share._enter(self._tenant, turn)
        assert gate is not None
        try:
            future = turn.future
            if future is not None:
                while True:
                    done, _ = await asyncio.wait((future,), timeout=asking.look_again())
                    asking.queued(clock.now())
                    if done:
                        break
            while True:
                delay = asking.delay(gate, clock.now())
                if delay > 0:
                    await clock.sleep_async(delay)
                answer = await share._handle.ask_async(*asking.request(gate))
                wait = asking.answered(answer, gate, clock.now())
                if wait is not None:
                    break
        finally:
            share._leave(self._tenant, gate, turn)
        if wait > 0:
            await clock.sleep_async(wait)
        return asking.waited + wait

    def _free(self) -> tuple[_Gate, _Turn] | None:
        """The tenant's gate entered, when no earlier request of it waits here and its
        turn has come (``None``: a try is refused at once)."""
        turn = _Turn(None)
        gate = self._share._enter(self._tenant, turn, only_first=True)
        return None if gate is None else (gate, turn)

    def _took(self, answer: Answer, gate: _Gate) -> bool:
        if answer.deferred or answer.wait != 0.0:
            return False
        gate.opens = self._share._clock.now() + answer.next_in
        gate.ticket = answer.ticket
        return True

    def try_acquire(self, tokens: float = 1.0) -> bool:
        """Take ``tokens`` for this tenant if they can be granted right now; never blocks
        (``False`` while this tenant's earlier requests wait in this process)."""
        n = self._tokens(tokens)
        entered = self._free()
        if entered is None:
            return False
        try:
            gate = entered[0]
            return self._took(self._share._handle.ask(self._tenant, self.weight, n, 0.0, gate.ticket), gate)
        finally:
            self._share._leave(self._tenant, *entered)

    async def try_acquire_async(self, tokens: float = 1.0) -> bool:
        """:meth:`try_acquire` for asyncio."""
        n = self._tokens(tokens)
        entered = self._free()
        if entered is None:
            return False
        try:
            gate = entered[0]
            answer = await self._share._handle.ask_async(self._tenant, self.weight, n, 0.0, gate.ticket)
            return self._took(answer, gate)
        finally:
            self._share._leave(self._tenant, *entered)

    def peek(self, tokens: float = 1.0) -> float:
        """The wait this tenant's next request here would be told now (its pace, or the
        budget's line), recording nothing."""
        return self._share._handle.peek(self._tenant, self._tokens(tokens), self._share._ticket(self._tenant))

    async def peek_async(self, tokens: float = 1.0) -> float:
        """:meth:`peek` for asyncio."""
        n = self._tokens(tokens)
        return await self._share._handle.peek_async(self._tenant, n, self._share._ticket(self._tenant))
