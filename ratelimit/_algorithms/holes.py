"""Withdrawn reservations: holes in the queue that later requests may fill.

A reservation is a promise of a grant at time ``at``. When its caller gives up before
then (a timeout, a cancelled task, Ctrl-C), the promise is withdrawn:

- If it is the last reservation recorded, the algorithm rolls it back
  (``Algorithm.cancel``), with any holes then at the end of the queue.
- Otherwise the reservations behind it were placed relative to it, and handing its
  budget to "now" could put a new grant too close to them. It becomes a *hole*
  ``[at, tokens]``, still paid for in the state. A later request that fits is granted
  at exactly the hole's time with no more than its tokens: a moment and a weight the
  state already accounts for, so no interval sees more than the algorithm allows.

A past hole is dropped where a later grant is not safe (a window counts a grant where
it was made; a queue has moved on). A request looks at the first ``SCAN`` holes only,
so its cost stays bounded however many callers gave up.

A provider's pause drops the holes before its end; until then a withdrawn place is
lost and a refund frees nothing. A provider's word that one or more remain is kept as
a pace (:func:`pace`) that every grant keeps until its end, a hole's too.

Everything here works on a group of limits granted together (a composite; one limiter
is a group of one); ``tokens`` is one number per limit. Twin of ``lua/_members.lua``.

**Lasting holes.** In a token bucket each grant fills a slot of the TAT's line that
ends no later than its time + ``tau`` (``token_bucket.py``); a hole's tokens are the
end of such a slot, and a grant at ``t`` may take the part still ahead of ``t``
(``Algorithm.room``). A refund that names its grant (:class:`GrantTime`) leaves such a
hole whatever is queued behind, where an unnamed one frees nothing: a grant that
waited its turn ends its slot at its time + ``tau``, one that went at once ends the
line as its commit left it (:func:`at_once`). A composite's request may take a hole
holding tokens for some of its limits only, when the others grant it by themselves
at that time (a refund of an LLM call's tokens, with the request counted as made).

**Moving up.** A request larger than the lasting holes would queue behind every
reservation; instead the queue behind them moves up into them (:func:`_move_up`).
``TokenBucket(10, 1)`` emptied at once by A, B reserved at +1, A's ``settle(10, 1)``:
a request of 10 waits 2 s, not 11. A move shifts slots that names point to, so it is
recorded (:data:`Move`) and each name carries the number of the latest move before
it (``GrantTime.gen``).

Timeline, ``TokenBucket(1, 10)`` (one grant per 100 ms), four requests at t=0 and the
third withdrawn at t=0.05::

    t=0     A wait 0, B wait 0.1, C wait 0.2, D wait 0.3
    t=0.05  C withdrawn: D is behind it, so C's slot at 0.2 becomes a hole
    t=0.06  E takes the hole: wait 0.14 (goes at 0.2), not 0.34
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from .algorithm import EPSILON, Algorithm, commit_all, decide, exact_room, latest_all, level_all, plan_all

__all__ = [
    "DUE",
    "MOVE",
    "SCAN",
    "GrantTime",
    "Hole",
    "Holes",
    "Move",
    "Piece",
    "Planned",
    "at_once",
    "exact",
    "forget",
    "forget_late",
    "gate",
    "give_back",
    "level",
    "pace",
    "pace_charge",
    "pace_wait",
    "pause",
    "plan",
    "reserve",
    "restrict",
    "restricted",
    "settle",
    "void",
]

#: How many holes a request looks at, earliest first, for one it fits in.
SCAN = 16

#: ``[at, tokens, lasting]``: when the withdrawn grant was due, its tokens per limit, and
#: whether they end a slot known to end at ``at`` + tolerance (a named refund's), good
#: past ``at``; a withdrawal's is not (in a composite its slot may sit elsewhere).
Hole = list[Any]


#: ``[gen, j, lo, hi, d, until]``: a queue moved up (:func:`_move_up`). In slotted limit
#: ``j`` every slot that ended in (``lo``, ``hi``] + tolerance for a name of a lower
#: ``gen`` now ends ``d`` seconds sooner. Kept until ``until``, when all it moved is past.
Move = list[Any]

#: The most moves kept at once; with as many, a request larger than the holes queues
#: at the line's end until one of them ends.
MOVES = 16


class Holes:
    """One limiter's (or composite's) holes, earliest first, and the end of the
    latest pause."""

    __slots__ = ("gen", "items", "moves", "paced", "paused_until", "reach", "restricted_until")

    def __init__(self) -> None:
        self.items: list[Hole] = []
        #: The queues moved up, oldest first, and the number of the latest move (a
        #: name carries the number in force when it was given: :class:`GrantTime`).
        self.moves: list[Move] = []
        self.gen = 0
        #: The latest time any grant recorded may be due at, where a move or a grant
        #: from a hole leaves one due after the states' latest; ``-inf`` once past.
        self.reach = -math.inf
        self.paused_until = -math.inf
        #: The end of the latest restriction from the provider: until then a named
        #: refund leaves no hole (the provider's count already holds it).
        self.restricted_until = -math.inf
        #: The provider's pace (:func:`pace`): ``[interval, at, until]``, every grant
        #: before ``until`` at ``at`` or later, each moving ``at`` on by its tokens
        #: times ``interval``; ``None`` when no provider has set one.
        self.paced: list[float] | None = None

    def __repr__(self) -> str:
        return f"Holes({self.items!r}, paused_until={self.paused_until!r})"

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        # A pickle that lacks some of these attributes gets their defaults.
        self.__init__()  # type: ignore[misc]
        for name, value in state[1].items():
            setattr(self, name, value)


def _add(holes: list[Hole], at: float, tokens: Sequence[float], lasting: bool = False) -> None:
    # Two withdrawals for one moment are one hole; a lasting hole is never merged (its
    # room is a place in the slots, not only a moment).
    i = bisect.bisect_left(holes, at - EPSILON, key=lambda hole: hole[0])
    j = i
    while j < len(holes) and holes[j][0] <= at + EPSILON:
        if not lasting and not holes[j][2]:
            holes[j][1] = tuple(h + n for h, n in zip(holes[j][1], tokens, strict=True))
            return
        j += 1
    holes.insert(i, [at, tuple(tokens), lasting])


def _room(alg: Algorithm[Any], hole: Hole, j: int, t: float) -> float:
    """What limit ``j`` may take of ``hole`` at ``t``: past its time only a lasting one."""
    at, have, lasting = hole
    return alg.room(at, have[j], t) if lasting else exact_room(at, have[j], t)


def void(holes: Holes) -> None:
    """A charge was recorded: the holes are void, since a request taking one would go
    ahead of the debt and an interval could hold more than the limit. The pause stays."""
    holes.items.clear()


def forget(holes: Holes) -> None:
    """The limiter's usage is forgotten (``limiter.reset``): its holes, pause,
    restriction, pace and moves with it."""
    holes.items.clear()
    holes.moves.clear()
    holes.reach = -math.inf
    holes.paused_until = -math.inf
    holes.restricted_until = -math.inf
    holes.paced = None


def pause(holes: Holes, until: float) -> None:
    """A provider's pause until ``until``: forget the holes before then (each would be
    an unpromised request going out during it), and take no more until then."""
    items = holes.items
    keep = bisect.bisect_left(items, until, key=lambda hole: hole[0])
    if keep:
        del items[:keep]
    if until > holes.paused_until:
        holes.paused_until = until


#: Where a grant's tokens sit in one slotted limit: ``(limit, at, tokens)``, the
#: tokens at the end of a slot that ends at ``at`` + that limit's tolerance.
Piece = tuple[int, float, float]


class GrantTime(float):
    """A grant's time (a float to any reader) that also says where its tokens sit, so a
    refund passing it back names the grant. ``exact[i]``: in slotted limit ``i`` its
    slot ends at its time + tolerance. ``pieces``: for a grant taken from holes, where
    each piece ends. ``gen``: ``Holes.gen`` when it was given."""

    __slots__ = ("exact", "gen", "pieces")

    exact: tuple[bool, ...]
    pieces: tuple[Piece, ...]
    gen: int

    def __new__(cls, at: float, exact: tuple[bool, ...], pieces: tuple[Piece, ...] = (), gen: int = 0) -> GrantTime:
        self = super().__new__(cls, at)
        self.exact = exact
        self.pieces = pieces
        self.gen = gen
        return self

    def __reduce__(self) -> tuple[type[GrantTime], tuple[float, tuple[bool, ...], tuple[Piece, ...], int]]:
        # The SQLite store pickles holes: a copy keeps what the name says.
        return GrantTime, (float(self), self.exact, self.pieces, self.gen)

    def __repr__(self) -> str:
        if self.pieces:
            return f"GrantTime({float(self)!r}, pieces={self.pieces!r})"
        return f"GrantTime({float(self)!r}, {self.exact!r})"


def _piece_end(alg: Algorithm[Any], at: float, room: float, tokens: float) -> float:
    # Taken from the left of a hole's room, the piece ends (room - tokens) / rate before
    # the hole's slot does; named by that end less the tolerance.
    return at - (room - tokens) / alg.sustained_rate


def exact(algs: Sequence[Algorithm[Any]], states: Sequence[Any], at: float, gen: int = 0) -> GrantTime | float:
    """The name of a grant just recorded at ``at``: a :class:`GrantTime` where it is some
    slotted limit's latest grant (its slot ends at ``at`` + tolerance), else the time."""
    flags = tuple(
        alg.slotted and abs(alg.latest(state) - at) <= EPSILON for alg, state in zip(algs, states, strict=True)
    )
    return GrantTime(at, flags, (), gen) if True in flags else at


