"""Limits changed at run time in a :class:`~.sqlite.SQLiteBackend` file (internal).

``SQLiteBackend.set_limit`` (and ``ratelimit set --store sqlite:///PATH``) writes a row
of ``ratelimit_config`` for the limiter's name: the new ``rate`` and/or ``burst``, the
store time it ``until`` (``NULL``: until reset) and the time it was made (``at``). A
reset leaves the row with neither rate nor burst, its ``at`` the time of the reset.
The meanings are the Redis store's (``redis/config.py``): ``Algorithm.configured`` maps a
change to the limit in force, and a change moves the state to the new limit (the
tokens owed keep their count: ``rescale``).

Each state row remembers the change it was last decided under (its ``rate`` and
``burst`` columns; storing a change marks the name's rows decided under none, so
that the one-statement path of ``sqlite/fast_path.py`` leaves them to a full
transaction). A single limiter's transaction reads the name's config row with its
own (:class:`Changeable`): where they differ, it moves the state from the one limit
to the other before deciding, at the change's ``at``, as if the change had moved it
then (Redis moves it in the ``configure`` call itself, which knows the code's values
from a key each process writes; here the processes, which know them, move it).
A change replaced before any decision read it is kept in the new change's row
(``past``: each change and its ``at``, oldest first, as JSON), so that the next
decision moves the state through each in turn, as Redis moved it at each change, and
forgets them (at most :data:`MOST_KEPT`, so a row stays small). They are bound to the
state row's ``updated`` (``seen``; compatibility: see the store's note). A change
whose ``until`` has passed is ended by the first decision after it: the state moves
to it (if no decision had) and back, and the row goes, as on Redis. A peek moves the
state in memory only, and leaves an ended change's move back to the next decision.

Whoever may write the file may write anything in a row. A stored rate or burst is
read as Lua's ``valid`` reads the Redis hash (a number from ``MIN_SET`` to
``MAX_SET``, else the code's value), a time must be a finite number, and changes
kept that are not all valid are decided as without them: a decision never raises,
nor writes a NaN, for a row written by hand.

A key's budget (``for_key``: its rows are named by its tag, the name, ``%/`` and the
key) reads its own config row, and its name's when it has no change of its own: a
change by name reaches every key, those used later too. It moves to the name's latest
change as of that change's time (the name's row keeps its replaced changes for the
name's own state, which its keys do not follow one by one).

Only single limiters read a change. A name whose rows say it is a composite's
members, an adaptive limiter, a budget with priorities or a ConcurrencyLimit is
refused (:class:`~.config.UnchangeableLimit`), as on Redis.
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any

from ..._algorithms.algorithm import EPSILON, Algorithm
from ..keys import KEY_SEPARATOR
from ..records import MAX_SET, MIN_SET, PARAMETERS, QUOTA_BURST, WINDOWS, Override, UnchangeableLimit

__all__ = [
    "FORGET_PAST",
    "MOST_KEPT",
    "NAMES",
    "PENDING",
    "Change",
    "Changeable",
    "change_in_force",
    "keys_in_use",
    "read",
    "refuse_unchangeable",
    "under",
    "write",
]

#: ``(rate, burst)`` of a change in force, either ``None``; ``None``: the code's values.
Change = tuple[float | None, float | None] | None

_READ = "SELECT rate, burst, until, at, past, seen FROM ratelimit_config WHERE name = ?"
#: The state row of a single limiter of the name that reads a change (the latest
#: written, should limiters of two kinds share the name).
_READ_STATE = (
    "SELECT rate, burst, updated FROM ratelimit_state WHERE name = ? AND member = -1"
    f" AND kind IN ({', '.join(repr(kind) for kind in PARAMETERS)}) ORDER BY updated DESC LIMIT 1"
)
#: After a decision has moved the state through the changes kept: none kept now.
FORGET_PAST = "UPDATE ratelimit_config SET past = NULL, seen = NULL WHERE name = ?"

#: A state row's ``rate`` when it was decided under the code's values and a change was
#: stored since (never a rate: those are positive). Only a full transaction, which
#: reads the change, writes the row again.
PENDING = -1.0

#: The most replaced changes a config row keeps (``past``): past them the oldest is
#: forgotten, and the state moves from the change it was decided under straight to
#: the oldest kept. A row stays small however many changes are made with no decision
#: between (a script setting a limit every minute on a budget nobody uses).
MOST_KEPT = 64


def _value(value: Any) -> float | None:
    """A rate or burst as stored, if it is one a change may set (Lua's ``valid``: a
    number from ``MIN_SET`` to ``MAX_SET``); ``None`` otherwise: the code's value.
    Whoever may write the file may write anything in it: text, a blob, a zero."""
    if value.__class__ is not float and value.__class__ is not int:
        return None  # NULL, text, a blob, JSON's true or a list
    return float(value) if MIN_SET <= value <= MAX_SET else None


def _finite(value: Any) -> float | None:
    """A time as stored, if it is a finite number (Lua's ``finite``); else ``None``."""
    if value.__class__ is not float and value.__class__ is not int:
        return None
    return float(value) if math.isfinite(value) else None


def _change(rate: Any, burst: Any) -> Change:
    """The change two stored values make: a value that is not one a change may set
    keeps the code's, as Lua's ``valid`` reads a hash written by hand."""
    rate, burst = _value(rate), _value(burst)
    return None if rate is None and burst is None else (rate, burst)


def under(rate: float | None, burst: float | None) -> tuple[Change, bool]:
    """The change a state row was decided under, from its two columns, and whether
    it says a change may be pending."""
    if rate == PENDING:
        return None, True
    return _change(rate, burst), False


def kept(row: tuple[Any, ...] | None, updated: float | None) -> list[tuple[Change, float]] | None:
    """The changes a config row kept that no decision has read yet, oldest first, each
    with the time it was made, if they are still those of the state row last written
    at ``updated`` (``None``: no state row); ``None``: none kept, or no longer valid."""
    if row is None or row[4] is None or updated is None or row[5] != updated:
        return None
    try:
        past = json.loads(row[4])
        if past.__class__ is not list:
            return None
        found = []
        for rate, burst, at in past[-MOST_KEPT:]:
            change, made = _change(rate, burst), _finite(at)
            if made is None or (change is None and (rate is not None or burst is not None)):
                return None  # a value no change sets, or no time
            found.append((change, made))
        return found
    except (ValueError, TypeError, RecursionError):
        return None  # garbled (written by hand): decided as without it


def _made(row: tuple[Any, ...], now: float) -> float:
    """When a config row's change was made: ``now`` if the row says no time."""
    at = _finite(row[3])
    return now if at is None else at


def change_in_force(row: tuple[Any, ...] | None, now: float) -> tuple[Change, bool]:
    """The change a config row holds at ``now``, and whether it has just ended
    (its ``until`` passed: the row is to go)."""
    if row is None:
        return None, False
    change = _change(row[0], row[1])
    if change is None:
        return None, False
    until = _finite(row[2])
    if until is not None and now >= until:
        return None, True
    return change, False


class Changeable:
    """A single limiter's algorithm as changed at run time: the handle decides with
    it, and each transaction points it at the change in force (:meth:`read`)."""

    __slots__ = ("_made", "_row", "code", "current", "ended", "forget_past", "row_name", "until")

    def __init__(self, code: Algorithm[Any]) -> None:
        self.code = code
        #: What decisions use now: the code's algorithm, or as changed.
        self.current: Algorithm[Any] = code
        self._made: dict[Change, Algorithm[Any]] = {None: code}
        #: The store time the change read ends (inf: none), and whether the change
        #: read had ended (its row to be deleted).
        self.until = math.inf
        self.ended = False
        #: Whether the config row read keeps replaced changes, which the decision
        #: has read (they are to be forgotten).
        self.forget_past = False
        self._row: tuple[Any, ...] | None = None
        #: The name whose config row the change read is (a key's, or its name's).
        self.row_name = ""

    # The memory handle's algorithm: every call goes to the one in force.
    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)

    def step(self, state: Any, now: float, tokens: float, max_wait: float) -> tuple[Any, float]:
        current = self.current
        if tokens > current.most + EPSILON:
            # More than the limit in force could ever hold (the front lets a request
            # larger than the code's limit through to the store, which knows whether
            # a change raised it): refused for ever, as on Redis (too_big).
            return state, -math.inf
        return current.step(state, now, tokens, max_wait)

    def plan(self, state: Any, now: float, tokens: float) -> tuple[float, float]:
        current = self.current
        if tokens > current.most + EPSILON:
            return math.inf, math.inf  # never admitted: a refusal for ever, as in step
        return current.plan(state, now, tokens)

    def new_state(self) -> Any:
        return self.current.new_state()

    def idle_until(self, state: Any) -> float:
        return self.current.idle_until(state)

    @property
    def kind(self) -> str:
        return self.code.kind

    def algorithm(self, change: Change) -> Algorithm[Any]:
        alg = self._made.get(change)
        if alg is None:
            assert change is not None
            alg = self._made[change] = self.code.configured(change[0], change[1])
        return alg

    def read(self, conn: sqlite3.Connection, name: str, now: float) -> Change:
        """Read the change in force for ``name`` at ``now`` and decide with it. A
        key's budget (``name`` a keyed tag) reads its own row, else its name's: a
        change by name reaches every key that has none of its own."""
        row = self._row = conn.execute(_READ, (name,)).fetchone()
        self.row_name = name
        owner, separator, _ = name.partition(KEY_SEPARATOR)
        if separator and (row is None or (_change(row[0], row[1]) is None and row[4] is None)):
            found = conn.execute(_READ, (owner,)).fetchone()
            if found is not None:
                # The name's row: its replaced changes are its own state's (``seen``),
                # never forgotten here; an ended one is deleted for every key at once.
                row = self._row = (*found[:4], None, None)
                self.row_name = owner
        change, self.ended = change_in_force(row, now)
        until = None if change is None or row is None else _finite(row[2])
        self.until = math.inf if until is None else until
        self.forget_past = row is not None and row[4] is not None and not self.ended
        self.current = self.algorithm(change)
        return change

    def moves(self, was: Change, pending: bool, updated: float | None, now: float) -> list[tuple[Change, float]]:
        """The moves that bring a state row decided under ``was`` (``pending``: under
        the code's values, a change stored since), last written at ``updated``
        (``None``: no row), to the change read: each change it has not been decided
        under, with the time the state moves to it, in turn. As Redis moves it: at
        each change (``configure``), then back to the code's values at the first
        decision after a change's end."""
        row = self._row
        if row is None:
            return [] if was is None else [(None, now)]  # the row gone with its change
        latest = _change(row[0], row[1])
        at = _made(row, now)
        past = kept(row, updated)
        if past is not None:
            steps = [*past, (latest, at)]
        elif was != latest or pending:
            steps = [(latest, at)]
        else:
            steps = []
        if self.ended:
            steps.append((None, now))
        return steps

    def move(self, state: Any, was: Change, steps: list[tuple[Change, float]], now: float) -> Any:
        """``state``, decided under ``was``, moved through ``steps`` (:meth:`moves`),
        each at its time (``now`` at the latest)."""
        if getattr(self.code, "rescale", None) is None:
            return state  # a window: its log or counts mean the same under any limit
        before = self.algorithm(was)
        for change, at in steps:
            after = self.algorithm(change)
            state = before.rescale(after, state, at if at <= now else now)  # type: ignore[attr-defined]
            before = after
        return state


