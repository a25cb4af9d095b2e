"""Fair shares: many tenants on one budget, its grants split by weight while it is saturated.

Our limiters reserve: a request is told its exact wait at once, in arrival order, and a
promised time is never moved. A tenant that floods the budget would therefore reserve
far ahead, and every other tenant would queue behind its flood. Fair shares keep the
budget's own line (the limiter's algorithm, its bound untouched: every grant is one of
its grants) and put an *admission pace* per tenant in front of it:

- A tenant is **active** while its *finish*, the end of its pace line, is ahead of now.
  ``W`` is the sum of the active tenants' weights (the asking tenant's own included).
- A tenant is **admitted** when its finish (or the ticket its request presents, below)
  is at most ``lead`` seconds ahead of now.
  Admitted, it takes its place in the budget's line as any request does (its wait is
  the line's, the budget's bound kept), and its finish moves on by
  ``tokens / (R * w / W)``: its share of the budget's sustained rate ``R``.
- A tenant asking earlier is **deferred**: it is given a *ticket*, the next slot of its
  pace line (its finish moves on as if admitted), and asks again at the ticket less
  ``lead``, presenting it; a ticket whose time has come is admitted without moving the
  finish again. Nothing is recorded in the budget's line for a deferred request.

While every tenant has requests waiting, tenant ``t`` is admitted at ``R * w_t / W`` and
the admissions add up to ``R``: the grants split by weight, and the budget's line stays
short (about ``lead`` seconds of it, plus one request per active tenant). A newcomer is
admitted at once and waits only that short line, never behind another tenant's flood:
the flood waits *its* turn in its own pace line. An idle tenant's finish passes within
one of its requests' pace, it leaves ``W``, and its share goes to the others at once; a
lone tenant is paced at ``R`` itself. Within one tenant, tickets keep arrival order.

A pace line keeps only its end, not its requests, so the state is one entry per active
tenant, aged out by the time of its finish (``FairState.expiry``); past ``most_tenants``
entries, a tenant seen for the first time is paced as :data:`OVERFLOW`, one entry that
every such tenant shares. A budget refilled at no rate (or an infinite one) has no rate
to share: every tenant is admitted at once.

A grant also *books* the slot after it in the tenant's pace line, a ticket for the next
request of the same process, which presents it when its time comes and is admitted
without moving the finish again. A process asks for one tenant at a time
(``_limiting/fair.py`` keeps a gate per tenant that opens at the booked slot), so a
tenant's flood in one process costs one store call per grant; several processes of one
tenant each hold a booked slot of their own and take turns, one call per grant too
(but the first of each, which may be deferred: two calls). A slot booked for a request
that never comes keeps the tenant in ``W`` one slot longer.

Why this shape. Lanes (``lanes.py``) split a limit into fixed shares, each with its
own line; for N tenants whose set changes at every moment, fixed shares either strand
an idle tenant's share or, resized, overlap promises made at the old size. A calendar
of future slots (weighted fair queueing with promised times) would place a newcomer
between promises already made, but costs a state as long as the queue. Pacing only the
*admission* keeps every promise in the one line (so its bound is the limit's), keeps
that line short (so a newcomer waits little), and needs one number per active tenant.
What it gives up: a tenant's request is told its wait when its turn comes, not when it
arrives (the gate or a ticket holds it until then), and a lone tenant's grants follow
the sustained rate without the limit's burst beyond ``lead``.

Twin of ``lua/_fair.lua``: the expiry is a sorted set there, by finish and then by name
(what this heap pops first).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from .algorithm import EPSILON, Algorithm, decide

__all__ = ["MOST_TENANTS", "OVERFLOW", "Answer", "Fair", "FairState", "peek", "reserve"]

#: How many tenants one budget keeps a pace line for at once, by default.
MOST_TENANTS = 10_000

#: The tenant that every tenant seen past ``most_tenants`` is paced as (no key is empty).
OVERFLOW = ""


class Answer(NamedTuple):
    """One decision of :func:`reserve`."""

    #: Granted: ``>= 0``, go after that many seconds; refused: ``< 0``, ``-wait``
    #: needed; deferred: ask again after that many seconds.
    wait: float
    #: Whether the request was deferred (nothing recorded in the budget's line).
    deferred: bool
    #: The ticket the asking process's next request presents (the store's time):
    #: deferred, this request's own; granted, the slot booked for the next one.
    ticket: float
    #: Granted: seconds from now until the booked slot admits the next request.
    next_in: float


@dataclass(frozen=True, slots=True)
class Fair:
    """A budget shared fairly: its algorithm (the ``line``), how far ahead of now a
    tenant's pace may run and still be admitted (``lead``, seconds), and how many
    tenants are paced on their own."""

    line: Algorithm[Any]
    lead: float
    most_tenants: int = MOST_TENANTS

    @property
    def kind(self) -> str:
        """Names the state in an in-process store: never the plain algorithm's."""
        return f"{self.line.kind}:fair"

    @property
    def rate(self) -> float:
        return self.line.sustained_rate

    def new_state(self) -> FairState:
        return FairState(self.line.new_state())

    def idle_until(self, state: FairState) -> float:
        line = self.line.idle_until(state.line)
        paced = max((entry[0] for entry in state.tenants.values()), default=-math.inf)
        return line if line > paced else paced