def at_once(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], tokens: Sequence[float], at: float, gen: int = 0
) -> GrantTime | float:
    """The name of a grant just recorded at once at ``at``: its tokens end each slotted
    limit's line, so one piece per such limit at its latest; the time where none took
    any."""
    pieces = tuple(
        (j, float(alg.latest(state)), float(n))
        for j, (alg, state, n) in enumerate(zip(algs, states, tokens, strict=True))
        if alg.slotted and n > 0
    )
    return GrantTime(at, (), pieces, gen) if pieces else at


def _drop_spent(algs: Sequence[Algorithm[Any]], holes: list[Hole], now: float) -> None:
    # Sorted by time: only past holes can be spent, and a lasting one may still hold room.
    cut = now - EPSILON
    i = 0
    while i < len(holes) and holes[i][0] < cut:
        hole = holes[i]
        if (
            hole[2]
            and len(hole[1]) == len(algs)
            and any(_room(alg, hole, j, now) > EPSILON for j, alg in enumerate(algs))
        ):
            i += 1
        else:
            del holes[i]


def _when(
    algs: Sequence[Algorithm[Any]],
    plans: Sequence[tuple[float, float]],
    hole: Hole,
    now: float,
    tokens: Sequence[float],
) -> float | None:
    """When a request could take ``hole`` (its time, or now if past), or ``None``. Each
    limit finds its tokens in the hole's room then or grants them by itself by then;
    at least one must find them in the hole."""
    at, have, _ = hole
    if len(have) != len(tokens):
        return None  # a hole of another shape belongs to another composite of this name
    t = at if at > now else now
    taken = False
    for j, (alg, (admit, grant), n) in enumerate(zip(algs, plans, tokens, strict=True)):
        if n <= _room(alg, hole, j, t) + EPSILON:
            taken = taken or n > 0
        elif admit - now > EPSILON or grant > t + EPSILON:
            return None
    return t if taken else None


