"""The fleet's counters in Redis, as ``ratelimit top`` reads them.

Every single limiter's script counts what it decided, in the same call as the
decision (``count_one`` and ``count_decided`` in ``lua/_top.lua``): no round trip of
its own. Counts go to one hash per limiter and second, ``<state key>:top:<second>``,
which expires after 70 seconds, so they add up over every process of the fleet and
vanish with the traffic.

An allotment (``lease=``) is counted when the script grants it (``l``), not per
grant spent from it. A composite (an adaptive limiter too) is one row of kind
``composite``, a budget with priorities one of kind ``priorities``; a ConcurrencyLimit
is shown by its slots held and queued now, and its maximum, and a FairShare's budget
(kind ``fair``) by its tenants paced ahead of now (its script counts nothing). A limiter's keyed budgets
add up in its row: one row per name, never one per customer.

On Redis 7 and later, the function library holds a hot limiter's counts in Lua and
writes them a second at a time (``lua/_top.lua``), so before reading, ``fleet`` has
every ratelimit library on the server write what it holds (:func:`flush_counts`):
every library, since during a rolling deploy another release's library holds counts.
All of it costs one SCAN pass and a few pipelines, however many limiters there are.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import redis.cluster
from redis.exceptions import ReadOnlyError, ResponseError

from ..keys import code_key, key_for, name_of, parts_of, text_of, wire
from ..records import ACTIVE_SECONDS, FleetRow, p99_wait
from .batch import Call, pipelined
from .clients import database
from .key_survey import CONCURRENCY, FAIR, breaker_mode, fair_kind, number, split
from .scripts import library, refuses_functions

__all__ = ["base_of", "fleet", "flush_counts"]


def _parse(key: str) -> tuple[str, str, int] | None:
    """(name, kind, second) of a counters key, or ``None`` for another key."""
    name, parts = name_of(key), split(key)
    if name is None or parts is None:
        return None
    # What follows the name's tag: the name itself may hold ":top:" or ":injected:".
    head, sep, second = parts[1].rpartition(":top:")
    if not sep or not second.isdigit() or head.startswith("injected:"):
        return None  # not counters, or a limiter on a test clock (its seconds are not the server's)
    return name, head.rpartition(":")[2], int(second)


#: Seconds a server's list of flush functions is trusted (a library loaded since, by
#: a release rolled out meanwhile, is flushed from the next list on).
FLUSHERS_KEPT = 5.0
#: Bases in one FCALL of a flush function.
FLUSH_CHUNK = 500
_FLUSHERS: weakref.WeakKeyDictionary[Any, tuple[float, tuple[str, ...]]] = weakref.WeakKeyDictionary()
_flushers_lock = threading.Lock()
_FLUSH = "_top_flush"


def _fields(entry: Any) -> dict[str, Any]:
    """A FUNCTION LIST entry as a dictionary (RESP3 replies one, RESP2 a flat list)."""
    if isinstance(entry, dict):
        return {text_of(k): v for k, v in entry.items()}
    items = list(entry)
    return {text_of(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


def _listed_flushers(listed: Any) -> tuple[str, ...]:
    names = []
    for entry in listed or ():
        lib = _fields(entry)
        if not text_of(lib.get("library_name", "")).startswith("ratelimit_"):
            continue
        for function in lib.get("functions") or ():
            name = text_of(_fields(function).get("name", ""))
            if name.endswith(_FLUSH):
                names.append(name)
    return tuple(sorted(names))


def _flushers(client: Any) -> tuple[str, ...]:
    """The flush function of every ratelimit library loaded on the server (of this
    release and any other that has one), as listed at most FLUSHERS_KEPT seconds ago.
    A server without Functions holds no counts: none. A list refused (an ACL):
    this release's function alone."""
    at = time.monotonic()
    known = None
    with _flushers_lock, contextlib.suppress(TypeError):
        known = _FLUSHERS.get(client)
    if known is not None and at - known[0] < FLUSHERS_KEPT:
        return known[1]
    try:
        found = _listed_flushers(client.function_list(library="ratelimit_*"))
    except ResponseError as exc:
        found = () if refuses_functions(str(exc)) and "NOPERM" not in str(exc) else (library().function("top_flush"),)
    with _flushers_lock, contextlib.suppress(TypeError):  # a client that cannot be weakly referenced
        _FLUSHERS[client] = (at, found)
    return found


