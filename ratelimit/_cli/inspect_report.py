"""What ``ratelimit inspect`` and ``ratelimit set`` print: one block per limiter name."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._stores.records import Inspection, Override
from .jsonable import finite
from .printable import fit, printable

__all__ = ["inspect_json", "inspect_text", "keys_text", "override_text"]

#: The unit of each parameter (``records.PARAMETERS``) after its number: a rate in
#: tokens a second, a window in seconds, a capacity or a window's limit in tokens.
_UNITS = {"refill_per_sec": "/s", "leak_per_sec": "/s", "window": " s", "period": " s"}


def _number(value: float) -> str:
    if math.isinf(value):
        return "never" if value > 0 else "-inf"
    return f"{value:.6g}"


def _seconds(value: float) -> str:
    if math.isinf(value):
        return "never"
    if value >= 3600:
        return f"{value / 3600:.3g} h"
    if value >= 60:
        return f"{value / 60:.3g} min"
    return f"{value:.3g} s"


def _quantity(value: float, unit: str) -> str:
    """A number with its unit; one without bound (a bucket that never runs dry) is
    ``unlimited``."""
    if math.isinf(value) and value > 0:
        return "unlimited"
    return f"{_number(value)}{unit}"


def _params(params: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {_quantity(value, _UNITS.get(name, ' tokens'))}" for name, value in params.items())


def override_text(change: Override | None) -> str:
    """A change at run time in one line."""
    if change is None:
        return "none (the code's values)"
    parts = []
    if change.rate is not None:
        parts.append(f"rate {_quantity(change.rate, '/s')}")
    if change.burst is not None:
        parts.append(f"burst {_quantity(change.burst, ' tokens')}")
    ends = "until reset" if change.ttl is None else f"ends in {_seconds(change.ttl)}"
    return ", ".join(parts) + f"; {ends}"


def keys_text(reached: int, later: bool, after: float = 0.0) -> str:
    """What a change by name did to the name's keys (``for_key``), in one line:
    ``reached`` keys in use, and whether keys first used later follow it (``later``:
    the store reads the name's change for them; ``after``: within so many seconds)."""
    count = f"{reached} key{'' if reached == 1 else 's'} in use"
    if later:
        within = f" (within {_seconds(after)} in each process)" if after > 0 else ""
        return f"keys (for_key): {count} and any used later follow it{within}, but those with a change of their own"
    return (
        f"keys (for_key): written into the budget of {count}, but those with a change of their own; "
        f"a key first used later starts at the code's values (set again to reach it)"
    )


#: What each form of ``Inspection.forms`` holds, for its other state.
_FORMS = {
    "adaptive": "an adaptive limiter: its limit and its learned pace",
    "composite": "composite members",
    "priorities": "priority lanes",
}


#: The most columns a tenant's key takes in a line.
_TENANT_COLUMNS = 40


def _block(seen: Inspection) -> list[str]:
    # Names come from whoever names a limiter (a tenant id): escaped, as every text
    # read from Redis.
    name = printable(seen.name)
    if seen.key is not None:
        name += f" key {printable(seen.key)}"
    if not seen.known:
        whose = "this name" if seen.key is None else "this name and key"
        return [f"{name}: unknown (no limiter of {whose} decided in the last day; no change, no breaker stored)"]
    kinds = [] if seen.kind is None else [seen.kind + (", shadow: never enforced" if seen.shadow else "")]
    kinds += seen.forms
    lines = [name + (f"  ({printable(', '.join(kinds))})" if kinds else "")]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<12} {text}")

    if seen.code is not None:
        kept = f" (guard {_seconds(seen.slack)} kept back)" if seen.slack else ""
        row("code", _params(seen.code) + kept)
    row("changed", override_text(seen.override))
    if seen.effective is not None:
        row("in force", _params(seen.effective))
    if seen.available is not None and seen.wait_for_one is not None:
        row("now", f"{_number(seen.available)} tokens could go at once; one token waits {_seconds(seen.wait_for_one)}")
    if seen.promised_ahead is not None:
        promised = "none" if seen.promised_ahead <= 0 else f"up to {_seconds(seen.promised_ahead)} from now"
        row("promised", f"grants reserved ahead: {promised}")
    if seen.kind is not None:
        paused = seen.paused_for
        if paused is None or seen.now is None:
            row("pause", "none")
        else:
            until = time.strftime("%H:%M:%S", time.localtime(seen.now + paused))
            row("pause", f"fed back by the provider, until {until} ({_seconds(paused)} left)")
    if seen.breaker is not None:
        since = ""
        if seen.breaker_opened_at is not None and seen.now is not None:
            since = f", opened {_seconds(max(0.0, seen.now - seen.breaker_opened_at))} ago"
        row("breaker", printable(seen.breaker) + since)
    slots = seen.concurrency
    if slots is not None:
        most = "?" if slots.most is None else str(slots.most)
        row("slots", f"{slots.held} of {most} slots held, {slots.queued} queued")
    fair = seen.fair
    if fair is not None:
        count = f"{fair.active} tenant{'' if fair.active == 1 else 's'}"
        row("fair", f"a FairShare's {fair.kind} budget; {count} paced ahead of now")
        for tenant, ahead, weight in fair.ahead:
            # A tenant's key is whoever the caller says: escaped and cut to one line.
            weighs = "" if weight is None else f"weight {_number(weight)}, "
            row("tenant", f"{fit(tenant, _TENANT_COLUMNS)}: {weighs}paced {_seconds(max(0.0, ahead))} ahead")
    if seen.other_keys:
        what = [_FORMS[form] for form in seen.forms if form in _FORMS] or ["composite members or priority lanes"]
        row("other state", printable(", ".join(seen.other_keys)) + f" ({'; '.join(what)})")
    if any(form in _FORMS for form in seen.forms) or seen.concurrency is not None or seen.fair is not None:
        row("set", "refused: this name keeps the code's values (only a single limiter reads a change)")
    return lines


def inspect_text(seen: Sequence[Inspection]) -> str:
    """Every name's block, a blank line between them."""
    return "\n\n".join("\n".join(_block(each)) for each in seen)


def inspect_json(seen: Sequence[Inspection]) -> dict[str, Any]:
    """Stable keys: ``limiters`` (one object per name) and ``unknown`` (names). Every
    number is finite or the string ``"inf"`` (a rate that never limits, a wait that
    never ends), so that any JSON reader takes it (``json.dumps(..., allow_nan=False)``)."""
    return {
        "limiters": [finite(each.as_dict()) for each in seen if each.known],
        "unknown": [each.name if each.key is None else [each.name, each.key] for each in seen if not each.known],
    }
