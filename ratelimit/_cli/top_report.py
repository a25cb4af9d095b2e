"""What ``ratelimit top`` draws: one screen of the fleet's limiters (``_stores/redis/fleet.py``)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from .._stores.records import FleetRow
from .jsonable import finite
from .printable import pad, printable

__all__ = ["top_json", "top_text"]

_HEADER = (
    f"{'NAME':<28} {'KIND':<22} {'GRANTS/S':>9} {'REFUSED/S':>9} {'LEASED/S':>9} {'P99 WAIT':>9} "
    f"{'PAUSES':>6} {'PAUSED':>8} {'IN FLIGHT':>9} {'QUEUED':>6} {'BREAKER':<9}"
)


def _wait(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "> 60 s"
    if value == 0:
        return "0"
    return f"<={value * 1000:g}ms" if value < 1 else f"<={value:g}s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _row(row: FleetRow) -> str:
    # Names come from whoever names a limiter (a tenant id): escaped, cut to the column.
    name = pad(row.name, 28)
    kind = row.kind
    if row.shadow:
        kind += " (shadow)"
    elif row.tenants is not None:
        kind += f" ({row.tenants} tenant{'' if row.tenants == 1 else 's'})"
    kind = pad(kind, 22)
    paused = "-" if row.paused_for is None else f"{row.paused_for:.1f}s"
    flight = "-" if row.held is None else f"{row.held}/{'?' if row.most is None else row.most}"
    queued = "-" if row.queued is None else str(row.queued)
    return (
        f"{name} {kind} {_rate(row.grants_per_sec):>9} {_rate(row.refusals_per_sec):>9} "
        f"{_rate(row.leased_per_sec):>9} {_wait(row.p99_wait):>9} {row.pauses:>6} {paused:>8} {flight:>9} "
        f"{queued:>6} {printable(row.breaker or '-'):<9}"
    )


def top_text(
    rows: Sequence[FleetRow], where: str, window: float, now: float | None = None, on: str = "on this Redis"
) -> str:
    """The screen: a title line, the column heads, a line per limiter (``on``: where
    the counts are, for the line saying there are none)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    title = (
        f"ratelimit top - {where} - {stamp} - {len(rows)} limiter{'s' if len(rows) != 1 else ''} active in the "
        f"last minute; rates over the last {window:g} s, pauses fed back over the minute"
    )
    lines = [printable(title), "", _HEADER, *(_row(row) for row in rows)]
    if any(row.shadow for row in rows):
        lines += ["", "(shadow): never enforced; its counts are what it would have done"]
    if any(row.held is not None for row in rows):
        lines += ["", "IN FLIGHT: a ConcurrencyLimit's slots held of its maximum; QUEUED: its callers waiting"]
    if any(row.tenants is not None for row in rows):
        lines += ["", "fair: a FairShare's budget, with its tenants paced ahead of now (its grants are not counted)"]
    if not rows:
        lines.append(f"(no limiter decided {on} in the last minute)")
    return "\n".join(lines)


def top_json(rows: Sequence[FleetRow], window: float) -> dict[str, Any]:
    """Stable keys: ``window_seconds`` and ``limiters``; a number without bound is the
    string ``"inf"`` (``jsonable.finite``)."""
    return {"window_seconds": window, "limiters": [finite(row.as_dict()) for row in rows]}