def flush_counts(client: Any, bases: Iterable[str]) -> None:
    """Have every ratelimit library on the server write the counts it holds in Lua
    for ``bases`` (the part of a ``<base>:top:<second>`` key before ``:top:``), so
    that their keys are exact. A Cluster holds none (its clients call scripts, which
    hold nothing), nor does a server without Functions, and what is held is database
    0's alone (see op_of in lua/_top.lua): a client of another writes it nowhere. A
    function gone meanwhile (FUNCTION FLUSH: what it held went with it) is skipped."""
    if isinstance(client, redis.cluster.RedisCluster) or database(client) != 0:
        return
    wanted = sorted(set(bases))
    if not wanted:
        return
    functions = _flushers(client)
    if not functions:
        return
    pipe = client.pipeline(transaction=False)
    for function in functions:
        for start in range(0, len(wanted), FLUSH_CHUNK):
            chunk = wanted[start : start + FLUSH_CHUNK]
            pipe.fcall(function, len(chunk), *map(wire, chunk))
    ours = library().function("top_flush")
    calls = [function for function in functions for _ in range(0, len(wanted), FLUSH_CHUNK)]
    stale = False
    for function, reply in zip(calls, pipe.execute(raise_on_error=False), strict=True):
        if not isinstance(reply, ResponseError):
            continue
        message = str(reply)
        if "Function not found" in message or refuses_functions(message):
            stale = True  # flushed meanwhile, or no longer allowed: listed again next time
        elif isinstance(reply, ReadOnlyError) or function != ours:
            # A replica (what is held is on its master: it shows a second short), or
            # another release's function failing: neither stops `top`.
            continue
        else:
            raise reply
    if stale:
        with _flushers_lock, contextlib.suppress(TypeError):  # a client that cannot be weakly referenced
            _FLUSHERS.pop(client, None)


def base_of(key: str) -> str:
    """The counters' base of a ``<base>:top:<second>`` key."""
    return key.rpartition(":top:")[0]


def fleet(client: Any, window: float = 5.0, now: float | None = None) -> list[FleetRow]:
    """Every limiter active in the last minute, busiest first: its rates over the last
    ``window`` whole seconds, and its pauses over the minute; then every
    ConcurrencyLimit with a slot held or a lease not yet run out, fullest first; then
    every FairShare's budget whose tenants' paces are kept, most tenants first.
    One SCAN pass (on a Cluster, one per master), then pipelines for all of them."""
    if now is None:
        seconds, micros = client.time()
        now = float(seconds) + float(micros) / 1e6
    current = math.floor(now)
    keys: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    slots: list[str] = []
    shared: list[tuple[str, str]] = []
    for raw in client.scan_iter(match="ratelimit:{*", count=1000):
        key = text_of(raw)
        parsed = _parse(key)
        if parsed is not None and parsed[2] > current - ACTIVE_SECONDS:
            keys[parsed[:2]].append((parsed[2], key))
        elif (parts := split(key)) is not None and (parts[1] == CONCURRENCY or _is_tenants(parts[1])):
            owner = parts_of(key)
            # A keyed limit's slots (``for_key``) are one customer's: not listed.
            if owner is not None and owner[1] is None:
                if parts[1] == CONCURRENCY:
                    slots.append(owner[0])
                else:
                    shared.append((owner[0], key))
    # The counts held in Lua for the bases found, written before they are read.
    flush_counts(client, (base_of(key) for found in keys.values() for _, key in found))
    span = max(1, round(window))
    groups = [(name, kind, sorted(found)) for (name, kind), found in keys.items()]
    reads = [_reads(name, kind, found) for name, kind, found in groups]
    reads += [_slot_reads(name, now) for name in slots]
    reads += [_fair_reads(name, key, now) for name, key in shared]
    replies = iter(pipelined(client, [call for calls in reads for call in calls]))
    answers = [[next(replies) for _ in calls] for calls in reads]
    rows = [
        _row(name, kind, found, answer, current, span, now)
        for (name, kind, found), answer in zip(groups, answers, strict=False)
    ]
    rows.sort(key=lambda row: (-(row.grants_per_sec or 0.0), row.name))
    after = len(groups) + len(slots)
    held = [_slot_row(name, answer) for name, answer in zip(slots, answers[len(groups) : after], strict=True)]
    held.sort(key=lambda row: (-(row.held or 0), row.name))
    fair = [_fair_row(name, answer) for (name, _), answer in zip(shared, answers[after:], strict=True) if answer[0]]
    fair.sort(key=lambda row: (-(row.tenants or 0), row.name))
    return rows + held + fair