def _take(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: list[Hole],
    i: int,
    now: float,
    tokens: Sequence[float],
    t: float,
) -> tuple[list[Any], list[Piece]]:
    """Grant ``tokens`` at ``t`` from hole ``i`` where it holds them, from the states
    otherwise; keep the hole's rest where it fits. Returns the states and the pieces."""
    hole = holes.pop(i)
    at, lasting = hole[0], hole[2]
    out = list(states)
    rest: list[float] = []
    pieces: list[Piece] = []
    # In a queue the rest starts when this grant has left; where the limits of a
    # composite disagree on that, the rest is given up rather than misplaced.
    where = set()
    for j, (alg, n) in enumerate(zip(algs, tokens, strict=True)):
        room = _room(alg, hole, j, t)
        if n <= room + EPSILON:
            left = room - n if room > n else 0.0
            if left > EPSILON:
                where.add(alg.next_free(at, n))
            if lasting and alg.slotted and n > 0:
                pieces.append((j, _piece_end(alg, at, room, n), n))
        else:
            out[j] = alg.commit(out[j], now, n, t)
            left = room
            if left > EPSILON:
                where.add(at)
        rest.append(left)
    if len(where) == 1:
        _add(holes, where.pop(), rest, lasting)
    return out, pieces


#: A plan with holes: ``(admit_at, at, hole)``, ``hole`` the index of the hole taken,
#: ``None`` (the algorithms' own plan), :data:`DUE` or :data:`MOVE`.
Planned = tuple[float, float, "int | None"]

