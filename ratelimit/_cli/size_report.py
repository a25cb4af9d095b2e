"""``ratelimit size``'s output: a :class:`~ratelimit._cli.sizing.Sizing` as text or JSON."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from .sizing import Sizing

__all__ = ["size_json", "size_text"]


def _n(value: float) -> str:
    return f"{value:.6g}"


def _rounded(value: float, rounding: str) -> str:
    """``value`` to six significant digits, rounded one way: a rate copied from a
    constructor line must not exceed the one computed, nor a window fall short of it."""
    if not math.isfinite(value) or value == 0:
        return _n(value)
    exact = Decimal(repr(value))
    return _n(float(exact.quantize(Decimal(1).scaleb(exact.adjusted() - 5), rounding=rounding)))


def _most(value: float) -> str:
    """A rate, a capacity or a limit to copy: never above the one computed."""
    return _rounded(value, ROUND_FLOOR)


def _least(value: float) -> str:
    """A window or a guard to copy: never below the one computed."""
    return _rounded(value, ROUND_CEILING)


def _seconds(value: float) -> str:
    if math.isinf(value):
        return "unbounded"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s"


def size_text(s: Sizing) -> str:
    """The human-readable report."""
    limit, bucket, leaky, window, static = s.limit, s.token_bucket, s.leaky_bucket, s.sliding_window, s.static
    burst = "no documented burst" if s.burst is None else f"burst {_n(s.burst)}"
    where = f"{s.workers} worker{'s' * (s.workers != 1)}" + (f" on {s.boxes} boxes" if s.boxes > 1 else "")
    rate = bucket.refill_per_sec
    lines = [
        f"provider        {limit} ({_n(limit.per_second)}/s), {burst}; {where}",
        f"headroom        {s.headroom:.3g} ({s.headroom * 100:.3g}% of the rate left unused): {_n(rate)}/s",
        f"guard           {_seconds(s.guard)}: requests may leave up to that late after their grant"
        " (send jitter) and still keep the provider's limit",
        "",
        "shared limiter (one budget for every worker, e.g. through Redis)",
        f"  token bucket    TokenBucket(capacity={_most(bucket.capacity)}, refill_per_sec={_most(rate)})",
    ]
    if bucket.rate_cut:
        lines.append(
            f"                  refill cut below the headroom's so that one token and the guard fit the provider's"
            f" {'burst' if s.burst is not None else 'window'}"
        )
    elif bucket.capacity_rule == "burst":
        lines.append(
            f"                  capacity: the provider's burst less the headroom or the guard's"
            f" {_n(bucket.guard_tokens)} tokens (refill x guard), whichever is more"
        )
    elif bucket.capacity_rule == "window":
        lines.append(
            "                  capacity: limit - refill x (window + guard), less than the burst allows:"
            " a provider may count its limit in any window as well"
        )
    else:
        lines.append(
            "                  capacity: no burst documented, so limit - refill x (window + guard)"
            f" = {_n(bucket.capacity)}: the headroom pays for the burst and the guard"
        )
    lines += [
        f"                  at most {_n(bucket.most_in_window)} requests in any {_n(limit.window)} s"
        f" (the provider allows {_n(limit.count)}), sends up to {_seconds(s.guard)} late included",
        f"  leaky bucket    LeakyBucket(capacity={_most(leaky.capacity)}, leak_per_sec={_most(leaky.leak_per_sec)})",
        "                  room for one request per worker and the one leaking;"
        f" longest wait {_seconds(leaky.longest_wait)}; never bursts",
    ]
    if leaky.rate_cut:
        lines.append(f"                  leak cut below the headroom's rate: the guard's {_seconds(s.guard)} must fit")
    lines.append(
        f"  sliding window  SlidingWindow(limit={_most(window.limit)}, window_seconds={_least(window.window_seconds)}"
        f", guard={_least(window.guard)})"
    )
    if s.burst is not None:
        lines.append(
            f"                  bursts up to {_n(window.limit)}, sustained {_n(window.per_second)}/s"
            " (the guard widens each window: it costs rate, not burst)"
        )
    else:
        lines.append(
            "                  the provider's window, less the headroom (admits the whole limit at once);"
            " each grant counts for window + guard"
        )
    lines += [
        "",
        f"static split (each of {s.workers} workers limited on its own, for comparison)",
        f"  per worker      TokenBucket(capacity={_most(static.capacity)},"
        f" refill_per_sec={_most(static.refill_per_sec)})",
    ]
    if static.capacity < 1:
        lines.append(
            f"                  a bucket must hold one whole request: capacity {_n(static.usable_capacity)},"
            f" so all together they burst {_n(static.total_burst)} (shared: {_n(bucket.capacity)}"
            + ("" if s.burst is None else f"; the provider allows {_n(s.burst)}")
            + ")"
        )
    if s.boxes > 1:
        lines.append(f"  per box         refill_per_sec={_n(static.per_box_refill)} on each of {s.boxes} boxes")
    lines.append("  busy workers    shared      static      stranded by the split")
    for row in static.busy:
        stranded = 1 - row.static_per_sec / row.shared_per_sec
        lines.append(
            f"  {row.busy:>12}    {_n(row.shared_per_sec):>8}/s  {_n(row.static_per_sec):>8}/s  {stranded:>6.0%}"
        )
    if s.waits is not None:
        w = s.waits
        lines += ["", f"expected wait per call at {_n(w.demand_per_sec)}/s ({w.utilisation:.0%} of {_n(rate)}/s)"]
        if not w.bounded:
            lines += [
                "  demand is at or above the rate: the wait grows without bound; the backlog gains",
                f"  {_n(w.backlog_growth)} requests a second, and a call t seconds in waits about"
                f" t x {_n(w.utilisation - 1)}",
            ]
        else:
            lines += [
                f"  token bucket    {_seconds(w.token_bucket)}",
                f"  leaky bucket    {_seconds(w.leaky_bucket)}",
                f"  static split    {_seconds(w.static_split)}   (demand spread evenly; uneven is worse)",
                "  (Poisson arrivals: M/D/1 wait, less what the burst absorbs; see `ratelimit size --help`)",
            ]
    return "\n".join(lines)


def _finite(value: float) -> float | None:
    # JSON has no infinity: an unbounded wait is null, and "bounded" says why.
    return None if math.isinf(value) else value


def size_json(s: Sizing) -> dict[str, Any]:
    """The machine-readable report; its keys are stable."""
    bucket, leaky, window, static = s.token_bucket, s.leaky_bucket, s.sliding_window, s.static
    result: dict[str, Any] = {
        "provider": {
            "limit": s.limit.count,
            "window_seconds": s.limit.window,
            "per_second": s.limit.per_second,
            "burst": s.burst,
        },
        "workers": s.workers,
        "boxes": s.boxes,
        "headroom": s.headroom,
        "guard_seconds": s.guard,
        "token_bucket": {
            "capacity": bucket.capacity,
            "refill_per_sec": bucket.refill_per_sec,
            "capacity_rule": bucket.capacity_rule,
            "most_in_provider_window": bucket.most_in_window,
            "guard_tokens": bucket.guard_tokens,
            "rate_cut": bucket.rate_cut,
        },
        "leaky_bucket": {
            "capacity": leaky.capacity,
            "leak_per_sec": leaky.leak_per_sec,
            "longest_wait_seconds": leaky.longest_wait,
            "most_in_provider_window": leaky.most_in_window,
            "rate_cut": leaky.rate_cut,
        },
        "sliding_window": {
            "limit": window.limit,
            "window_seconds": window.window_seconds,
            "guard": window.guard,
            "per_second": window.per_second,
        },
        "static_split": {
            "per_worker": {"capacity": static.capacity, "refill_per_sec": static.refill_per_sec},
            "usable_capacity": static.usable_capacity,
            "total_burst": static.total_burst,
            "per_box_refill_per_sec": static.per_box_refill,
            "busy": [
                {"workers": row.busy, "shared_per_sec": row.shared_per_sec, "static_per_sec": row.static_per_sec}
                for row in static.busy
            ],
        },
        "demand": None,
    }
    if s.waits is not None:
        w = s.waits
        result["demand"] = {
            "per_second": w.demand_per_sec,
            "utilisation": w.utilisation,
            "bounded": w.bounded,
            "backlog_growth_per_sec": w.backlog_growth,
            "wait_seconds": {
                "token_bucket": _finite(w.token_bucket),
                "leaky_bucket": _finite(w.leaky_bucket),
                "static_split": _finite(w.static_split),
            },
        }
    return result
