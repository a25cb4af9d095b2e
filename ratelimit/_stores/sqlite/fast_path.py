"""The fast path of a :class:`~.sqlite.SQLiteBackend` token bucket: one statement (internal).

A token bucket's row is usually one number (its TAT, see ``sqlite/codec.py``) and the
decision on it the pure step. So the usual decision needs no transaction of several
statements: one ``UPDATE``, which takes the file's write lock and commits by itself,
reads the row inside SQLite and calls the step of ``token_bucket.py`` through an SQL
function of the connection (``file.STEP_FUNCTION``) to write the new TAT. The
time is read just before it, in this process's turn, and the row's own time is the
floor, as in a full transaction (``Rows.now``); the step is the one the memory
handle runs, on the same numbers, so the decision is the same bit for bit.

Whatever the statement cannot decide goes to the full transaction: no row yet, a row
holding more than a number (holes, a pause), a row of the other clock kind, a limit
changed at run time (``sqlite/config.py``: the row says so), the file
locked (the full transaction waits for it and counts the wait), any error (the full
transaction reports it). ``idle`` (the TAT, for a bare bucket) is written; ``forget``
is not, so the sweep index is not touched at each decision: a step never moves a TAT
back, and ``forget`` only needs to be no later than ``idle``.

``sqlite/backend.py`` makes one for each :meth:`~.sqlite.SQLiteBackend.bind` of a token bucket.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable

from ..._algorithms.algorithm import EPSILON, level_all
from ..._algorithms.holes import exact
from ..._algorithms.token_bucket import Gcra
from ..memory.backend import Slot
from ..stats import Stats
from ..store import Level
from .config import Changeable
from .file import STEP_FUNCTION, StoreFile

__all__ = ["FastPath"]

# SQLite computes the new values in the table's column order from the old ones, so
# `idle` calls the step a second time on the same arguments: a pure function, the
# same number (and the same result kept).
_UPDATE = (
    f"UPDATE ratelimit_state SET number = {STEP_FUNCTION}(number, max(updated, ?1)),"
    f" idle = {STEP_FUNCTION}(number, max(updated, ?1)), updated = max(updated, ?1)"
    " WHERE name = ?2 AND member = -1 AND kind = ?3 AND test = ?4 AND blob IS NULL"
    " AND rate IS NULL AND burst IS NULL"
)


class FastPath:
    """One token bucket's decisions in one statement each, when its row allows."""

    __slots__ = (
        "_alg",
        "_algs",
        "_changeable",
        "_file",
        "_key",
        "_max_wait",
        "_result",
        "_slot",
        "_time",
        "_tokens",
        "on",
    )

    def __init__(
        self,
        file: StoreFile,
        name: str,
        alg: Gcra,
        slot: Slot,
        time: Callable[[], float],
        test: int,
        changeable: Changeable,
    ) -> None:
        self._file = file
        self._changeable = changeable
        self._slot = slot
        self._alg = alg
        self._algs = (alg,)
        self._time = time
        self._key = (name, alg.kind, test)
        self._tokens = 0.0
        self._max_wait = 0.0
        self._result: tuple[float, float, float] = (0.0, 0.0, 0.0)
        #: Whether to try the statement: off while the row holds more than a number
        #: (as this process last wrote it), on again once it holds one.
        self.on = True

    def _step(self, number: float, now: float) -> float:
        state, wait = self._alg.step(number, now, self._tokens, self._max_wait)
        self._result = (state, wait, now)
        return state

    def reserve(self, tokens: float, max_wait: float, stats: Stats | None) -> tuple[float, float] | None:
        """The decision ``MemoryHandle.reserve`` makes, or ``None``: make it in a full
        transaction."""
        result = self._statement(tokens, max_wait, stats)
        if result is None:
            return None
        state, wait, now = result
        # As the memory handle names a grant (holes.exact): only one that waited.
        if wait > EPSILON:
            return wait, exact(self._algs, (state,), now + wait)
        return wait, now + wait

    def reserve_level(
        self, tokens: float, max_wait: float, stats: Stats | None
    ) -> tuple[float, float, Level | None] | None:
        """:meth:`reserve`, and the level it left (``store.Level``)."""
        result = self._statement(tokens, max_wait, stats)
        if result is None:
            return None
        state, wait, now = result
        at = exact(self._algs, (state,), now + wait) if wait > EPSILON else now + wait
        return wait, at, level_all(self._algs, (state,), now)

    def _statement(self, tokens: float, max_wait: float, stats: Stats | None) -> tuple[float, float, float] | None:
        """The statement's ``(state, wait, now)``, or ``None``: decide in a full transaction."""
        if tokens > self._alg.most + EPSILON:
            return None  # more than the code's limit: the full transaction reads the one in force
        file = self._file
        conn = file.turn(self._step, max_wait)
        if conn is None:
            return None
        wrote = False
        try:
            self._tokens = tokens
            self._max_wait = max_wait
            try:
                # The time read in this process's turn, as the memory handle reads it in its lock.
                wrote = conn.execute(_UPDATE, (self._time(), *self._key)).rowcount > 0
            except sqlite3.Error:
                return None  # locked, or failing: the full transaction waits, or reports it
            if not wrote:
                return None
            result = self._result
            if stats is not None:
                stats.record(tokens, result[1])
        finally:
            file.end_turn(wrote)
        return result

    def after_full(self) -> None:
        """After a decision in a full transaction: try the statement next time if the
        row it wrote is one number again, decided under the code's values."""
        slot = self._slot
        holes = slot.holes
        changeable = self._changeable
        self.on = (
            changeable.current is changeable.code
            and slot.state.__class__ is float
            and not holes.items
            and holes.paused_until == -math.inf
            and holes.restricted_until == -math.inf
            and not holes.moves
            and holes.reach == -math.inf
            and not slot.group_holes
        )