#: Taking from all the holes already due, now (``_pooled``).
DUE = -1

#: Going at the line's end once the queue has moved up into the lasting holes.
MOVE = -2


def _due(items: list[Hole], now: float, width: int) -> list[Hole]:
    # The first SCAN holes whose time has come, of this group's shape.
    out = []
    for hole in items[:SCAN]:
        if hole[0] > now + EPSILON:
            break
        if len(hole[1]) == width:
            out.append(hole)
    return out


def _pooled(
    algs: Sequence[Algorithm[Any]],
    plans: Sequence[tuple[float, float]],
    items: list[Hole],
    now: float,
    tokens: Sequence[float],
) -> bool:
    """Whether a request can go now on the room of the holes already due, added up.

    A slotted limit may gather its tokens from several holes (their room is the unused
    end of slots, which need not touch), so refunds smaller than a request are used
    too. Any other limit grants its tokens by itself now or not at all.
    """
    due = _due(items, now, len(algs))
    if not due:
        return False
    taken = False
    for j, (alg, (admit, grant), n) in enumerate(zip(algs, plans, tokens, strict=True)):
        if not n > 0:
            continue
        if _from_due(alg, j, n, due, now):
            taken = True
        elif admit - now > EPSILON or grant > now + EPSILON:
            return False
    return taken


def _from_due(alg: Algorithm[Any], j: int, tokens: float, due: list[Hole], now: float) -> bool:
    """Whether limit ``j`` takes its ``tokens`` from the due holes' room, added up."""
    return alg.slotted and tokens <= sum(_room(alg, hole, j, now) for hole in due) + EPSILON


def _take_pooled(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], items: list[Hole], now: float, tokens: Sequence[float]
) -> tuple[list[Any], list[Piece]]:
    """Grant ``tokens`` now as :func:`_pooled` found they may go, earliest holes first
    (their room runs out first). Returns the states and a piece per hole taken from."""
    due = _due(items, now, len(algs))
    need = [0.0] * len(algs)
    out = list(states)
    pieces: list[Piece] = []
    for j, (alg, n) in enumerate(zip(algs, tokens, strict=True)):
        if not n > 0:
            continue
        if _from_due(alg, j, n, due, now):
            need[j] = n
        else:
            out[j] = alg.commit(out[j], now, n, now)
    for hole in due:
        at, lasting = hole[0], hole[2]
        rest = []
        for j, alg in enumerate(algs):
            room = _room(alg, hole, j, now)
            take = need[j] if need[j] < room else room
            need[j] -= take
            if take > EPSILON and lasting:
                pieces.append((j, _piece_end(alg, at, room, take), take))
            rest.append(room - take if room - take > EPSILON else 0.0)
        hole[1] = tuple(rest)
    items[:] = [hole for hole in items if any(n > EPSILON for n in hole[1])]
    return out, pieces