def _reads(name: str, kind: str, found: list[tuple[int, str]]) -> list[Call]:
    calls: list[Call] = [("hgetall", (key,)) for _, key in found]
    return [
        *calls,
        ("zscore", (key_for(name, kind) + ":holes", "pause")),
        ("hget", (key_for(name, "breaker"), "mode")),
        ("hget", (code_key(name), "shadow")),
    ]


def _row(name: str, kind: str, found: list[tuple[int, str]], answer: list[Any], current: int, span: int,
         now: float) -> FleetRow:  # fmt: skip
    *hashes, paused, mode, shadow = answer
    granted = refused = leased = withdrawn = 0.0
    pauses = 0
    buckets: dict[int, float] = defaultdict(float)
    # The last `span` whole seconds: the current one is still filling.
    recent = range(current - span, current)
    for (second, _), fields in zip(found, hashes, strict=True):
        values = {text_of(k): float(v) for k, v in fields.items()}
        pauses += int(values.get("p", 0))
        if second not in recent:
            continue
        refused += values.get("r", 0.0)
        leased += values.get("l", 0.0)
        withdrawn += values.get("c", 0.0)
        for field, count in values.items():
            if field.startswith("w") and field[1:].isdigit():
                buckets[int(field[1:])] += count
                granted += count
    until = None if paused is None else float(paused)
    return FleetRow(
        name=name,
        kind=kind,
        shadow=shadow is not None and text_of(shadow) == "1",
        # A reservation withdrawn before it was due (a timeout, a cancelled task) was
        # counted when granted; it never went. (Its wait stays in the histogram.)
        grants_per_sec=max(granted - withdrawn, 0.0) / span,
        withdrawn_per_sec=withdrawn / span,
        refusals_per_sec=refused / span,
        leased_per_sec=leased / span,
        p99_wait=p99_wait(buckets),
        pauses=pauses,
        paused_for=None if until is None or until <= now else until - now,
        breaker=breaker_mode(mode),
        idle=max(0.0, now - (found[-1][0] + 1)),
    )


def _slot_reads(name: str, now: float) -> list[Call]:
    # See lua/concurrency.lua: holders and places scored by when they run out.
    holders = key_for(name, CONCURRENCY)
    after = f"({now!r}"
    return [
        ("zcount", (holders, after, "+inf")),
        ("zcount", (holders + ":expiry", after, "+inf")),
        ("get", (holders + ":max",)),
        ("hget", (key_for(name, "breaker"), "mode")),
    ]


def _is_tenants(rest: str) -> bool:
    """Whether a key's rest is a FairShare's tenants (``fair:<kind>:tenants``)."""
    base, _, side = rest.rpartition(":")
    return side == "tenants" and fair_kind(base) is not None


def _fair_reads(name: str, tenants: str, now: float) -> list[Call]:
    # See lua/_fair.lua: tenants scored by their finish; those ahead of now are active.
    return [("zcount", (tenants, f"({now!r}", "+inf")), ("hget", (key_for(name, "breaker"), "mode"))]


def _fair_row(name: str, answer: list[Any]) -> FleetRow:
    active, mode = answer
    return FleetRow.uncounted(name, FAIR, breaker_mode(mode), tenants=int(active))


def _slot_row(name: str, answer: list[Any]) -> FleetRow:
    held, queued, most, mode = answer
    most_held = None if (stored := number(most)) is None else int(stored)
    return FleetRow.uncounted(name, CONCURRENCY, breaker_mode(mode), held=int(held), queued=int(queued), most=most_held)
