"""What every algorithm is: a pure state transition, and the step that drives one.

An algorithm never reads a clock and never does I/O. Given its state, the time and a
request:

``plan(state, now, tokens) -> (admit_at, grant_at)``
    ``admit_at``: the earliest time the request may be accepted (after ``now`` only
    for a leaky bucket whose queue is full); ``grant_at``: when it may proceed if
    accepted now. Reservations are FIFO: a later request never gets an earlier
    ``grant_at`` than one already recorded.

``commit(state, now, tokens, at) -> state``
    record a grant at ``at >= grant_at``. Committing later than planned is always
    safe, which lets a composite grant several limits at the latest of their times.

``charge(alg, state, now, tokens)``
    record tokens taken whatever the budget, behind every reservation.

``tail(state, tokens, at)`` and ``cancel(state, now, tokens, at) -> state``
    withdraw a reservation not yet due: only the last one recorded (``tail``) is
    rolled back; one withdrawn from the middle becomes a hole (``holes.py``).

The Lua scripts under ``lua/`` mirror this arithmetic operation for operation; the
conformance suite pins the two together decision by decision.
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
    "level_all",
    "low_part",
    "peek_all",
    "plan_all",
    "step",
    "step_all",
]

# Sums of emission intervals near 1.7e9 s (Redis TIME) pick up rounding: anything within
# a nanosecond counts as on time. The Lua scripts use the same value.
EPSILON = 1e-9

S = TypeVar("S")


class Algorithm(Protocol[S]):
    """The pure core of one rate-limiting algorithm (see the module docstring)."""

    #: Names the Lua script and the key suffix; stable, part of the Redis key scheme.
    kind: str
    #: The argument that sets :attr:`most`, for error messages.
    most_name: str
    #: Whether each grant fills a slot of time known from the grant (a token bucket), so a
    #: refund can name it and what it gives back stays good past its time (``room``).
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
        """Record ``tokens`` granted at ``at``; ``tokens == 0`` records nothing."""
        ...

    def refund(self, state: S, now: float, tokens: float, at: float) -> S:
        """Give back ``tokens`` of the grant made (or reserved) for time ``at``, never
        leaving more budget than the algorithm allows. The windows take the tokens out
        where ``at`` counted them; a caller that does not know it passes ``now``."""
        ...

    def tail(self, state: S, tokens: float, at: float) -> bool:
        """Whether the reservation of ``tokens`` at ``at`` is the last one recorded."""
        ...

    def cancel(self, state: S, now: float, tokens: float, at: float) -> S:
        """Roll back the last reservation (``tail`` said so): as if never made."""
        ...

    def latest(self, state: S) -> float:
        """The time of the latest grant recorded (no later than the truth for a grant
        another limit of a group delayed)."""
        ...

    def next_free(self, at: float, tokens: float) -> float:
        """Where the rest of a hole stands once ``tokens`` of it are granted at ``at``
        (later than ``at`` for a queue whose grants take time to leave)."""
        ...

    def room(self, at: float, tokens: float, t: float) -> float:
        """How many of a hole's ``tokens`` (left for time ``at``) a grant at ``t >= at``
        may take: a slotted limit the part still ahead of ``t``, the others all of them
        at the hole's own time only (:func:`exact_room`)."""
        ...

    def idle_until(self, state: S) -> float:
        """The time from which ``state`` decides exactly as a new state would."""
        ...

    def params(self) -> tuple[float, ...]:
        """The numbers the Lua script takes, in its ARGV order."""
        ...

    def slowed(self, share: float) -> Algorithm[S]:
        """The limit at ``share`` (0 < share <= 1) of its rate, for a process deciding alone
        (the local fallback)."""
        ...

    def split(self, low_share: float) -> tuple[Algorithm[S], Algorithm[S]]:
        """The limit as two lanes, ``(high, low)``, whose grants together never exceed
        it (``lanes.py``): the low lane holds ``low_share`` of the rate and of the
        largest request in whole tokens (:func:`low_part`), the high lane the rest.
        Raises ``ValueError`` naming ``low_share`` where a lane gets no whole token or
        two lanes cannot keep the algorithm's promise."""
        ...

    def guarded(self, seconds: float) -> Algorithm[S]:
        """The same promise kept for requests that leave up to ``seconds`` after their
        grant: each grant occupies ``seconds`` more (see ``guard.py``). Raises
        ``ValueError`` naming ``guard`` if that leaves nothing to grant."""
        ...

    def configured(self, rate: float | None, burst: float | None) -> Algorithm[S]:
        """The limit as changed at run time (``ratelimit set``): ``rate`` tokens a second,
        a burst of ``burst`` (``None`` keeps the code's), the guard's share kept back; a
        window keeps its length. Twin of ``<kind>.configured`` in Lua."""
        ...

    def restrict(self, state: S, now: float, remaining: float, until: float) -> S:
        """At most ``remaining`` more tokens before ``until``, then the configured rate
        (a provider's remaining budget, or a pause with ``remaining=0``).

        Only ever lowers the budget: a stricter state is kept, so stale or repeated
        reports are harmless and a pause extends only to the later of two deadlines.
        """
        ...

    def step(self, state: S, now: float, tokens: float, max_wait: float) -> tuple[S, float]:
        """Exactly :func:`step` for ``tokens > 0``, plan and commit fused for the in-process
        hot path; the property tests pin every override to :func:`step`."""
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
    """The signed wait for a plan: ``>= 0`` granted after it, ``< 0`` refused with the
    wait the grant would have needed. Twin of ``decide`` in ``lua/_prelude.lua``."""
    if admit_at - now > EPSILON:
        return now - admit_at
    wait = at - now
    if wait <= EPSILON:
        return 0.0
    if wait > max_wait + EPSILON or wait == math.inf:
        return -wait  # a grant never due is no grant, whatever the caller would wait
    return wait