class FairState:
    """The budget's line, and each active tenant's ``[finish, weight]``.

    ``total`` is the sum of the kept tenants' weights; ``expiry`` holds
    ``(finish, tenant)`` for every finish recorded, the current one of each tenant
    among them (an older one is skipped when it comes up).
    """

    __slots__ = ("expiry", "line", "tenants", "total")

    def __init__(self, line: Any) -> None:
        self.line = line
        self.tenants: dict[str, list[float]] = {}
        self.total = 0.0
        self.expiry: list[tuple[float, str]] = []

    def __repr__(self) -> str:
        return f"FairState(line={self.line!r}, tenants={len(self.tenants)}, total={self.total!r})"


def _expire(state: FairState, now: float) -> None:
    """Forget the tenants whose pace line ended by ``now``, the earliest first."""
    expiry, tenants = state.expiry, state.tenants
    while expiry and expiry[0][0] <= now:
        finish, tenant = heapq.heappop(expiry)
        entry = tenants.get(tenant)
        if entry is not None and entry[0] == finish:
            del tenants[tenant]
            state.total -= entry[1]
    if not tenants:
        state.total = 0.0
        expiry.clear()
    elif len(expiry) > 2 * len(tenants) + 64:
        # Finishes a tenant has moved past pile up while it is busy: drop them.
        state.expiry = [(entry[0], name) for name, entry in tenants.items()]
        heapq.heapify(state.expiry)


def _paced(fair: Fair, state: FairState, tenant: str) -> str:
    """The tenant as paced: itself, or :data:`OVERFLOW` when no room is left for it."""
    if tenant in state.tenants or len(state.tenants) < fair.most_tenants:
        return tenant
    return OVERFLOW


def _finish(fair: Fair, state: FairState, now: float, tenant: str, weight: float, tokens: float) -> float:
    """Where the tenant's pace line ends once ``tokens`` more are paced on it now."""
    entry = state.tenants.get(tenant)
    start, others = (now, state.total) if entry is None else (entry[0], state.total - entry[1])
    if start < now:
        start = now
    rate = fair.rate * weight / (others + weight)
    finish = start + tokens / rate if 0.0 < rate < math.inf else start
    if finish <= now:
        return finish  # nothing paced: nothing to keep
    if entry is None:
        state.tenants[tenant] = [finish, weight]
        state.total += weight
    else:
        state.total += weight - entry[1]
        entry[0] = finish
        entry[1] = weight
    heapq.heappush(state.expiry, (finish, tenant))
    return finish


def reserve(
    fair: Fair,
    state: FairState,
    now: float,
    tenant: str,
    weight: float,
    tokens: float,
    max_wait: float,
    ticket: float | None = None,
) -> Answer:
    """Decide a tenant's request of ``tokens`` (its ``weight`` as its process knows it):
    granted in the budget's line, refused, or deferred with a ticket (see the module
    docstring). ``ticket``: the one a deferral, or the process's previous grant, gave
    this request."""
    _expire(state, now)
    lead = fair.lead
    tenant = _paced(fair, state, tenant)
    if ticket is None:
        entry = state.tenants.get(tenant)
        slot = -math.inf if entry is None else entry[0]
    else:
        slot = ticket
    due = slot - lead
    if due - now > EPSILON:
        if due - now > max_wait + EPSILON:
            return Answer(now - due, False, 0.0, 0.0)
        if ticket is None:
            # The request's slot in its pace line starts where the finish stands.
            _finish(fair, state, now, tenant, weight, tokens)
        return Answer(due - now, True, slot, 0.0)
    line = fair.line
    admit_at, at = line.plan(state.line, now, tokens)
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return Answer(wait, False, 0.0, 0.0)
    state.line = line.commit(state.line, now, tokens, at)
    if ticket is None:
        _finish(fair, state, now, tenant, weight, tokens)
    # The slot of the asking process's next request, booked now (see the module
    # docstring): where the finish stands.
    entry = state.tenants.get(tenant)
    booked = now if entry is None else entry[0]
    _finish(fair, state, now, tenant, weight, tokens)
    following = booked - lead - now
    return Answer(wait, False, booked, following if following > 0.0 else 0.0)


def peek(fair: Fair, state: FairState, now: float, tenant: str, tokens: float, ticket: float | None = None) -> float:
    """The wait a request of the tenant's would be told now, read only: its deferral
    (to its ``ticket``, or else to the tenant's finish), or else the budget line's wait."""
    if ticket is None:
        entry = state.tenants.get(_paced(fair, state, tenant))
        slot = -math.inf if entry is None or entry[0] <= now else entry[0]
    else:
        slot = ticket
    due = slot - fair.lead
    if due - now > EPSILON:
        return due - now
    admit_at, at = fair.line.plan(state.line, now, tokens)
    return abs(decide(admit_at, at, now, math.inf))
