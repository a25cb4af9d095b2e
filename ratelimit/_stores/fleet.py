"""The fleet's counters in Redis, as ``ratelimit top`` reads them.

Every single limiter's script counts what it decided, in the same call as the
decision (``tally`` in ``lua/_single.lua``): no round trip of its own. Counts go to
one hash per limiter and second, ``<state key>:top:<second>``, which expires after 70
seconds, so they add up over every process of the fleet and vanish with the traffic.

Grants a process takes from a lease (``lease=``) never reach the script: the lease's
tokens are counted instead (``l``), when the script grants it. A composite (and an
adaptive limiter, a group of two) is counted as one limiter of kind ``composite``, a
budget with priorities as one of kind ``priorities`` (both lanes together). A
ConcurrencyLimit counts nothing per second: it is shown by its slots held and
queued now, and its maximum (``lua/concurrency.lua`` keeps it beside the holders).
The budgets of a limiter's keys (``for_key``) add up in the limiter's row: one row
per name, never one per customer.

All of it costs one SCAN pass over the keyspace and a few pipelines, however many
limiters there are.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .batch import Call, pipelined
from .census import CONCURRENCY, breaker_mode, number, split
from .keys import code_key, key_for, name_of, parts_of

__all__ = ["WAIT_BOUNDS", "FleetRow", "fleet", "p99_wait"]

#: The upper bounds, in seconds, of the wait histogram's buckets (``WAIT_BOUNDS`` in
#: ``lua/_single.lua``; field ``w<i>`` counts waits up to the i-th, 1-based, and the
#: one after the last counts longer waits).
WAIT_BOUNDS = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: Seconds of history a hash keeps; ``top`` shows what was active within a minute.
ACTIVE_SECONDS = 60


@dataclass(frozen=True)
class FleetRow:
    """One limiter across the fleet, over the last ``window`` seconds."""

    name: str
    kind: str
    #: A shadow limiter's counts are what it would have done (see ``shadow=True``).
    shadow: bool
    #: Requests granted and refused per second, leased tokens per second (``None``
    #: for a ConcurrencyLimit, which counts no rate). Grants are those that went:
    #: reservations withdrawn before they were due are counted apart.
    grants_per_sec: float | None
    refusals_per_sec: float | None
    leased_per_sec: float | None
    #: The 99th percentile of the waits granted, as the bound of its histogram bucket
    #: (``inf``: longer than the last bound); ``None``: no grant in the window.
    p99_wait: float | None
    #: Pauses fed back by a provider (a 429's ``Retry-After``) in the last minute.
    pauses: int
    #: Seconds left of a pause in force, ``None``: none.
    paused_for: float | None
    #: A breaker of the same name: ``closed``, ``open``, ``half-open``; ``None``: none.
    breaker: str | None
    #: Seconds since its latest second of activity (``None``: a ConcurrencyLimit).
    idle: float | None
    #: A ConcurrencyLimit's slots held now, callers queued, and its maximum as its
    #: latest process was built with (``None``: not one, or not stored).
    held: int | None = None
    queued: int | None = None
    most: int | None = None
    #: Reservations withdrawn before they were due, per second (a timeout, a cancel).
    withdrawn_per_sec: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "shadow": self.shadow,
            "grants_per_sec": self.grants_per_sec,
            "refusals_per_sec": self.refusals_per_sec,
            "leased_per_sec": self.leased_per_sec,
            "withdrawn_per_sec": self.withdrawn_per_sec,
            "p99_wait": None if self.p99_wait is None else (self.p99_wait if math.isfinite(self.p99_wait) else "inf"),
            "pauses_last_minute": self.pauses,
            "paused_for": self.paused_for,
            "breaker": self.breaker,
            "idle_seconds": self.idle,
            "in_flight": None if self.held is None else {"held": self.held, "max": self.most, "queued": self.queued},
        }


def p99_wait(buckets: dict[int, float]) -> float | None:
    """The bound of the bucket where 99 % of the granted waits are reached, from the
    counts per bucket index (1-based, as the fields ``w<i>``)."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    seen = 0.0
    for index in sorted(buckets):
        seen += buckets[index]
        if seen >= 0.99 * total:
            return WAIT_BOUNDS[index - 1] if index <= len(WAIT_BOUNDS) else math.inf
    return math.inf


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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


def fleet(client: Any, window: float = 5.0, now: float | None = None) -> list[FleetRow]:
    """Every limiter active in the last minute, busiest first: its rates over the last
    ``window`` whole seconds, and its pauses over the minute; then every
    ConcurrencyLimit with a slot held or a lease not yet run out, fullest first.
    One SCAN pass (on a Cluster, one per master), then pipelines for all of them."""
    if now is None:
        seconds, micros = client.time()
        now = float(seconds) + float(micros) / 1e6
    current = math.floor(now)
    keys: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    slots: list[str] = []
    for raw in client.scan_iter(match="ratelimit:{*", count=1000):
        key = _text(raw)
        parsed = _parse(key)
        if parsed is not None and parsed[2] > current - ACTIVE_SECONDS:
            keys[parsed[:2]].append((parsed[2], key))
        elif (parts := split(key)) is not None and parts[1] == CONCURRENCY:
            owner = parts_of(key)
            # A keyed limit's slots (``for_key``) are one customer's: not listed.
            if owner is not None and owner[1] is None:
                slots.append(owner[0])
    span = max(1, round(window))
    groups = [(name, kind, sorted(found)) for (name, kind), found in keys.items()]
    reads = [_reads(name, kind, found) for name, kind, found in groups]
    reads += [_slot_reads(name, now) for name in slots]
    replies = iter(pipelined(client, [call for calls in reads for call in calls]))
    answers = [[next(replies) for _ in calls] for calls in reads]
    rows = [
        _row(name, kind, found, answer, current, span, now)
        for (name, kind, found), answer in zip(groups, answers, strict=False)
    ]
    rows.sort(key=lambda row: (-(row.grants_per_sec or 0.0), row.name))
    held = [_slot_row(name, answer) for name, answer in zip(slots, answers[len(groups) :], strict=True)]
    held.sort(key=lambda row: (-(row.held or 0), row.name))
    return rows + held


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
        values = {_text(k): float(v) for k, v in fields.items()}
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
        shadow=shadow is not None and _text(shadow) == "1",
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


def _slot_row(name: str, answer: list[Any]) -> FleetRow:
    held, queued, most, mode = answer
    return FleetRow(
        name=name,
        kind=CONCURRENCY,
        shadow=False,
        grants_per_sec=None,
        refusals_per_sec=None,
        leased_per_sec=None,
        p99_wait=None,
        pauses=0,
        paused_for=None,
        breaker=breaker_mode(mode),
        idle=None,
        held=int(held),
        queued=int(queued),
        most=None if (stored := number(most)) is None else int(stored),
    )
