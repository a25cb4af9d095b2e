"""What a :class:`~.sqlite.SQLiteBackend` file tells of a limiter name (internal).

``SQLiteBackend.inspect``, ``inspect_many`` and ``inspect_all`` read here, in one
transaction that writes nothing, the records the Redis store fills
(:class:`~.records.Inspection`): the kind of a single limiter, a change in force, a
pause fed back, a breaker of the name, a composite's members and a budget's lanes
(``other_keys``, ``forms``), a ConcurrencyLimit's slots, a FairShare's tenants; and from what the code of a
single limiter configured (``sqlite/code.py``) its ``code``, guard and ``shadow``,
the parameters in force, and what it could grant now, worked out by its algorithm
on the state row as Redis's ``peek`` op works it out (the state moved to a change
made since its last decision, as a peek moves it; holes left out). A
ConcurrencyLimit's maximum stays ``None``. A row kept on a test clock gives no
pause, breaker time nor what could be granted now (its times are not store time).

Names are read as bytes and made text by ``keys.text_of``, so a row whose name is a
BLOB or text that is not UTF-8 (written by hand) is listed, never a traceback; such
a name given back addresses the same row (``keys.bytes_of``).
"""

from __future__ import annotations

import contextlib
import heapq
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..._algorithms.algorithm import EPSILON
from ..._algorithms.fair import FairState
from ..._algorithms.holes import Holes
from ..._algorithms.quota import CalendarQuota
from ..._algorithms.token_bucket import Allowance
from ..keys import Keyed, bytes_of, tag, text_of, untag
from ..records import PARAMETERS, TENANTS_SHOWN, FleetRow, Inspection, Slots, Tenants
from .code import EVERY as EVERY_CODE
from .code import Record, algorithm, kind_of, parsed
from .code import read as read_code
from .codec import CorruptState, decode
from .config import Changeable, under
from .config import read as read_change
from .slots import survey

__all__ = ["fair_rows", "holds", "inspect_all", "inspect_names"]

_COLUMNS = "CAST(name AS BLOB), member, CAST(kind AS BLOB), number, blob, test, updated, rate, burst"
#: A name matches its row whether the row holds it as text or as a BLOB.
_BY_NAME = f"SELECT {_COLUMNS} FROM ratelimit_state WHERE name IN (CAST(?1 AS TEXT), ?1)"
_EVERY = f"SELECT {_COLUMNS} FROM ratelimit_state"
_FAIR = (
    "SELECT CAST(name AS BLOB), CAST(kind AS BLOB), number, blob, test FROM ratelimit_state "
    "WHERE member = -1 AND kind LIKE '%:fair'"
)
_CONFIGURED = "SELECT CAST(name AS BLOB) FROM ratelimit_config"
_CHANGED = "SELECT DISTINCT CAST(name AS BLOB) FROM ratelimit_config WHERE rate IS NOT NULL OR burst IS NOT NULL"
_ANY_STATE = "SELECT 1 FROM ratelimit_state WHERE name IN (CAST(?1 AS TEXT), ?1) LIMIT 1"
_ANY_CHANGE = (
    "SELECT 1 FROM ratelimit_config WHERE name IN (CAST(?1 AS TEXT), ?1) AND (rate IS NOT NULL OR burst IS NOT NULL) "
    "LIMIT 1"
)

#: A breaker's mode as the Redis store names it.
_MODES = {"closed": "closed", "open": "open", "half_open": "half-open"}

_Row = tuple[int, str, Any, Any, int, Any, Any, Any]  # member, kind, number, blob, test, updated, rate, burst


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
    name: str,
    key: str | None,
    rows: Iterable[_Row],
    change: Any,
    slots: Iterable[tuple[Any, ...]],
    now: float,
    in_force: dict[str, Any] | None = None,
) -> Inspection:
    kind = None
    paused_for = None
    breaker = opened_at = None
    members: list[tuple[int, str]] = []
    lanes: list[str] = []
    fair = None
    for member, row_kind, number, blob, test, *_ in rows:
        if member >= 0:
            members.append((member, f"{member}:{row_kind}"))
            continue
        if row_kind.endswith(":lanes"):
            base = row_kind.rpartition(":")[0]
            lanes += [f"hi:{base}", f"lo:{base}"]
            continue
        if row_kind.endswith(":fair"):
            fair = _tenants(row_kind.rpartition(":")[0], number, blob, test, now)
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
    if fair is not None:
        forms.append("fair")
    fields: dict[str, Any] = dict(
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
        fair=fair,
        now=now,
    )
    fields.update(in_force or {})
    return Inspection(**fields)