def plan(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, now: float, tokens: Sequence[float]
) -> Planned:
    """``plan_all`` that first offers the request the earliest hole it can take.

    A hole wins when it comes before the algorithms' own plan, or when they would not
    admit the request now (a full leaky queue). Drops spent and void holes.
    """
    if holes.moves or holes.reach > -math.inf:
        _forget_moves(holes, now)
    paced = holes.paced
    if paced is not None:
        if paced[2] <= now:
            holes.paced = None  # over: nothing before its end is left to grant
        elif paced[1] > now + EPSILON:
            # The provider's next slot is ahead: no grant before it, a hole's neither.
            admit_at, at = plan_all(algs, states, now, tokens)
            gate = paced[1] if paced[1] < paced[2] else paced[2]
            return admit_at, gate if gate > at else at, None
    items = holes.items
    kept = items or holes.paused_until > -math.inf
    if kept and any(alg.slotted and alg.latest(state) == -math.inf for alg, state in zip(algs, states, strict=True)):
        # A slotted limit's state is gone (an evicted key): its holes and pause with it.
        items.clear()
        holes.paused_until = -math.inf
    _drop_spent(algs, items, now)
    plans = [alg.plan(state, now, n) for alg, state, n in zip(algs, states, tokens, strict=True)]
    admit_at = at = now
    for admit, grant in plans:
        if admit > admit_at:
            admit_at = admit
        if grant > at:
            at = grant
    if admit_at == math.inf and any(n > alg.most + EPSILON for alg, n in zip(algs, tokens, strict=True)):
        # Larger than a limit changed at run time can hold: refused before any hole is
        # offered, as Lua's `too_big` does. A spent allowance also plans at infinity,
        # but a hole may hold its tokens (a withdrawn grant had them): hence the size test.
        return admit_at, at, None
    if items and items[0][0] <= now + EPSILON and _pooled(algs, plans, items, now, tokens):
        if any(hole[0] > _reach(algs, states, holes) + EPSILON for hole in _due(items, now, len(algs))):
            items.clear()  # the state was lost, and the holes with it (see below)
            holes.paused_until = -math.inf
        elif admit_at - now > EPSILON or at > now + EPSILON:
            return now, now, DUE
    found = when = None
    for i in range(min(len(items), SCAN)):
        when = _when(algs, plans, items[i], now, tokens)
        if when is not None:
            found = i
            break
    if found is not None and items[found][0] > _reach(algs, states, holes) + EPSILON:
        # Every hole lies before a grant still reserved; one after the reach means the
        # state was lost (an evicted key): its holes and pause are void.
        items.clear()
        holes.paused_until = -math.inf
        found = None
    if found is not None and when is not None and (admit_at - now > EPSILON or when < at):
        return now, when, found
    if at > now + EPSILON and items:
        # Larger than the holes: the queue moved up into them may let it go sooner.
        moving = _moving(algs, states, holes, now)
        if moving is not None:
            j, _, moved = moving
            trial = list(states)
            trial[j] = moved
            admit_moved, at_moved = plan_all(algs, trial, now, tokens)
            if at_moved < at - EPSILON and admit_moved <= admit_at + EPSILON:
                return admit_moved, at_moved, MOVE
    return admit_at, at, None


def settle(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    planned: Planned,
    max_wait: float,
    named: bool = False,
) -> tuple[list[Any], float, float]:
    """Decide the request :func:`plan` planned and, if granted, record it. Returns the
    states, the signed wait and the grant's name for a refund. ``named``: a grant at
    once is named too (:func:`at_once`, for a limiter that gives back)."""
    admit_at, at, found = planned
    wait = decide(admit_at, at, now, max_wait)
    if wait < 0:
        return list(states), wait, now + wait
    paced = holes.paced
    if paced is not None and now + wait < paced[2]:
        # A pace is kept on one limiter's holes only: its tokens are the first.
        t = now + wait
        paced[1] = (paced[1] if paced[1] > t else t) + tokens[0] * paced[0]
    if found == MOVE:
        states = _move_up(algs, states, holes, now)
        found = None
    gen = holes.gen
    if found is None:
        states = commit_all(algs, states, now, tokens, at)
        if wait > EPSILON:
            return states, wait, exact(algs, states, now + wait, gen)
        return states, wait, at_once(algs, states, tokens, now + wait, gen) if named else now + wait
    if found == DUE:
        states, pieces = _take_pooled(algs, states, holes.items, now, tokens)
    else:
        states, pieces = _take(algs, states, holes.items, found, now, tokens, at)
    # A grant from a hole stays due at its time even if the line behind it is rolled back.
    if now + wait > holes.reach:
        holes.reach = now + wait
    return states, wait, GrantTime(now + wait, (), tuple(pieces), gen) if pieces else now + wait


def reserve(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    max_wait: float,
    named: bool = False,
) -> tuple[list[Any], float, float]:
    """``step_all`` that first offers the request the holes it can take: :func:`plan`
    then :func:`settle` (and so the grant's name too)."""
    return settle(algs, states, holes, now, tokens, plan(algs, states, holes, now, tokens), max_wait, named)


def _reach(algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes) -> float:
    """The latest time a grant recorded may be due at: the states' latest, or
    ``holes.reach`` where that is later."""
    latest = latest_all(algs, states)
    return holes.reach if holes.reach > latest else latest


def _reserved_after(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, now: float, when: float
) -> bool:
    # While a grant is still ahead, tokens given back to now could put a grant beside it.
    latest = _reach(algs, states, holes)
    return latest > now and when < latest - EPSILON


def _tail(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, tokens: Sequence[float], at: float
) -> bool:
    # Last only if due no sooner than every grant, those a move left due after the latest too.
    if at < holes.reach - EPSILON:
        return False
    return all(alg.tail(state, n, at) for alg, state, n in zip(algs, states, tokens, strict=True))


