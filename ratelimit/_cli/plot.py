"""``ratelimit bench --plot``: grants per second over the run, against the limits.

An adaptive run draws what the provider served and refused per second against its
hidden limit (a step where it drops) and the rate the limiter learned.

Needs matplotlib (the ``plot`` extra); imported only here, when a plot is asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from .bench import AdaptiveRun, BenchResult

__all__ = ["PLOT_MISSING", "can_plot", "plot"]

PLOT_MISSING = "--plot needs matplotlib: pip install 'ratelimit-fleet[plot]'"


def can_plot() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


@contextlib.contextmanager
def _axes(
    path: str, title: str, elapsed: float, ylabel: str, legend: Literal["lower right", "best"] = "lower right"
) -> Iterator[Any]:
    """A figure's axes, labelled and saved to ``path`` (PNG) once drawn on."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed, and none is wanted
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 4.5))
    try:
        yield axes
        axes.set_xlabel("seconds since the start")
        axes.set_ylabel(ylabel)
        axes.set_xlim(0, elapsed)
        axes.set_ylim(bottom=0)
        axes.set_title(title)
        axes.legend(loc=legend)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)


def _steps(bins: Sequence[float], width: float, elapsed: float) -> tuple[list[float], list[float]]:
    """A step per bin, its last one drawn to the end of the run."""
    edges = [i * width for i in range(len(bins))] + [elapsed]
    return edges, [*bins, bins[-1]] if bins else [0.0, 0.0]


def plot(result: BenchResult, path: str) -> None:
    """Draw ``result``'s timeline to ``path`` (PNG)."""
    if result.adaptive is not None:
        _plot_adaptive(result, result.adaptive, path)
        return
    width = result.timeline_width
    title = f"{result.limiter.describe()}: {result.grants} grants, {result.refused} 429s"
    with _axes(path, title, max(result.elapsed, width), "grants per second") as axes:
        axes.step(
            *_steps(result.timeline, width, result.elapsed),
            where="post",
            label=f"granted (per second, {width:g} s bins)",
        )
        axes.axhline(result.provider_rate, color="tab:red", linestyle="--", label="provider's limit")
        axes.axhline(result.configured_rate, color="tab:green", linestyle=":", label="configured rate")


def _plot_adaptive(result: BenchResult, a: AdaptiveRun, path: str) -> None:
    s, width, elapsed = a.stats, a.bin_seconds, max(result.elapsed, a.bin_seconds)
    title = f"adaptive, ceiling {a.ceiling:g}/s: {s.served} served, {s.refused} 429s"
    with _axes(path, title, elapsed, "requests per second", legend="best") as axes:
        axes.step(*_steps(a.served, width, elapsed), where="post", label=f"served ({width:g} s bins)")
        axes.step(*_steps(a.refused, width, elapsed), where="post", color="tab:orange", label="429s")
        if s.drop_at is None or s.new_limit is None:
            limit_x, limit_y = [0.0, elapsed], [s.limit, s.limit]
        else:
            limit_x, limit_y = [0.0, s.drop_at, elapsed], [s.limit, s.new_limit, s.new_limit]
        axes.step(limit_x, limit_y, where="post", color="tab:red", linestyle="--", label="hidden limit")
        if a.learned:
            times, rates = zip(*a.learned, strict=True)
            axes.plot(times, rates, color="tab:green", label="learned rate")
