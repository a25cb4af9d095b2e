"""``ratelimit bench``'s output: a :class:`~ratelimit._cli.bench.BenchResult` as text or JSON."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .bench import BenchResult
from .redact import redact_url

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
    c = r.config
    callers = f"{c.processes} process{'es' * (c.processes != 1)} x {c.threads} thread{'s' * (c.threads != 1)}"
    if c.tasks:
        callers += f" x {c.tasks} asyncio tasks"
    burst = f", burst {c.burst:g}" if c.burst is not None else ""
    lines = [
        f"ratelimit bench: {callers} ({c.callers} callers)" + (" -- INTERRUPTED, partial report" * r.interrupted),
        f"  limiter        {r.limiter.describe()}",
        f"                 sized from {c.limit}{burst}, headroom {c.headroom:.3g}, guard {c.guard:g} s",
        f"  store          {r.backend}",
        f"  target         {r.target}",
        "",
        f"granted          {r.grants} in {r.elapsed:.2f} s: {r.achieved_rate:.1f}/s"
        f" (configured {r.configured_rate:.4g}/s, provider {r.provider_rate:.4g}/s)",
        f"                 a perfect limiter allows {r.allowed:g} in {r.elapsed:.2f} s: {_ratio(r.grants, r.allowed)}",
        f"429s             {r.refused} of {r.grants} calls" + (f"; no answer: {r.no_answer}" if r.no_answer else ""),
        f"max in window    {r.most_in_window} in any {c.limit.window:g} s (provider limit {c.limit.count:g}{burst})",
        f"acquire wait     p50 {_ms(r.wait[0])}   p95 {_ms(r.wait[1])}   p99 {_ms(r.wait[2])}   max {_ms(r.wait[3])}",
    ]
    if r.round_trips is None:
        lines.append("round trips      none: in-process state")
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