def _cancel(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], now: float, tokens: Sequence[float], at: float
) -> list[Any]:
    return [alg.cancel(state, now, n, at) for alg, state, n in zip(algs, states, tokens, strict=True)]


def restricted(holes: Holes, now: float, until: float) -> None:
    """A provider said how much is left until ``until``: past holes are dropped, and
    until then a named refund leaves none (the provider's ``remaining`` holds it)."""
    forget_late(holes, now)
    if until > holes.restricted_until:
        holes.restricted_until = until


def restrict(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    remaining: Sequence[float],
    until: float,
) -> list[Any]:
    """A provider's word: at most ``remaining`` more (per limit) before ``until``.

    One or more in every limit becomes a pace (:func:`pace`, in the first limit's
    tokens), the states unchanged; less restricts the states (``Algorithm.restrict``),
    and nothing at all is a pause too. Returns the states. Twin of ``restrict`` in
    ``lua/_single.lua``, ``_group.lua`` and ``_lanes.lua``.
    """
    restricted(holes, now, until)
    if all(n >= 1.0 for n in remaining):
        pace(holes, now, remaining[0], until)
        return list(states)
    if all(alg.sustained_rate == 0.0 for alg in algs):
        # Allowances only (no refill), whose states hold no time: a pause kept as a gate.
        gate(holes, now, until)
        return list(states)
    if all(n <= EPSILON for n in remaining):
        pause(holes, until)
    return [alg.restrict(state, now, n, until) for alg, state, n in zip(algs, states, remaining, strict=True)]


def pace(holes: Holes, now: float, remaining: float, until: float) -> None:
    """A provider's word that at most ``remaining`` (one or more) go before ``until``,
    kept as a pace every grant keeps: one token every ``(until - now) / remaining``
    seconds, the first one interval from now (requests sent and not yet counted take
    from what remains). A pace in force keeps its next slot and takes the new interval
    and end, so a response's round trip is not lost at every one."""
    interval = (until - now) / remaining
    old = holes.paced
    at = old[1] if old is not None and old[2] > now else now + interval
    holes.paced = [interval, at, until]


def gate(holes: Holes, now: float, until: float) -> None:
    """A provider's pause until ``until`` for limits whose states cannot hold one (an
    allowance), kept as a pace whose next slot is its end: no grant before it, and a
    refund meanwhile still counts (an allowance's lost tokens never come back). A pace
    in force keeps its interval and goes on from the later of its slot and the end."""
    old = holes.paced
    if old is not None and old[2] > now:
        old[1] = old[1] if old[1] > until else until
        old[2] = old[2] if old[2] > until else until
    else:
        holes.paced = [0.0, until, until]


def pace_charge(holes: Holes, now: float, tokens: float) -> None:
    """A charge (``algorithm.charge``) takes its place in a provider's pace too."""
    paced = holes.paced
    if paced is not None and paced[2] > now:
        paced[1] = (paced[1] if paced[1] > now else now) + tokens * paced[0]


def pace_wait(holes: Holes, now: float) -> float:
    """The wait a provider's pace alone puts on a request now (``limiter.peek``): until
    its next slot or its end, 0 where none holds. Twin of ``lua/_members.lua``'s."""
    paced = holes.paced
    if paced is None or paced[2] <= now or not paced[1] > now + EPSILON:
        return 0.0
    wait = (paced[1] if paced[1] < paced[2] else paced[2]) - now
    return wait if wait > EPSILON else 0.0


def level(algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, now: float) -> tuple[float, float]:
    """:func:`~.algorithm.level_all` of the limits with what is kept beside them: a
    provider's pace in force spreads what remains over its time, so none is claimed
    to go at once, and one more comes at the later of the limits' time and the
    pace's. Twin of ``level_members`` in ``lua/_members.lua``."""
    left, more = level_all(algs, states, now)
    paced = holes.paced
    if paced is None or paced[2] <= now:
        return left, more
    wait = pace_wait(holes, now)
    if left >= 1.0:
        more = 0.0
    return 0.0, wait if wait > more else more


def forget_late(holes: Holes, now: float) -> None:
    """Drop the holes whose time has passed: once a refund has lowered the state its
    own plan may hand the same time out again, and a provider's word counts no hole."""
    items = holes.items
    cut = now - EPSILON
    stale = 0
    while stale < len(items) and items[stale][0] < cut:
        stale += 1
    if stale:
        del items[:stale]