def refuse_unchangeable(conn: sqlite3.Connection, name: str, burst: float | None) -> None:
    """Raise if ``name``'s rows say it is a limiter that would never read a change
    (or a window given a burst); nothing is stored then."""
    rows = conn.execute("SELECT member, kind FROM ratelimit_state WHERE name = ?", (name,)).fetchall()
    kept = []
    for member, kind in rows:
        if member >= 0:
            kept.append(
                "an adaptive limiter (its rate is learned from the provider's answers)"
                if kind == "adaptive"
                else "a composite's members"
            )
        elif kind.endswith(":lanes"):
            kept.append("a budget with priorities (low_share: two lanes)")
        elif kind.endswith(":fair"):
            kept.append("a budget shared by a FairShare (its line and its tenants' paces keep the code's rate)")
        elif kind == "concurrency":
            kept.append("a ConcurrencyLimit (slots held, not a rate)")
        elif burst is not None and kind in WINDOWS:
            raise ValueError(
                f"burst={burst!r}: limiter {name!r} is a {kind}, which has no burst apart from its limit "
                f"(set its rate: the limit becomes rate x window)"
            )
        elif burst is not None and kind == "quota":
            raise ValueError(QUOTA_BURST.format(burst=burst, name=name))
    # A ConcurrencyLimit's holders and waiters are rows of their own table
    # (sqlite/slots.py), made by the first one to use the file.
    slots = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ratelimit_slots'").fetchone()
    if slots and conn.execute("SELECT 1 FROM ratelimit_slots WHERE name = ? LIMIT 1", (name,)).fetchone():
        kept.append("a ConcurrencyLimit (slots held, not a rate)")
    if kept:
        what = " and ".join(sorted(set(kept)))
        raise UnchangeableLimit(
            f"limiter {name!r} is {what}, which keeps the code's values: only a single TokenBucket, "
            f"LeakyBucket or SlidingWindow reads a change at run time; nothing was changed"
        )


