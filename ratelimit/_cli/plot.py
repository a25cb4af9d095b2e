"""``ratelimit bench --plot``: grants per second over the run, against the limits.

Needs matplotlib (the ``plot`` extra); imported only here, when a plot is asked for.
"""

from __future__ import annotations

import importlib.util

from .bench import BenchResult

__all__ = ["PLOT_MISSING", "can_plot", "plot"]

PLOT_MISSING = "--plot needs matplotlib: pip install 'ratelimit[plot]'"


def can_plot() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def plot(result: BenchResult, path: str) -> None:
    """Draw ``result``'s timeline to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed, and none is wanted
    import matplotlib.pyplot as plt

    width = result.timeline_width
    # A step per bin, its last one drawn to the end of the run.
    edges = [i * width for i in range(len(result.timeline))] + [result.elapsed]
    rates = [*result.timeline, result.timeline[-1]] if result.timeline else [0.0, 0.0]
    figure, axes = plt.subplots(figsize=(9, 4.5))
    try:
        axes.step(edges, rates, where="post", label=f"granted (per second, {width:g} s bins)")
        axes.axhline(result.provider_rate, color="tab:red", linestyle="--", label="provider's limit")
        axes.axhline(result.configured_rate, color="tab:green", linestyle=":", label="configured rate")
        axes.set_xlabel("seconds since the start")
        axes.set_ylabel("grants per second")
        axes.set_xlim(0, max(result.elapsed, width))
        axes.set_ylim(bottom=0)
        axes.set_title(f"{result.limiter.describe()}: {result.grants} grants, {result.refused} 429s")
        axes.legend(loc="lower right")
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)