def step(alg: Algorithm[S], state: S, now: float, tokens: float, max_wait: float) -> tuple[S, float]:
    """Decide one request and, if granted, record it: the new state (unchanged on a
    refusal) and the signed wait of :func:`decide`, a float since every acquire runs this."""
    admit_at, at = alg.plan(state, now, tokens)
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return state, wait
    return alg.commit(state, now, tokens, at), wait


def plan_all(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float]
) -> tuple[float, float]:
    """The plan of several limits granted together: the latest of their own times."""
    # Indexing rather than zip() and max(): on every composite acquire, the builtins
    # cost more than the arithmetic.
    admit_at = at = now
    for i in range(len(algs)):
        admit, grant = algs[i].plan(states[i], now, tokens[i])
        if admit > admit_at:
            admit_at = admit
        if grant > at:
            at = grant
    return admit_at, at


def peek_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float]) -> float:
    """The wait a request of ``tokens`` would be told now, read only (``limiter.peek``),
    holes not offered: after withdrawals a request may be told less. Twin of
    ``peek_members`` in ``lua/_members.lua``."""
    admit_at, at = plan_all(algs, states, now, tokens)
    return abs(decide(admit_at, at, now, math.inf))


#: The most whole tokens a level counts: a limit that never limits (an infinite rate)
#: is said to hold this many.
LEVEL_MOST = 1e9


def level_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float) -> tuple[float, float]:
    """What is left of the limits now: ``(left, more_in)``, read only.

    ``left``: the whole tokens that could go at once now, as requests of one token one
    after another (all the limits together: the tightest), a whole number from 0 to
    the largest request. ``more_in``: the seconds until ``left + 1`` could go at once
    (one plan), 0 where the limits could never hold that many at once. Each limit tells
    what a request could take at once (its ``level``, what its ``plan`` grants at
    once; one without it is asked by bisection on its plan); a queue (``bursts =
    False``, a leaky bucket) lets one token go at once at most, the next queues behind
    it. Holes are not offered (they only ever add). Twin of ``level_members`` in
    ``lua/_members.lua``.
    """
    most = left = LEVEL_MOST
    for i in range(len(algs)):
        alg = algs[i]
        top = alg.most if getattr(alg, "bursts", True) else min(alg.most, 1.0)
        if top < most:
            most = top
        measure = getattr(alg, "level", None)
        here = measure(states[i], now) if measure is not None else _bisected(alg, states[i], now, top)
        if here < left:
            left = here
    high = float(math.floor(most + EPSILON))
    if high < 1.0:
        return 0.0, 0.0  # never a whole token: nothing to count
    whole = float(math.floor(left + EPSILON))
    if whole >= high:
        return high, 0.0
    if whole < 0.0:
        whole = 0.0
    admit_at, at = plan_all(algs, states, now, [whole + 1.0] * len(algs))
    more = (admit_at if admit_at > at else at) - now
    return whole, more if more > 0.0 else 0.0


def _bisected(alg: Algorithm[Any], state: Any, now: float, most: float) -> float:
    """The largest whole request ``alg`` grants at once now, by bisection on its plan,
    up to :data:`LEVEL_MOST` (all a level ever counts): below it every whole number is a
    double, so each step halves the range; above it neighbouring doubles are more than
    one apart and the midpoint would round to an end."""
    low, high = 0.0, float(math.floor((most if most < LEVEL_MOST else LEVEL_MOST) + EPSILON))

    def goes(tokens: float) -> bool:
        admit_at, at = alg.plan(state, now, tokens)
        return admit_at - now <= EPSILON and at - now <= EPSILON

    if high < 1.0 or goes(high):
        return high
    while high - low > 1.0:
        mid = float(math.floor((low + high) / 2.0))
        if goes(mid):
            low = mid
        else:
            high = mid
    return low


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
    """:func:`step` for several limits granted all-or-nothing at the latest of their
    own times; a refusal by any of them leaves every state untouched."""
    admit_at, at = plan_all(algs, states, now, tokens)
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return list(states), wait
    return commit_all(algs, states, now, tokens, at), wait


def latest_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any]) -> float:
    """The latest grant any of the limits recorded: the limit that set a composite
    grant's time knows it exactly, the others may not."""
    return max(alg.latest(state) for alg, state in zip(algs, states, strict=True))


def charge_all(algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float]) -> list[Any]:
    """Record ``tokens`` as taken, in every limit, whatever the budget left.

    Never waits, never refused (the tokens were spent already); later requests wait
    off the debt. Recorded at the latest grant if that is ahead, else now, so promised
    reservations keep their times and grants stay in time order. The stores void the
    holes (``holes.void``), which would let a request go ahead of the debt.
    """
    latest = latest_all(algs, states)
    return commit_all(algs, states, now, tokens, latest if latest > now else now)


def charge(alg: Algorithm[S], state: S, now: float, tokens: float) -> S:
    """:func:`charge_all` for one limit."""
    latest = alg.latest(state)
    return alg.commit(state, now, tokens, latest if latest > now else now)