def write(conn: sqlite3.Connection, name: str, change: Override | None, now: float) -> int:
    """Store ``change`` for ``name`` (``None``: a reset), made at ``now``; the name's
    rows decided under the code's values say a change may be pending (:data:`PENDING`),
    which keeps the fast path (``sqlite/fast_path.py``) from deciding them.

    The change replaced is kept in the row (``past``, with the time it was made) if
    no decision has read it yet, after those it replaced in turn: the next decision
    moves the state through each, as Redis moved it at each ``configure``. They are
    bound to the state row's ``updated`` (``seen``; compatibility: see the store's
    note)."""
    old = conn.execute(_READ, (name,)).fetchone()
    state = conn.execute(_READ_STATE, (name,)).fetchone()
    if change is None and old is None and state is None:
        return 0  # a reset with no change ever stored and no state: nothing to move back
    past: list[tuple[float | None, float | None, float]] | None = None
    seen = None
    if state is not None:
        seen = float(state[2])
        stored = kept(old, seen)
        was, pending = under(state[0], state[1])
        replaced = None if old is None else _change(old[0], old[1])
        if stored is not None:
            # No decision since the last change: it is kept too (and the oldest
            # forgotten past MOST_KEPT).
            assert old is not None
            past = [(*(c or (None, None)), at) for c, at in stored] + [(*(replaced or (None, None)), _made(old, now))]
            past = past[-MOST_KEPT:]
        elif old is not None and (pending or was != replaced):
            # The change replaced was stored since the state was last decided.
            past = [(*(replaced or (None, None)), _made(old, now))]
        else:
            past = []
    # The name's rows and its keys' (``tag``: the name, ``%/``, the key; ``%0`` is the
    # text just past every such tag), each decided under the code's values.
    conn.execute(
        "UPDATE ratelimit_state SET rate = ? WHERE member = -1 AND rate IS NULL AND burst IS NULL"
        " AND (name = ? OR (name >= ? AND name < ?))",
        (PENDING, name, *_keys_of(name)),
    )
    rate = burst = until = None
    if change is not None:
        rate, burst = change.rate, change.burst
        until = None if change.ttl is None else now + change.ttl
    conn.execute(
        "REPLACE INTO ratelimit_config (name, rate, burst, until, at, past, seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (name, rate, burst, until, now, None if past is None else json.dumps(past), seen),
    )
    # The keys in use, each following the name's change (but those with their own).
    return keys_in_use(conn, name)


def keys_in_use(conn: sqlite3.Connection, name: str) -> int:
    """How many keys of the name tagged ``name`` have a state row."""
    keys = conn.execute(
        "SELECT count(DISTINCT name) FROM ratelimit_state WHERE member = -1 AND name >= ? AND name < ?",
        _keys_of(name),
    ).fetchone()
    return int(keys[0])


def _keys_of(name: str) -> tuple[str, str]:
    """The range of the tags of ``name``'s keys (none if ``name`` is a key's)."""
    if KEY_SEPARATOR in name:
        return ("", "")  # (an empty range: a key has no keys)
    return (name + KEY_SEPARATOR, name + "%0")


def read(conn: sqlite3.Connection, name: str, now: float) -> Override | None:
    """The change in force for ``name`` at ``now`` (its ``ttl`` what is left of it)."""
    row = conn.execute(_READ, (name,)).fetchone()
    change, _ = change_in_force(row, now)
    if change is None or row is None:
        return None
    until = _finite(row[2])
    return Override(change[0], change[1], None if until is None else until - now)


#: The two parameters a change sets, by kind (what ``inspect`` calls them).
NAMES = PARAMETERS