def give_back(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    at: float | None,
) -> list[Any]:
    """Give back a grant: a refund once its time has come (``at`` past or ``None``),
    otherwise the withdrawal of a reservation."""
    _forget_moves(holes, now)
    if at is None or at <= now + EPSILON:
        return _refund(algs, states, holes, now, tokens, at)
    if at < holes.paused_until:
        return list(states)  # its place is inside a pause: lost
    items = holes.items
    if not _tail(algs, states, holes, tokens, at):
        _add(items, at, tokens)
        return list(states)
    states = _cancel(algs, states, now, tokens, at)
    while items:
        hole_at, left, _ = items[-1]
        if hole_at < now - EPSILON:
            items.clear()  # sorted: every hole is past
            break
        if not _tail(algs, states, holes, left, hole_at):
            break
        items.pop()
        states = _cancel(algs, states, now, left, hole_at)
    if holes.paused_until > now:
        # A state the withdrawn grants made stricter than the pause was left alone by
        # restrict (it only lowers); rolled back, it must be restricted again.
        states = [alg.restrict(state, now, 0.0, holes.paused_until) for alg, state in zip(algs, states, strict=True)]
    return states


def _refund(
    algs: Sequence[Algorithm[Any]],
    states: Sequence[Any],
    holes: Holes,
    now: float,
    tokens: Sequence[float],
    at: float | None,
) -> list[Any]:
    """Give back tokens of a grant whose time has come.

    Unnamed, a limit takes them back only where nothing is reserved after the grant.
    Named (a :class:`GrantTime`), a slotted limit rolls back pieces at the end of its
    line and leaves a lasting hole for the rest, whatever is queued behind.
    """
    when = now if at is None else at
    if now < holes.paused_until:
        return list(states)
    named = _named(at, len(algs), holes) if now >= holes.restricted_until else [[] for _ in algs]
    queued = (len(algs) > 1 or holes.reach > now) and _reserved_after(algs, states, holes, now, when)
    out = list(states)
    freed: dict[float, list[float]] = {}
    lowered = False
    for j, (alg, state, n) in enumerate(zip(algs, states, tokens, strict=True)):
        if not n > 0:
            continue
        if named[j]:
            left = n
            # The latest pieces first: most of them is still ahead.
            for piece_at, held in sorted(named[j], reverse=True):
                give = left if left < held else held
                left -= give
                if give <= EPSILON:
                    continue
                if alg.tail(out[j], give, piece_at):
                    out[j] = alg.cancel(out[j], now, give, piece_at)
                else:
                    freed.setdefault(piece_at, [0.0] * len(algs))[j] += give
            continue
        if queued:
            continue
        out[j] = alg.refund(state, now, n, when)
        lowered = lowered or (alg.slotted and out[j] != state)
    if lowered:
        forget_late(holes, now)
    for piece_at in sorted(freed):
        _put(algs, holes.items, now, piece_at, freed[piece_at])
    return out


def _put(algs: Sequence[Algorithm[Any]], items: list[Hole], now: float, at: float, hole: list[float]) -> None:
    """Leave the freed end of a slot ending at ``at`` + tolerance as a lasting hole, if
    some of it is still ahead."""
    if not any(n > 0 and alg.room(at, n, now) > EPSILON for alg, n in zip(algs, hole, strict=True)):
        return
    i = bisect.bisect_left(items, at - EPSILON, key=lambda item: item[0])
    # One hole a moment, so a grant named twice frees its slot once.
    if i == len(items) or items[i][0] > at + EPSILON:
        items.insert(i, [float(at), tuple(hole), True])


