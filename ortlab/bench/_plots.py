"""Benchmark plots (matplotlib, imported on first use): one result, and the zoo."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from ortlab import _deps
from ortlab.bench import _format


def plot_result(result: Any, ax: Any = None) -> Any:
    """Bars of each backend's steady-state median, p10-p90 as error bars, labelled with
    the ratio to eager (a :class:`~ortlab.bench.BenchResult`'s ``plot``)."""
    plt = _deps.require("matplotlib.pyplot")
    frame = result.frame
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.4 * max(3, len(frame)) + 1.5, 3.2))
    else:
        fig = ax.figure
    names = list(frame["backend"])
    medians = [_format.nan_to(v, 0.0) for v in frame["median_ms"]]
    low = [max(0.0, m - _format.nan_to(p, m)) for m, p in zip(medians, frame["p10_ms"])]
    high = [max(0.0, _format.nan_to(p, m) - m) for m, p in zip(medians, frame["p90_ms"])]
    colors = [_format.backend_color(n) for n in names]
    bars = ax.bar(names, medians, yerr=[low, high], color=colors, capsize=3)
    for bar, top, ratio, error in zip(bars, high, frame["ratio_to_eager"], frame["error"]):
        label = "error" if error else (f"{ratio:.2f}× eager" if _format.finite(ratio) else "")
        ax.annotate(
            label,
            # above the p90 whisker, so that the label never sits on it
            (bar.get_x() + bar.get_width() / 2, bar.get_height() + top),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_ylabel("steady-state median (ms)")
    threads = result.settings.get("threads")
    ax.set_title(f"{result.name or 'benchmark'} ({threads} threads)")
    ax.margins(y=0.2)
    fig.tight_layout()
    return fig


def plot_zoo(results: Sequence[Any], path: str | os.PathLike[str] | None = None) -> Any:
    """Grouped bars: each backend's median relative to eager, per zoo model, and each
    backend's first call.

    Args:
        results: One :class:`~ortlab.bench.BenchResult` per model.
        path: Where to save the PNG; ``None`` only returns the figure.

    Returns:
        The matplotlib Figure.
    """
    if path is not None and "matplotlib.pyplot" not in sys.modules:
        _deps.require("matplotlib").use("Agg")  # headless when called from a terminal
    plt = _deps.require("matplotlib.pyplot")
    backends = list(dict.fromkeys(b for r in results for b in r.frame["backend"]))
    fig, (ax_rel, ax_first) = plt.subplots(
        1, 2, figsize=(max(8, 2.2 * len(results) + 4), 4), gridspec_kw={"width_ratios": [3, 2]}
    )
    width = 0.8 / max(1, len(backends))
    for i, b in enumerate(backends):
        rel, first = [], []
        for r in results:
            row = r.frame[r.frame["backend"] == b]
            # NaN (an error row) draws no bar; 0 would break the log scale.
            rel.append(float(row["ratio_to_eager"].iloc[0]) if len(row) else math.nan)
            first.append(_format.nan_to(row["first_call_s"].iloc[0], 0.0) if len(row) else 0.0)
        xs = [x + (i - (len(backends) - 1) / 2) * width for x in range(len(results))]
        ax_rel.bar(xs, rel, width, label=b, color=_format.backend_color(b))
        ax_first.bar(xs, first, width, label=b, color=_format.backend_color(b))
    names = [r.name for r in results]
    for ax in (ax_rel, ax_first):
        ax.set_xticks(range(len(results)), names, rotation=20, ha="right")
    ax_rel.axhline(1.0, color="black", linewidth=0.8)
    ax_rel.set_ylabel("median / eager median (log; lower is faster)")
    ax_rel.set_yscale("log")
    ax_rel.set_title("Steady state")
    ax_first.set_ylabel("seconds")
    ax_first.set_title("First call (compile + run)")
    ax_first.set_yscale("log")
    ax_first.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    threads = results[0].machine.get("torch_threads") if results else "?"
    fig.suptitle(f"ortlab benchmarks ({threads} threads)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig
