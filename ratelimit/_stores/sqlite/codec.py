"""How a :class:`~.sqlite.SQLiteBackend` keeps one limiter's state in a row (internal).

The state is the pure algorithm's own (``_algorithms/``), with the holes the memory
store keeps beside it. A token bucket with no holes, the usual case, is one number in
a ``REAL`` column; anything else is a pickle in a ``BLOB``, read back by an
unpickler that makes nothing but plain data and the algorithms' state classes, so a
file writable by others can corrupt a budget but never run code in this process.

A leaky bucket's state with gaps (``leaky_bucket.py``) is written as two pickles, one
after the other: the row with the state's two times, then the gaps (compatibility:
see the store's note).

``sqlite/backend.py`` calls :func:`encode` and :func:`decode` inside each transaction.
"""

from __future__ import annotations

import io
import math
import pickle
from collections import OrderedDict
from typing import Any

from ..._algorithms import breaker
from ..._algorithms.adaptive import Pace
from ..._algorithms.fair import FairState
from ..._algorithms.holes import GrantTime, Holes
from ..._algorithms.lanes import LaneState, LaneTime
from ..._algorithms.semaphore import Slots
from ..._algorithms.sliding_window import Log
from ..._algorithms.sliding_window_counter import CounterState

__all__ = ["CorruptState", "decode", "encode", "holes_until"]

#: The classes a row may hold, by (module, name): nothing else is ever made.
_ALLOWED: dict[tuple[str, str], type] = {
    (cls.__module__, cls.__qualname__): cls
    for cls in (
        Pace,
        Holes,
        GrantTime,
        LaneState,
        FairState,
        LaneTime,
        Slots,
        Log,
        CounterState,
        breaker.State,
        OrderedDict,
    )
}


#: What a row holds: the algorithm's state, its holes, and a composite's holes by the
#: kinds of its members (see ``memory.Slot``).
Row = tuple[Any, Holes, dict[tuple[str, ...], Holes]]


class CorruptState(ValueError):
    """A row holds something this store never wrote."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        cls = _ALLOWED.get((module, name))
        if cls is None:
            raise CorruptState(f"a row names {module}.{name}, which no state of ours holds")
        return cls


def _bare(holes: Holes) -> bool:
    return (
        not holes.items
        and holes.paused_until == -math.inf
        and holes.restricted_until == -math.inf
        and not getattr(holes, "moves", None)
        and getattr(holes, "reach", -math.inf) == -math.inf
    )


def encode(state: Any, holes: Holes, group_holes: dict[tuple[str, ...], Holes]) -> tuple[float | None, bytes | None]:
    """``(number, blob)``: the row's two columns, one of them ``None``."""
    if state.__class__ is float and _bare(holes) and all(_bare(h) for h in group_holes.values()):
        return state, None
    if state.__class__ is tuple and len(state) > 2:  # a leaky bucket's, with gaps
        row = pickle.dumps((state[:2], holes, group_holes), protocol=pickle.HIGHEST_PROTOCOL)
        return None, row + pickle.dumps(state[2:], protocol=pickle.HIGHEST_PROTOCOL)
    return None, pickle.dumps((state, holes, group_holes), protocol=pickle.HIGHEST_PROTOCOL)


def decode(number: float | None, blob: bytes | None) -> Row:
    """The row's state and holes (``CorruptState`` for a row we did not write)."""
    if blob is None:
        if number.__class__ is not float:
            raise CorruptState(f"a row holds neither a number nor a state: {number!r}")
        return number, Holes(), {}
    stream = io.BytesIO(blob)
    try:
        row = _Unpickler(stream).load()
        gaps = _Unpickler(stream).load() if stream.tell() < len(blob) else None
    except CorruptState:
        raise
    except Exception as exc:
        raise CorruptState(f"a row's state cannot be read: {exc!r}") from exc
    if not (isinstance(row, tuple) and len(row) == 3 and isinstance(row[1], Holes) and isinstance(row[2], dict)):
        raise CorruptState(f"a row holds {type(row).__name__}, not a state")
    if gaps is not None:
        state = row[0]
        if not (
            isinstance(state, tuple)
            and len(state) == 2
            and isinstance(gaps, tuple)
            and len(gaps) % 2 == 0
            and all(isinstance(x, float) for x in (*state, *gaps))  # (a time may be a GrantTime)
        ):
            raise CorruptState("a row's gaps are not a leaky bucket's")
        return (*state, *gaps), row[1], row[2]
    return row


def holes_until(holes: Holes) -> float:
    """The time from which holes no longer matter: a pause or restriction over, and
    every hole's moment passed."""
    until = holes.paused_until if holes.paused_until > holes.restricted_until else holes.restricted_until
    for hole in holes.items:
        if hole[0] > until:
            until = hole[0]
    for move in getattr(holes, "moves", ()):
        if move[5] > until:
            until = move[5]
    reach = getattr(holes, "reach", -math.inf)
    if reach > until:
        until = reach
    return until
