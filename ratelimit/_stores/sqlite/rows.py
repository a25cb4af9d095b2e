"""A SQLite handle's lock: the transaction that loads its rows into the memory
store's slots and writes back what changed (:class:`Rows`).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..._algorithms.holes import Holes
from ..._clock import Clock, SystemClock
from ..._errors import BackendUnavailable
from ..memory.backend import Slot
from .code import WRITE as WRITE_CODE
from .code import Record
from .codec import CorruptState, decode, encode, holes_until
from .config import FORGET_PAST, Change, Changeable, under
from .file import StoreFile

__all__ = ["Rows"]


_SELECT = "SELECT number, blob, updated, rate, burst FROM ratelimit_state WHERE name = ? AND member = ? AND kind = ?"
_WRITE = (
    "REPLACE INTO ratelimit_state (name, member, kind, number, blob, idle, updated, test, forget, rate, burst)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?6, ?9, ?10)"
)
_END_CHANGE = "DELETE FROM ratelimit_config WHERE name = ?"

_VERSION = "PRAGMA data_version"

_Key = tuple[str, int, str]


def _bare(slot: Slot) -> bool:
    """Whether a slot has no holes, pause nor restriction: its state is all there is."""
    holes = slot.holes
    return (
        not holes.items
        and holes.paused_until == -math.inf
        and holes.restricted_until == -math.inf
        and not holes.moves
        and holes.reach == -math.inf
        and not slot.group_holes
    )


def _load_holes(slot: Slot, holes: Holes, groups: dict[tuple[str, ...], Holes]) -> None:
    _fill(slot.holes, holes)
    _fill_groups(slot.group_holes, groups)


def _idle(slot: Slot) -> float:
    """The store time from which a slot's row decides as a fresh one would."""
    idle = slot.alg.idle_until(slot.state)
    for holes in (slot.holes, *slot.group_holes.values()):
        until = holes_until(holes)
        if until > idle:
            idle = until
    return idle


def _fill(mine: Holes, loaded: Holes) -> None:
    """``mine`` made ``loaded``, in place (a handle holds on to ``mine``)."""
    mine.items[:] = loaded.items
    mine.paused_until = loaded.paused_until
    mine.restricted_until = loaded.restricted_until
    # A row written by a release that kept no pace has none, nor moves.
    mine.paced = getattr(loaded, "paced", None)
    mine.moves[:] = getattr(loaded, "moves", ())
    mine.gen = getattr(loaded, "gen", 0)
    mine.reach = getattr(loaded, "reach", -math.inf)


def _fill_groups(mine: dict[tuple[str, ...], Holes], loaded: dict[tuple[str, ...], Holes]) -> None:
    for kinds, holes in mine.items():
        _fill(holes, loaded.get(kinds) or Holes())
    for kinds, holes in loaded.items():
        mine.setdefault(kinds, holes)


