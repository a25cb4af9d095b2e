"""What every algorithm is: a pure state transition, and the step that drives one.

An algorithm never reads a clock and never does I/O. Given its state, the time and a
request it answers two questions:

``plan(state, now, tokens) -> (admit_at, grant_at)``
    ``admit_at``: the earliest time the request may even be accepted (later than
    ``now`` only for a leaky bucket whose queue is full); ``grant_at``: when it may
    proceed if accepted now. Reservations are FIFO: a later request never gets an
    earlier ``grant_at`` than one already recorded.

``commit(state, now, tokens, at) -> state``
    record a grant of ``tokens`` at time ``at >= grant_at``. Committing later than
    planned is always safe, which is what lets a composite grant several limits at
    the latest of their times.

``charge(alg, state, now, tokens)`` (a function here, not a method)
    record tokens taken whatever the budget: a grant that no plan allowed, placed
    behind every reservation (see :func:`charge`).

``tail(state, tokens, at)`` and ``cancel(state, now, tokens, at) -> state``
    withdraw a reservation that has not happened yet: ``tail`` says whether it is
    the last one recorded (nothing was planned behind it), and only then does
    ``cancel`` roll it back. A reservation withdrawn from the middle of the queue
    becomes a hole instead (see ``holes.py``).

The in-process store runs these under a lock; the Lua scripts under ``lua/`` mirror
the same arithmetic, operation for operation, and the conformance suite pins the two
together decision by decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

__all__ = [
    "EPSILON",
    "Algorithm",
    "charge",
    "charge_all",
    "commit_all",
    "decide",
    "exact_room",
    "latest_all",
    "low_part",
    "peek_all",
    "plan_all",
    "step",
    "step_all",
]

# Float arithmetic on times near 1.7e9 (Redis TIME) is exact to ~2.4e-7 s, and sums of
# emission intervals pick up rounding: a grant due "now" may compute as 1e-16 s away.
# Anything within a nanosecond counts as on time. The Lua scripts use the same value.
EPSILON = 1e-9

S = TypeVar("S")


class Algorithm(Protocol[S]):
    """The pure core of one rate-limiting algorithm (see the module docstring)."""

    #: Names the Lua script and the key suffix; stable, part of the Redis key scheme.
    kind: str
    #: The argument that sets :attr:`most`, for error messages.
    most_name: str
    #: Whether each grant fills a slot of time that ends at a place known from its time
    #: alone when it waited its turn (a token bucket): such a grant can be named by a
    #: refund, and what it gives back stays good past the grant's time (``room``).
    slotted: bool

    @property
    def most(self) -> float:
        """The largest request that can ever be granted."""
        ...

    @property
    def sustained_rate(self) -> float:
        """Tokens per second granted in the long run under saturating demand."""
        ...

    def new_state(self) -> S: ...

    def plan(self, state: S, now: float, tokens: float) -> tuple[float, float]: ...

    def commit(self, state: S, now: float, tokens: float, at: float) -> S:
        """Record ``tokens`` granted at ``at``; ``tokens == 0`` records nothing (a
        composite's member that a request does not weigh on)."""
        ...

    def refund(self, state: S, now: float, tokens: float, at: float) -> S:
        """Give back ``tokens`` of the grant made (or reserved) for time ``at``.

        Never leaves more budget than the algorithm allows. ``at`` matters to the
        sliding windows, which must take the tokens out where they were counted; a
        caller that does not know it passes ``now``.
        """
        ...

    def tail(self, state: S, tokens: float, at: float) -> bool:
        """Whether the reservation of ``tokens`` at ``at`` is the last one recorded."""
        ...

    def cancel(self, state: S, now: float, tokens: float, at: float) -> S:
        """Roll back the last reservation (``tail`` said so): as if never made."""
        ...

    def latest(self, state: S) -> float:
        """The time of the latest grant recorded: exact for a grant this limit planned
        itself, no later than the truth for one another limit of a group delayed."""
        ...

    def next_free(self, at: float, tokens: float) -> float:
        """Where the rest of a hole stands once ``tokens`` of it are granted at ``at``:
        ``at`` where tokens granted at one moment are interchangeable, later for a
        queue whose grants take time to leave."""
        ...

    def room(self, at: float, tokens: float, t: float) -> float:
        """How many of a hole's ``tokens`` (left for time ``at``) a grant at ``t >= at``
        may take. A limit whose grants fill slots of time (a token bucket) knows where
        those tokens sit and can hand out the part still ahead of ``t``; the others only
        at the hole's own time (:func:`exact_room`)."""
        ...

    def idle_until(self, state: S) -> float:
        """The time from which ``state`` decides exactly as a new state would."""
        ...

    def params(self) -> tuple[float, ...]:
        """The numbers the Lua script takes, in its ARGV order."""
        ...

    def slowed(self, share: float) -> Algorithm[S]:
        """The same limit at ``share`` (0 < share <= 1) of the rate, same largest request."""
        ...

    def split(self, low_share: float) -> tuple[Algorithm[S], Algorithm[S]]:
        """The limit as two lanes, ``(high, low)``, whose grants together never exceed
        it (see ``lanes.py``). The low lane holds ``low_share`` of the rate and of the
        largest request, rounded down to whole tokens (:func:`low_part`); the high lane
        the rest. Raises ``ValueError`` naming ``low_share`` where that leaves a lane no
        whole token, or where two lanes cannot keep the algorithm's promise."""
        ...

    def guarded(self, seconds: float) -> Algorithm[S]:
        """The same promise kept for requests that leave up to ``seconds`` after their
        grant: each grant occupies ``seconds`` more (see ``guard.py``). Raises
        ``ValueError`` naming ``guard`` if that leaves nothing to grant."""
        ...

    def configured(self, rate: float | None, burst: float | None) -> Algorithm[S]:
        """The limit as changed at run time (``ratelimit set``): ``rate`` tokens per
        second and a largest burst of ``burst`` tokens, ``None`` keeping what the code
        says. Whatever the guard kept back is kept back from the new values; a
        window keeps its length (its limit becomes ``rate`` times it) and has no burst
        of its own. The Lua twin is ``<kind>.configured``."""
        ...

    def restrict(self, state: S, now: float, remaining: float, until: float) -> S:
        """At most ``remaining`` more tokens before ``until``, then the configured rate.

        What a provider's response says (``remaining`` left until the reset; or a
        pause, ``remaining=0``, until ``Retry-After``). Only ever lowers the budget: a
        state that is already stricter is kept, so stale or repeated reports are
        harmless and a pause extends only to the later of two deadlines.
        """
        ...

    def step(self, state: S, now: float, tokens: float, max_wait: float) -> tuple[S, float]:
        """Exactly :func:`step` (``plan`` then ``commit``), as a method, for a request
        of ``tokens > 0`` (a 0 is only ever a composite's member, decided through
        ``commit``).

        An algorithm may fuse the two for speed (the in-process hot path calls this);
        the property tests pin every override to :func:`step`.
        """
        ...


def exact_room(at: float, tokens: float, t: float) -> float:
    """:meth:`Algorithm.room` of a limit whose hole is good at its own time only: a
    window counts a grant where it was made, a queue has moved on past it."""
    return tokens if t <= at + EPSILON else 0.0


def low_part(most: float, low_share: float, most_name: str) -> float:
    """The low lane's share of a largest request ``most``: ``low_share`` of it, rounded
    down to whole tokens, so that unit requests waste none of it. Both lanes must keep
    at least one whole token, or one of them could never grant a unit request."""
    low = float(math.floor(most * low_share + EPSILON))
    if low < 1.0 or most - low < 1.0:
        raise ValueError(
            f"low_share={low_share!r} splits {most_name}={most:g} into {low:g} for low priority and "
            f"{most - low:g} for high priority: each must hold at least one whole token (raise {most_name}, "
            f"or pick a share that leaves one to each)"
        )
    return low


def decide(admit_at: float, at: float, now: float, max_wait: float) -> float:
    """The signed wait for a plan: ``>= 0`` granted after it, ``< 0`` refused.

    A refusal's magnitude is the wait the grant would have needed. (``decide`` in
    ``lua/_prelude.lua`` is the same function.)
    """
    if admit_at - now > EPSILON:
        return now - admit_at
    wait = at - now
    if wait <= EPSILON:
        return 0.0
    if wait > max_wait + EPSILON or wait == math.inf:
        return -wait  # (a grant never due is no grant, whatever the caller would wait)
    return wait


def step(alg: Algorithm[S], state: S, now: float, tokens: float, max_wait: float) -> tuple[S, float]:
    """Decide one request and, if granted, record it.

    Returns the new state and a signed wait: ``>= 0`` is a grant after that many
    seconds; ``< 0`` is a refusal, the grant would have needed ``-wait`` seconds (and
    the state is returned unchanged). A signed float rather than a result object
    because this sits on the hot path of every acquire.
    """
    admit_at, at = alg.plan(state, now, tokens)
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return state, wait
    return alg.commit(state, now, tokens, at), wait


def plan_all(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float]
) -> tuple[float, float]:
    """The plan of several limits granted together: the latest of their own times."""
    # Indexing and conditionals rather than zip() and max(): every acquire of a
    # composite or an adaptive limiter runs this, and the builtins cost more than the
    # arithmetic.
    admit_at = at = now
    for i in range(len(algs)):
        admit, grant = algs[i].plan(states[i], now, tokens[i])
        if admit > admit_at:
            admit_at = admit
        if grant > at:
            at = grant
    return admit_at, at