def _tenants(kind: str, number: Any, blob: Any, test: Any, now: float) -> Tenants:
    """A FairShare's row (``memory/fair.py``'s state): its tenants paced ahead of now,
    and the few furthest ahead. The row is one blob, read whole; only a count and
    :data:`TENANTS_SHOWN` tenants come out of it. A row on a test clock: its tenants
    kept, none shown (its times are not store time)."""
    try:
        state = decode(number, blob)[0]
    except CorruptState:
        state = None
    if not isinstance(state, FairState):
        return Tenants(kind, 0)
    if test:
        return Tenants(kind, len(state.tenants))
    active = [(entry[0], tenant, entry[1]) for tenant, entry in state.tenants.items() if entry[0] > now]
    ahead = heapq.nlargest(TENANTS_SHOWN, active)
    return Tenants(kind, len(active), tuple((tenant, finish - now, weight) for finish, tenant, weight in ahead))


def _rows(found: Iterable[tuple[Any, ...]]) -> list[_Row]:
    return [
        (int(member), text_of(kind), number, blob, test, *rest) for _, member, kind, number, blob, test, *rest in found
    ]


def _in_force(
    conn: sqlite3.Connection,
    named: str,
    code: Record | None,
    rows: Sequence[_Row],
    now: float,
    configured: bool = True,
) -> dict[str, Any]:
    """What the code of a single limiter of the name says and what it could grant now,
    as fields of its :class:`Inspection` (none without a code row). ``configured``:
    whether the name may have a config row (else none is read)."""
    if code is None:
        return {}
    kind = kind_of(code[0])
    alg = algorithm(code) if kind in PARAMETERS else None
    if alg is None:
        return {"kind": kind}  # a row this release did not write: its kind alone, as Redis tells it
    names = PARAMETERS[kind]
    fields: dict[str, Any] = {
        "kind": kind,
        "code": dict(zip(names, code[1:3], strict=True)),
        "slack": code[3],
        "shadow": code[4] == 1,
    }
    row = next((each for each in rows if each[0] == -1 and each[1] == kind), None)
    try:
        if row is None:
            state, holes, updated, was, pending = alg.new_state(), Holes(), None, None, False
        else:
            state, holes, _ = decode(row[2], row[3])
            updated = row[5] if row[5].__class__ is float else None
            was, pending = under(row[6], row[7])
    except CorruptState:
        return fields
    # As a peek moves it (``Rows._follow``): through the changes made since the row's
    # last decision, leaving the move back from an ended change to the next decision.
    at = now if updated is None or updated < now else updated
    changeable = Changeable(alg)
    if configured:
        with contextlib.suppress(UnicodeEncodeError):  # (a name that is not UTF-8 has no change)
            changeable.read(conn, named, at)
    steps = changeable.moves(was, pending, updated, at)
    if changeable.ended:
        steps = steps[:-1]
    if steps and row is not None:
        state = changeable.move(state, was, steps, at)
    current = changeable.current
    most, rate = (float(each) for each in current.params())
    if isinstance(current, CalendarQuota):
        # A quota's period as Redis's inspect tells it: the current one's length.
        start, end = current.calendar.period(at)
        rate = end - start
        fields["code"] = dict(zip(names, (code[1], rate), strict=True))
    fields["effective"] = dict(zip(names, (most, rate), strict=True))
    if row is not None and row[4]:
        return fields  # a test clock's times: nothing to tell of now

    def goes(tokens: float) -> bool:
        admit_at, grant_at = current.plan(state, at, tokens)
        return admit_at - at <= EPSILON and grant_at - at <= EPSILON

    # The largest request that would go now, by bisection, as Redis's peek finds it.
    low, high = 0.0, most
    if goes(high):
        low = high
    else:
        for _ in range(60):
            mid = (low + high) / 2
            if goes(mid):
                low = mid
            else:
                high = mid
    admit_at, grant_at = current.plan(state, at, 1.0)
    fields.update(
        available=low,
        wait_for_one=max(max(admit_at, grant_at) - at, 0.0),
        promised_ahead=max(0.0, current.latest(state) - at),
        now=at,
    )
    paced = holes.paced
    # An allowance's pause is kept as a pace whose next slot is its end (holes.gate).
    if isinstance(current, Allowance) and holes.paused_until <= at and paced is not None and paced[1] >= paced[2] > at:
        fields["paused_for"] = paced[2] - at
    return fields