def _moving(
    algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, now: float
) -> tuple[int, list[tuple[Hole, float]], Any] | None:
    """How the queue would move up into the lasting holes (:func:`_move_up`): the one
    slotted limit they all hold tokens of, each hole moved into (latest first) with
    the tokens taken, and that limit's state then; ``None`` where nothing moves."""
    width = len(algs)
    lasting = [hole for hole in holes.items if hole[2] and len(hole[1]) == width]
    j = None
    for hole in lasting:
        for k, n in enumerate(hole[1]):
            if n > 0:
                if j is None:
                    j = k
                elif k != j:
                    return None  # holes of several limits: none moves for one alone
    if j is None or not algs[j].slotted:
        return None
    alg = algs[j]
    state = states[j]
    # Each slot behind a hole may begin up to (hole's end - reach) sooner (_move_up).
    reach = _reach(algs, states, holes)
    paced = holes.paced
    if paced is not None and paced[2] > reach:
        reach = paced[2]  # a grant the provider's pace held back may be due as late
    if now > reach:
        reach = now
    steps: list[tuple[Hole, float]] = []
    count = len(holes.moves)
    for hole in sorted(lasting, key=lambda hole: hole[0], reverse=True):
        at = hole[0]
        if count >= MOVES:
            break
        if alg.latest(state) <= at + EPSILON:
            continue
        room = alg.room(at, hole[1][j], now)
        slack = alg.room(at, math.inf, reach)
        give = room if room < slack else slack
        if give <= EPSILON:
            continue
        state = alg.cancel(state, now, give, alg.latest(state))
        steps.append((hole, give))
        count += 1
    return (j, steps, state) if steps else None


def _move_up(algs: Sequence[Algorithm[Any]], states: Sequence[Any], holes: Holes, now: float) -> list[Any]:
    """Move the queue up into the lasting holes, as :func:`_moving` says.

    A lasting hole is the unused end of a slot, with later grants' slots behind it up
    to the line's end. Each of those begins after the hole ends and every grant is due
    by the reach, so each may begin up to (hole's end - reach) sooner and still lie
    within its time and its time + tolerance: the bound holds. The line moves up by
    that much, or by what of the hole is still ahead if less; the lasting holes behind
    move with it, and the hole's rest stays one where it now ends.

    Each move is recorded (:data:`Move`) for the names given before it (:func:`_named`).
    """
    moving = _moving(algs, states, holes, now)
    out = list(states)
    if moving is None:
        return out
    j, steps, _ = moving
    alg = algs[j]
    reach = _reach(algs, states, holes)
    paced = holes.paced
    if paced is not None and paced[2] > reach:
        reach = paced[2]
    if now > reach:
        reach = now
    items = holes.items
    for hole, give in steps:
        at = hole[0]
        state = out[j]
        hi = alg.latest(state)
        room = alg.room(at, hole[1][j], now)
        out[j] = alg.cancel(state, now, give, hi)
        d = hi - alg.latest(out[j])
        items.remove(hole)
        for other in items:
            if other[2] and other[0] > at + EPSILON:
                other[0] -= d
        items.sort(key=lambda item: item[0])
        left = [0.0] * len(algs)
        left[j] = room - give
        _put(algs, items, now, at - d, left)
        until = alg.idle_until(state)
        gen = holes.gen + 1
        stamp = math.floor(now * 1e6)
        holes.gen = gen = stamp if stamp > gen else gen
        holes.moves.append([gen, j, at, hi, d, until if until > reach else reach])
        if reach > holes.reach:
            holes.reach = reach
    return out


def _forget_moves(holes: Holes, now: float) -> None:
    """Drop the moves whose grants are all behind (see :data:`Move`), and the reach
    once it is past."""
    moves = holes.moves
    if moves and any(move[5] <= now for move in moves):
        moves[:] = [move for move in moves if move[5] > now]
    if holes.reach <= now:
        holes.reach = -math.inf


def _moved(holes: Holes, j: int, at: float, gen: int) -> float:
    """Where a slot of limit ``j``, named ``at`` before move ``gen`` + 1, ends now after
    each later move that took it along."""
    for move_gen, k, lo, hi, d, _ in holes.moves:
        if move_gen > gen and k == j and lo + EPSILON < at <= hi + EPSILON:
            at -= d
    return at


def _named(at: float | None, width: int, holes: Holes) -> list[list[tuple[float, float]]]:
    """Where a named grant's tokens sit, limit by limit: ``(at, tokens)`` pieces as the
    moves since left them; empty where the grant is not named in that limit."""
    out: list[list[tuple[float, float]]] = [[] for _ in range(width)]
    if not isinstance(at, GrantTime):
        return out
    gen = at.gen
    for j, piece_at, held in at.pieces:
        if j < width:
            out[j].append((_moved(holes, j, piece_at, gen), held))
    for j, flag in enumerate(at.exact[:width]):
        if flag:
            out[j].append((_moved(holes, j, float(at), gen), math.inf))  # as much as the grant took
    return out