class Rows:
    """The rows one handle decides on, read and written in one transaction.

    It is the lock of the memory handles it serves (``acquire``/``release`` and
    ``with``): taking it begins the transaction and loads each row into its
    :class:`~.memory.Slot`; releasing it writes back what changed and commits. An
    exception raised in between rolls the transaction back. Its :meth:`now` is the
    handles' clock: store time, never before the time written into the rows read.
    """

    __slots__ = (
        "_change",
        "_changeable",
        "_code",
        "_code_due",
        "_conn",
        "_file",
        "_floor",
        "_keys",
        "_left",
        "_loaded",
        "_mark",
        "_outer",
        "_reading",
        "_seen",
        "_slots",
        "_written",
        "clock",
        "test",
    )

    def __init__(
        self,
        file: StoreFile,
        keys: Sequence[_Key],
        slots: Sequence[Slot],
        clock: Clock | None,
        changeable: Changeable | None = None,
        code: Record | None = None,
    ) -> None:
        self._file = file
        #: What a single limiter's code configured (``sqlite/code.py``), written by
        #: its first transaction that writes, and again by one that finds no state row.
        self._code = code
        self._code_due = code is not None
        #: A single limiter's algorithm, which follows a change at run time
        #: (sqlite/config.py); ``None``: the rows keep the code's values.
        self._changeable = changeable
        #: The change the rows are decided under in this transaction.
        self._change: Change = None
        self._keys = tuple(keys)
        self._slots = tuple(slots)
        test = not (clock is None or isinstance(clock, SystemClock))
        #: Written into each row: 1 when its times are a test clock's (never swept).
        self.test = 1 if test else 0
        #: Where the time of each decision is read (before the rows' floor).
        self.clock: Callable[[], float] = clock.now if clock is not None and test else file.now
        self._conn: Any = None
        self._floor = -math.inf
        self._written = -math.inf
        self._outer: BaseException | None = None
        self._loaded: list[tuple[float | None, bytes | None]] = []
        #: ``(connection, data_version, this process's writes)`` when the slots last
        #: matched the rows; ``None``: read them at the next transaction.
        self._seen: tuple[int, int, int] | None = None
        self._mark: tuple[int, int, int] = (-1, -1, -1)
        #: This transaction only reads (a peek): it writes nothing, as Redis's peek.
        self._reading = False
        #: A read found what a decision would have written (a change to follow, one
        #: ended, changes kept to forget): the slots no longer match the rows.
        self._left = False

    def now(self) -> float:
        """The time of this transaction's decision."""
        t = self.clock()
        if t < self._floor:
            t = self._floor
        self._written = t
        return t

    def acquire(self, blocking: bool = True, *, reading: bool = False) -> bool:
        """Begin the transaction and load the rows (waiting for the file's lock up to
        its ``busy_timeout`` whatever ``blocking`` says); ``reading``: a transaction
        that writes nothing, whatever the decision does (:meth:`release` rolls it
        back), for a peek."""
        file = self._file
        conn = file.begin()
        # Set in this process's turn (begin), so no other thread's transaction reads it.
        self._reading = reading
        self._left = False
        try:
            self._outer = sys.exc_info()[1]
            # No other connection has committed (data_version), nor this process
            # written (file.writes), since this handle last read or wrote its rows:
            # the slots hold them already.
            mark = (file.generation, conn.execute(_VERSION).fetchone()[0], file.writes)
            changeable = self._changeable
            if mark == self._seen and (changeable is None or self.clock() < changeable.until):
                self._written = self._floor
            else:
                self._seen = None
                self._load(conn)
                self._mark = mark
        except CorruptState as exc:
            file.rollback(conn)
            raise BackendUnavailable(f"the SQLite store {file.path!r} holds a row it did not write: {exc}") from exc
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        self._conn = conn
        return True

    def _load(self, conn: Any) -> None:
        loaded = self._loaded
        loaded.clear()
        floor = -math.inf
        row = None
        for key, slot in zip(self._keys, self._slots, strict=True):
            row = conn.execute(_SELECT, key).fetchone()
            if row is None:
                if self._code is not None:
                    self._code_due = True  # (the name's rows were swept or reset)
                number = blob = None
                slot.state = slot.alg.new_state()
                if not _bare(slot):
                    _load_holes(slot, Holes(), {})
            else:
                number, blob, updated = row[0], row[1], row[2]
                if updated > floor:
                    floor = updated
                if blob is None and number.__class__ is float and _bare(slot):
                    slot.state = number  # a token bucket's: the usual row, one number
                else:
                    state, holes, groups = decode(number, blob)
                    slot.state = state
                    _load_holes(slot, holes, groups)
            loaded.append((number, blob))
        self._floor = self._written = floor
        changeable = self._changeable
        if changeable is not None:
            self._follow(conn, changeable, row)

    def _follow(self, conn: Any, changeable: Changeable, row: Any) -> None:
        """Decide under the change in force: the state moved to its limit if it was
        last decided under another (see sqlite/config.py)."""
        t = self.clock()
        if t < self._floor:
            t = self._floor
        self._change = changeable.read(conn, self._keys[0][0], t)
        was, pending = (None, False) if row is None else under(row[3], row[4])
        steps = changeable.moves(was, pending, None if row is None else row[2], t)
        if self._reading:
            # A peek moves the state in memory only, and answers as Redis's does (its
            # 'peek' and 'wait' ops): the changes made since the last decision are
            # followed (Redis moved the state in each change's own call), but a change
            # that has ended is not undone: Redis's read-only ops leave that move, and
            # the row's deletion, to the next decision, reading the state as the
            # change left it under the code's limit. Nothing is written, so that the
            # decisions after a peek are those without it.
            self._left = bool(steps or pending or changeable.ended or changeable.forget_past)
            if changeable.ended:
                steps = steps[:-1]  # (the move back to the code's limit, at now)
            if steps and row is not None:
                self._slots[0].state = changeable.move(self._slots[0].state, was, steps, t)
            return
        if steps or pending:
            slot = self._slots[0]
            if row is not None:
                slot.state = changeable.move(slot.state, was, steps, t)
            self._loaded[0] = (math.nan, None)  # written back, whatever the decision
            self._written = t

    def release(self) -> None:
        conn = self._conn
        self._conn = None
        file = self._file
        seen, self._seen = self._seen or self._mark, None
        if self._reading:
            self._reading = False
            changeable = self._changeable
            if changeable is not None:
                # What the read found to write is found again by the next decision,
                # which reads the rows again if the slots no longer match them.
                changeable.ended = changeable.forget_past = False
            file.rollback(conn)
            if not self._left:
                self._seen = seen  # (a peek changes no slot: they still match the rows)
            return
        if sys.exc_info()[1] is not self._outer:
            # The decision raised (a bug, or an interrupt): nothing of it is kept, and
            # the slots are read again next time.
            file.rollback(conn)
            return
        wrote = False
        change = self._change
        under = (None, None) if change is None else change
        try:
            changeable = self._changeable
            if changeable is not None and changeable.ended:
                conn.execute(_END_CHANGE, (changeable.row_name,))
                changeable.ended = False
                wrote = True
            elif changeable is not None and changeable.forget_past:
                conn.execute(FORGET_PAST, (changeable.row_name,))
                changeable.forget_past = False
                wrote = True
            code = self._code if self._code_due else None
            if code is not None:
                conn.execute(WRITE_CODE, (self._keys[0][0], *code))
                wrote = True
            loaded = self._loaded
            for i, (key, slot) in enumerate(zip(self._keys, self._slots, strict=True)):
                state = slot.state
                before = loaded[i]
                if state.__class__ is float and _bare(slot):
                    if before[0] == state and before[1] is None:
                        continue  # a refusal: nothing changed
                    conn.execute(
                        _WRITE, (*key, state, None, slot.alg.idle_until(state), self._written, self.test, *under)
                    )
                    loaded[i] = (state, None)
                else:
                    number, blob = encode(state, slot.holes, slot.group_holes)
                    if (number, blob) == before:
                        continue
                    conn.execute(_WRITE, (*key, number, blob, _idle(slot), self._written, self.test, *under))
                    loaded[i] = (number, blob)
                wrote = True
        except BaseException as exc:
            file.rollback(conn)
            if isinstance(exc, file.errors):
                raise file.unavailable(exc) from exc
            raise
        if wrote:
            file.writes += 1
            self._floor = self._written
        file.commit(conn)  # raises (and leaves the slots to be read again) if it cannot
        if code is not None:
            self._code_due = False
        self._seen = (seen[0], seen[1], file.writes)

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """A transaction that writes nothing (``acquire(reading=True)``)."""
        self.acquire(reading=True)
        try:
            yield
        finally:
            self.release()