def inspect_names(conn: sqlite3.Connection, names: Sequence[str | Keyed], now: float) -> list[Inspection]:
    """What the file holds of each of ``names`` (a ``Keyed`` one: that key's budget)."""
    seen = []
    for name in names:
        named = tag(name)
        raw = bytes_of(named)
        rows = _rows(conn.execute(_BY_NAME, (raw,)))
        plain, key = (name.name or "", name.key) if isinstance(name, Keyed) else (name, None)
        in_force = _in_force(conn, named, read_code(conn, raw), rows, now)
        seen.append(_inspection(plain, key, rows, _change(conn, named, now), _slots(conn, named), now, in_force))
    return seen


def inspect_all(conn: sqlite3.Connection, now: float) -> list[Inspection]:
    """Every name the file holds something of (a state, what the code configured, a
    change in force, slots), sorted; a limiter's keyed budgets are not names of their own. One pass over each
    table, however many names."""
    rows: dict[str, list[_Row]] = defaultdict(list)
    for found in conn.execute(_EVERY):
        rows[text_of(found[0])].extend(_rows([found]))
    changed = {text_of(named) for (named,) in conn.execute(_CHANGED)}
    slots: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for found in survey(conn, []):
        slots[text_of(found[0])].append(found)
    codes = {text_of(found[0]): parsed(found[1:]) for found in conn.execute(EVERY_CODE)}
    configured = {text_of(named) for (named,) in conn.execute(_CONFIGURED)}
    seen = []
    for named in sorted({*rows, *changed, *slots, *codes}):
        name, key = untag(named)
        if key is not None:
            continue
        change = _change(conn, named, now) if named in changed else None
        in_force = _in_force(conn, named, codes.get(named), rows.get(named, []), now, named in configured)
        each = _inspection(name, None, rows.get(named, ()), change, slots.get(named, ()), now, in_force)
        if each.known:
            seen.append(each)
    seen.sort(key=lambda each: each.name)
    return seen


def holds(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the file holds a state row, what the code configured, a change or slots
    of ``name`` itself (not of one of its keys): four indexed lookups, whatever else
    the file holds."""
    named = tag(name)
    raw = bytes_of(named)
    if conn.execute(_ANY_STATE, (raw,)).fetchone() is not None:
        return True
    if read_code(conn, raw) is not None:
        return True
    if conn.execute(_ANY_CHANGE, (raw,)).fetchone() is not None:
        return True
    return bool(_slots(conn, named))


def fair_rows(conn: sqlite3.Connection, now: float) -> list[FleetRow]:
    """Every FairShare's budget in the file with a tenant paced ahead of now (a name's
    own, not a key's), as ``top`` lists it after the counted limiters: by its tenants,
    most first (its decisions count nothing)."""
    rows = []
    for named, kind, number, blob, test in conn.execute(_FAIR):
        name, key = untag(text_of(named))
        if key is not None:
            continue
        tenants = _tenants(text_of(kind).rpartition(":")[0], number, blob, test, now)
        if not tenants.active:
            continue  # the row stays after its tenants' paces end: nothing active
        rows.append(FleetRow.uncounted(name, "fair", None, tenants=tenants.active))
    rows.sort(key=lambda row: (-(row.tenants or 0), row.name))
    return rows
