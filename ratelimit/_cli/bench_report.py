"""``ratelimit bench``'s output: a :class:`~ratelimit._cli.bench.BenchResult` as text or JSON.

An adaptive run (``--adaptive``) reports what :mod:`ratelimit._cli.bench_adaptive`
measures in place of the comparison with a sized limiter, each figure with its goal
marked PASS or FAIL; the costs (waits, round trips, CPU, fairness) are reported as
for any run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._redact import redact_url
from .bench import AdaptiveRun, BenchResult
from .bench_adaptive import (
    CLEAN,
    GOAL_BACK_UNDER,
    GOAL_REFUSED,
    GOAL_THROUGHPUT,
    HOLD,
    REACHED,
    SETTLE,
    SHORTEST,
    WIDTH,
    Stretch,
)

__all__ = ["bench_json", "bench_text", "sweep_text"]

_PARAMS = {
    "token-bucket": ("capacity", "refill_per_sec"),
    "leaky-bucket": ("capacity", "leak_per_sec"),
    "sliding-window": ("limit", "window_seconds"),
}


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def _ratio(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def bench_text(r: BenchResult) -> str:
    """The human-readable report."""
    if r.adaptive is not None:
        return _adaptive_text(r, r.adaptive)
    c = r.config
    burst = f", burst {c.burst:g}" if c.burst is not None else ""
    lines = [
        *_heading(r, f"sized from {c.limit}{burst}, headroom {c.headroom:.3g}, guard {c.guard:g} s"),
        f"granted          {r.grants} in {r.elapsed:.2f} s: {r.achieved_rate:.1f}/s"
        f" (configured {r.configured_rate:.4g}/s, provider {r.provider_rate:.4g}/s)",
        f"                 a perfect limiter allows {r.allowed:g} in {r.elapsed:.2f} s: {_ratio(r.grants, r.allowed)}",
        f"429s             {r.refused} of {r.grants} calls" + (f"; no answer: {r.no_answer}" if r.no_answer else ""),
        f"max in window    {r.most_in_window} in any {c.limit.window:g} s (provider limit {c.limit.count:g}{burst})",
        *_costs(r),
    ]
    return "\n".join(lines)


def _heading(r: BenchResult, about_limiter: str, command: str = "ratelimit bench") -> list[str]:
    c = r.config
    callers = f"{c.processes} process{'es' * (c.processes != 1)} x {c.threads} thread{'s' * (c.threads != 1)}"
    if c.tasks:
        callers += f" x {c.tasks} asyncio tasks"
    return [
        f"{command}: {callers} ({c.callers} callers)" + (" -- INTERRUPTED, partial report" * r.interrupted),
        f"  limiter        {r.limiter.describe()}",
        f"                 {about_limiter}",
        f"  store          {r.backend}",
        f"  target         {r.target}",
        "",
    ]


def _costs(r: BenchResult) -> list[str]:
    """What every run reports after its own figures: waits, round trips, CPU, fairness, errors."""
    lines = [
        f"acquire wait     p50 {_ms(r.wait[0])}   p95 {_ms(r.wait[1])}   p99 {_ms(r.wait[2])}   max {_ms(r.wait[3])}",
    ]
    if r.round_trips is None:
        where = "one transaction in the file per decision" if r.backend.startswith("SQLite") else "in-process state"
        lines.append(f"round trips      none: {where}")
    else:
        per = f"{r.round_trips / r.grants:.3f}" if r.grants else "-"
        per_acquire = f"{r.round_trips / r.acquires:.3f}" if r.acquires else "-"
        cut = r.acquires - r.grants
        lines.append(
            f"round trips      {per} per grant, {per_acquire} per acquire ({r.round_trips} script calls;"
            f" {r.grants} grants, {cut} other acquire{'s' * (cut != 1)})"
        )
    if r.overflows:
        lines.append(f"overflows        {r.overflows} acquires found the leaky bucket full (and asked again)")
    if r.grants:
        lines.append(f"CPU              {r.cpu / r.grants * 1e6:.0f} us per grant (worker processes, user + system)")
    shares = r.grants_per_caller
    if shares:
        lines.append(
            f"fairness         {min(shares)} to {max(shares)} grants per caller, Jain's index {r.fairness:.3f}"
        )
    for error in r.errors:
        lines.append(f"error            {error}")
    return lines


def _mark(ok: bool | None) -> str:
    return "PASS" if ok else "FAIL"


def _stretch_text(s: Stretch) -> str:
    throughput, refused = s.throughput >= GOAL_THROUGHPUT, s.refused_share <= GOAL_REFUSED
    return (
        f"{s.start:.2f} to {s.end:.2f} s: {s.throughput:.1%} of {s.limit:g}/s [{_mark(throughput)}],"
        f" 429s {s.refused_share:.1%} of {s.served + s.refused} [{_mark(refused)}]"
    )


def _adaptive_text(r: BenchResult, a: AdaptiveRun) -> str:
    s = a.stats
    ceiling = f"ceiling {a.ceiling:g}/s ({a.ceiling / s.limit:.3g}x the hidden limit), floor {a.floor:g}/s"
    lines = [
        *_heading(r, ceiling + "; feeds every answer back", "ratelimit bench --adaptive"),
        f"hidden limit     {s.limit:g}/s, burst {a.burst:g}"
        + ("" if s.drop_at is None else f"; {s.new_limit:g}/s from {s.drop_at:.2f} s"),
        f"reached {REACHED:.0%}      "
        + (
            "never"
            if s.reached is None
            else f"at {s.reached:.2f} s (the end of the first {WIDTH:g} s with >= {REACHED * s.limit:g} served)"
        ),
    ]
    before = [x for x in s.stretches if x.name != "after the drop"]
    after = [x for x in s.stretches if x.name == "after the drop"]
    first = "steady" if s.drop_at is None else "before drop"
    short = f"none (shorter than {SHORTEST:g} s: run longer)"
    if before:
        lines.append(f"{first:<17}" + _stretch_text(before[0]))
    else:
        lines.append(f"{first:<17}" + (short if s.reached is not None else "none (the limit was never reached)"))
    if s.drop_at is not None:
        if s.back_under is None:
            back = f"not by the end of the run [{_mark(False)}]"
        else:
            back = f"within {s.back_under:g} s of the drop [{_mark(s.back_under_ok)}]"
        lines.append(
            f"back under       {back} (the first {HOLD * WIDTH:g} s in a row with <= {CLEAN:.0%} 429s"
            f" in each {WIDTH:g} s)"
        )
        if after:
            lines.append("after drop       " + _stretch_text(after[0]))
        else:
            lines.append("after drop       " + (short if s.back_under is not None else "none (never back under)"))
    lines.append(
        f"429s in all      {s.refused} of {s.served + s.refused} requests ({_ratio(s.refused, s.served + s.refused)})"
        + (f"; no answer: {r.no_answer}" if r.no_answer else "")
    )
    goals: list[tuple[bool | None, str]] = [
        (s.throughput_ok, f"steady throughput >= {GOAL_THROUGHPUT:.0%} of the hidden limit"),
        (s.refused_ok, f"steady 429s <= {GOAL_REFUSED:.0%} of requests"),
    ]
    if s.drop_at is not None:
        goals.append((s.back_under_ok, f"back under a lowered limit within {GOAL_BACK_UNDER:g} s"))
    for i, (ok, text) in enumerate(goals):
        lines.append(("goals" if i == 0 else "").ljust(17) + f"{_mark(ok)}  {text}")
    lines.append(
        f"                 (steady: from {SETTLE:g} s after reaching {REACHED:.0%} to the drop,"
        f" and from {SETTLE:g} s after back under to the end)"
    )
    if a.learned:
        rates = [rate for _, rate in a.learned]
        lines.append(f"learned rate     {rates[-1]:.1f}/s at the end ({min(rates):.1f} to {max(rates):.1f}/s)")
    lines.extend(_costs(r))
    return "\n".join(lines)


def _number(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value


def bench_json(r: BenchResult) -> dict[str, Any]:
    """The machine-readable report; its keys are stable."""
    c = r.config
    names = _PARAMS[r.limiter.algorithm]
    shares = r.grants_per_caller
    return {
        "config": {
            "algorithm": c.algorithm,
            "limit": c.limit.count,
            "window_seconds": c.limit.window,
            "burst": c.burst,
            "headroom": c.headroom,
            "guard_seconds": c.guard,
            "strict_provider": c.strict,
            "processes": c.processes,
            "threads": c.threads,
            "asyncio_tasks": c.tasks,
            "callers": c.callers,
            "seconds": c.seconds,
            "calls": c.calls,
            "redis": None if c.redis is None else redact_url(c.redis),
            "cluster": c.cluster,
            "target": None if c.target is None else redact_url(c.target),
        },
        "limiter": {
            "algorithm": r.limiter.algorithm,
            names[0]: r.limiter.first,
            names[1]: r.limiter.second,
            "guard": r.limiter.guard,
        },
        "backend": r.backend,
        "target": r.target,
        "interrupted": r.interrupted,
        "elapsed_seconds": r.elapsed,
        "grants": r.grants,
        "allowed": r.allowed,
        "achieved_per_sec": r.achieved_rate,
        "configured_per_sec": r.configured_rate,
        "provider_per_sec": r.provider_rate,
        "responses": {str(status): count for status, count in r.statuses.items()},
        "refused_429": r.refused,
        "no_answer": r.no_answer,
        "max_in_provider_window": r.most_in_window,
        "wait_seconds": dict(zip(("p50", "p95", "p99", "max"), (_number(w) for w in r.wait), strict=True)),
        "round_trips": r.round_trips,
        "round_trips_per_grant": None if r.round_trips is None or not r.grants else r.round_trips / r.grants,
        "acquires": r.acquires,
        "overflows": r.overflows,
        "cpu_seconds": r.cpu,
        "cpu_per_grant_seconds": r.cpu / r.grants if r.grants else None,
        "fairness": {
            "min_grants": min(shares, default=0),
            "max_grants": max(shares, default=0),
            "jain": r.fairness,
        },
        "timeline": {"bin_seconds": r.timeline_width, "per_second": list(r.timeline)},
        "errors": list(r.errors),
    } | ({} if r.adaptive is None else {"adaptive": _adaptive_json(r.adaptive)})


def _stretch_json(s: Stretch) -> dict[str, Any]:
    return {
        "name": s.name,
        "start_seconds": s.start,
        "end_seconds": s.end,
        "limit_per_sec": s.limit,
        "served": s.served,
        "refused_429": s.refused,
        "throughput_share": s.throughput,
        "refused_share": s.refused_share,
    }


def _adaptive_json(a: AdaptiveRun) -> dict[str, Any]:
    s = a.stats
    return {
        "hidden_limit_per_sec": s.limit,
        "hidden_burst": a.burst,
        "ceiling_per_sec": a.ceiling,
        "floor_per_sec": a.floor,
        "drop_at_seconds": s.drop_at,
        "drop_to_per_sec": s.new_limit,
        "reached_90_seconds": s.reached,
        "back_under_seconds": s.back_under,
        "stretches": [_stretch_json(x) for x in s.stretches],
        "served": s.served,
        "refused_429": s.refused,
        "refused_share": s.refused_share,
        "goals": {
            "steady_throughput": s.throughput_ok,
            "steady_refused": s.refused_ok,
            "back_under": s.back_under_ok,
        },
        "definitions": {
            "bucket_seconds": WIDTH,
            "reached_share": REACHED,
            "settle_seconds": SETTLE,
            "shortest_stretch_seconds": SHORTEST,
            "clean_share": CLEAN,
            "hold_buckets": HOLD,
            "goal_throughput_share": GOAL_THROUGHPUT,
            "goal_refused_share": GOAL_REFUSED,
            "goal_back_under_seconds": GOAL_BACK_UNDER,
        },
        "timeline": {
            "bin_seconds": a.bin_seconds,
            "served_per_sec": list(a.served),
            "refused_per_sec": list(a.refused),
        },
        "learned": [{"seconds": t, "per_sec": rate} for t, rate in a.learned],
    }


def best(results: Sequence[BenchResult]) -> int | None:
    """The index of the highest throughput with no 429 (and every call answered)."""
    clean = [i for i, r in enumerate(results) if r.refused == 0 and r.no_answer == 0 and not r.errors]
    return max(clean, key=lambda i: results[i].grants, default=None)


def sweep_text(results: Sequence[BenchResult]) -> str:
    """The sweep's table, the best setting marked."""
    chosen = best(results)
    names = _PARAMS[results[0].limiter.algorithm] if results else ("", "")
    lines = [
        f"  {'headroom':>8}  {'guard':>8}  {names[0]:>14}  {names[1]:>14}  {'granted':>7}  {'rate/s':>7}  {'429s':>5}"
        f"  {'max/window':>10}  {'p99 wait':>9}",
    ]
    for i, r in enumerate(results):
        mark = "*" if i == chosen else " "
        lines.append(
            f"{mark} {r.config.headroom:>8.1%}  {_ms(r.config.guard):>8}  {r.limiter.first:>14.6g}"
            f"  {r.limiter.second:>14.6g}  {r.grants:>7}  {r.achieved_rate:>7.1f}  {r.refused:>5}"
            f"  {r.most_in_window:>10}  {_ms(r.wait[2]):>9}"
        )
    if chosen is None:
        lines.append("no setting ran without 429s: more headroom, a larger guard, or a smaller capacity")
    else:
        r = results[chosen]
        lines.append(f"* best: the highest throughput with zero 429s: {r.limiter.describe()}")
    return "\n".join(lines)