def peek_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float]) -> float:
    """The wait a request of ``tokens`` would be told now, read only (``limiter.peek``).

    The magnitude of :func:`decide` with no limit on the wait: a grant's wait, or a
    refusal's (a full leaky queue) ``retry_after``. Planned on the states alone: a
    place given back by a withdrawn reservation (a hole) is not offered, so after
    withdrawals a request may be told less. (``peek_members`` in
    ``lua/_members.lua`` is the same function.)
    """
    admit_at, at = plan_all(algs, states, now, tokens)
    return abs(decide(admit_at, at, now, math.inf))


def commit_all(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float], at: float
) -> list[Any]:
    """Record one grant at ``at`` in every limit."""
    return [algs[i].commit(states[i], now, tokens[i], at) for i in range(len(algs))]


def step_all(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    now: float,
    tokens: Sequence[float],
    max_wait: float,
) -> tuple[list[Any], float]:
    """:func:`step` for several limits granted all-or-nothing at one common time.

    The grant happens at the latest of the limits' own times; a refusal by any of them
    leaves every state untouched.
    """
    admit_at, at = plan_all(algs, states, now, tokens)
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return list(states), wait
    return commit_all(algs, states, now, tokens, at), wait


def latest_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any]) -> float:
    """The latest grant any of the limits recorded. In a composite a grant's time is set
    by the slowest limit, and a token bucket does not see a grant another limit delayed
    past its own plan; the limit that set it knows it exactly."""
    return max(alg.latest(state) for alg, state in zip(algs, states, strict=True))


def charge_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float]) -> list[Any]:
    """Record ``tokens`` as taken now, in every limit, whatever the budget left.

    A charge never waits and is never refused: the tokens were spent already (a call
    whose cost was known only once it was made). Taking them into debt is what the
    limits are for: later requests are planned behind the charge and wait it off.

    It is recorded at the latest grant any of the limits has recorded, when that is
    still ahead, and otherwise now: reservations already promised keep their times
    (they were told when to go), grants stay in time order in every limit (a window's
    log is only ever appended to), and a limit restricted by feedback counts the charge
    against what it still allows. The stores void the holes (``holes.void``): a
    request taking one would go ahead of the debt. A limit given 0 tokens records
    nothing.
    """
    latest = latest_all(algs, states)
    return commit_all(algs, states, now, tokens, latest if latest > now else now)


def charge(alg: Algorithm[S], state: S, now: float, tokens: float) -> S:
    """:func:`charge_all` for one limit."""
    latest = alg.latest(state)
    return alg.commit(state, now, tokens, latest if latest > now else now)
