"""What a :class:`~.sqlite.SQLiteBackend` file tells of a limiter name (internal).

``SQLiteBackend.inspect``, ``inspect_many`` and ``inspect_all`` read here, in one
transaction that writes nothing, the records the Redis store fills
(:class:`~.records.Inspection`): the kind of a single limiter, a change in force, a
pause fed back, a breaker of the name, a composite's members and a budget's lanes
(``other_keys``, ``forms``), a ConcurrencyLimit's slots. The file keeps no copy of
what the code says, so what follows from it stays ``None``: ``code``, ``effective``,
``available``, ``wait_for_one``, ``promised_ahead``, and a ConcurrencyLimit's
maximum; ``shadow`` is false. A row kept on a test clock gives no pause nor breaker
time (its times are not store time).

Names are read as bytes and made text by ``keys.text_of``, so a row whose name is a
BLOB or text that is not UTF-8 (written by hand) is listed, never a traceback; such
a name given back addresses the same row (``keys.bytes_of``).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..keys import Keyed, bytes_of, tag, text_of, untag
from ..records import PARAMETERS, Inspection, Slots
from .codec import CorruptState, decode
from .config import read as read_change
from .slots import survey

__all__ = ["holds", "inspect_all", "inspect_names"]

_COLUMNS = "CAST(name AS BLOB), member, CAST(kind AS BLOB), number, blob, test"
#: A name matches its row whether the row holds it as text or as a BLOB.
_BY_NAME = f"SELECT {_COLUMNS} FROM ratelimit_state WHERE name IN (CAST(?1 AS TEXT), ?1)"
_EVERY = f"SELECT {_COLUMNS} FROM ratelimit_state"
_CHANGED = "SELECT DISTINCT CAST(name AS BLOB) FROM ratelimit_config WHERE rate IS NOT NULL OR burst IS NOT NULL"
_ANY_STATE = "SELECT 1 FROM ratelimit_state WHERE name IN (CAST(?1 AS TEXT), ?1) LIMIT 1"
_ANY_CHANGE = (
    "SELECT 1 FROM ratelimit_config WHERE name IN (CAST(?1 AS TEXT), ?1) AND (rate IS NOT NULL OR burst IS NOT NULL) "
    "LIMIT 1"
)

#: A breaker's mode as the Redis store names it.
_MODES = {"closed": "closed", "open": "open", "half_open": "half-open"}

_Row = tuple[int, str, Any, Any, int]  # member, kind, number, blob, test


def _change(conn: sqlite3.Connection, named: str, now: float) -> Any:
    try:
        return read_change(conn, named, now)
    except UnicodeEncodeError:
        return None  # a name that is not UTF-8: no change can be stored for it


def _slots(conn: sqlite3.Connection, named: str) -> list[tuple[Any, ...]]:
    try:
        return survey(conn, [named])
    except UnicodeEncodeError:
        return []


def _inspection(
    name: str, key: str | None, rows: Iterable[_Row], change: Any, slots: Iterable[tuple[Any, ...]], now: float
) -> Inspection:
    kind = None
    paused_for = None
    breaker = opened_at = None
    members: list[tuple[int, str]] = []
    lanes: list[str] = []
    for member, row_kind, number, blob, test in rows:
        if member >= 0:
            members.append((member, f"{member}:{row_kind}"))
            continue
        if row_kind.endswith(":lanes"):
            base = row_kind.rpartition(":")[0]
            lanes += [f"hi:{base}", f"lo:{base}"]
            continue
        try:
            state, holes, _ = decode(number, blob)
        except CorruptState:
            state = holes = None
        if row_kind in PARAMETERS:
            kind = row_kind
            if holes is not None and not test and holes.paused_until > now:
                paused_for = holes.paused_until - now
        elif row_kind == "breaker":
            mode = getattr(state, "mode", None)
            breaker = _MODES.get(mode, "unknown") if isinstance(mode, str) else "unknown"
            at = getattr(state, "opened_at", None)
            if breaker == "open" and not test and isinstance(at, float):
                opened_at = at
    forms: list[str] = []
    member_kinds = {each.partition(":")[2] for _, each in members}
    if "adaptive" in member_kinds:
        forms.append("adaptive")
    elif members:
        forms.append("composite")
    if lanes:
        forms.append("priorities")
    concurrency = None
    for _, member, held, waiting, _, _ in slots:
        if member >= 0:
            members.append((int(member), f"{int(member)}:concurrency"))
        else:
            concurrency = Slots(int(held), int(waiting), None)
    if concurrency is not None:
        forms.append("concurrency")
    return Inspection(
        name=name,
        key=key,
        kind=kind,
        override=change,
        paused_for=paused_for,
        breaker=breaker,
        breaker_opened_at=opened_at,
        other_keys=tuple(each for _, each in sorted(set(members))) + tuple(lanes),
        forms=tuple(forms),
        concurrency=concurrency,
        now=now,
    )


def _rows(found: Iterable[tuple[Any, ...]]) -> list[_Row]:
    return [(int(member), text_of(kind), number, blob, test) for _, member, kind, number, blob, test in found]


def inspect_names(conn: sqlite3.Connection, names: Sequence[str | Keyed], now: float) -> list[Inspection]:
    """What the file holds of each of ``names`` (a ``Keyed`` one: that key's budget)."""
    seen = []
    for name in names:
        named = tag(name)
        rows = _rows(conn.execute(_BY_NAME, (bytes_of(named),)))
        plain, key = (name.name or "", name.key) if isinstance(name, Keyed) else (name, None)
        seen.append(_inspection(plain, key, rows, _change(conn, named, now), _slots(conn, named), now))
    return seen


def inspect_all(conn: sqlite3.Connection, now: float) -> list[Inspection]:
    """Every name the file holds something of (a state, a change in force, slots),
    sorted; a limiter's keyed budgets are not names of their own. One pass over each
    table, however many names."""
    rows: dict[str, list[_Row]] = defaultdict(list)
    for found in conn.execute(_EVERY):
        rows[text_of(found[0])].extend(_rows([found]))
    changed = {text_of(named) for (named,) in conn.execute(_CHANGED)}
    slots: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for found in survey(conn, []):
        slots[text_of(found[0])].append(found)
    seen = []
    for named in sorted({*rows, *changed, *slots}):
        name, key = untag(named)
        if key is not None:
            continue
        change = _change(conn, named, now) if named in changed else None
        each = _inspection(name, None, rows.get(named, ()), change, slots.get(named, ()), now)
        if each.known:
            seen.append(each)
    seen.sort(key=lambda each: each.name)
    return seen


def holds(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the file holds a state row, a change or slots of ``name`` itself (not of
    one of its keys): three indexed lookups, whatever else the file holds."""
    named = tag(name)
    raw = bytes_of(named)
    if conn.execute(_ANY_STATE, (raw,)).fetchone() is not None:
        return True
    if conn.execute(_ANY_CHANGE, (raw,)).fetchone() is not None:
        return True
    return bool(_slots(conn, named))
