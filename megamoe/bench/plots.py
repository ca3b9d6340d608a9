"""PNG plots of a record: sample distributions per case, achieved-vs-ceiling bars.

matplotlib is imported inside the functions (with the Agg backend), so
importing the harness never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_samples(record: Mapping[str, Any], path: Path) -> Path:
    """One panel per (case, cache): every sample (us) of both sides of every comparison."""
    plt = _pyplot()
    panels = record["cases"]
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax, case in zip(axes.flat, panels, strict=False):
        data, labels, colors = [], [], []
        for comp in case["comparisons"]:
            for side in (0, 1):
                data.append([s * 1e6 for r in comp["rounds"] for s in r["samples_s"][side]])
                tag = comp["kind"].upper() + ("-A" if side == 0 else "-B")
                labels.append(f"{comp['a' if side == 0 else 'b']}\n{tag} {comp['summary']['verdict']}")
                colors.append("tab:blue" if side == 0 else "tab:orange")
        ax.boxplot(data, showfliers=False)
        for i, (values, color) in enumerate(zip(data, colors, strict=True), start=1):
            n = len(values)
            xs = [i + 0.25 * ((j / max(n - 1, 1)) - 0.5) for j in range(n)]
            ax.scatter(xs, values, s=6, color=color, alpha=0.6, zorder=3)
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
        ax.set_title(f"{case['case']} ({case['cache']})", fontsize=9)
        ax.set_ylabel("time per call (us)")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(f"{record['benchmark']['name']}: every sample (rank maximum)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ceilings(record: Mapping[str, Any], path: Path) -> Path:
    """Horizontal bars: achieved / ceiling per (case, cache, arm); a line at 1.0."""
    plt = _pyplot()
    bars = [
        (f"{case['case']} {case['cache']} {a['arm']} [{a['ceiling']}]", a["ratio"])
        for case in record["cases"]
        for a in case["achieved"]
        if a["ratio"] is not None
    ]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * max(len(bars), 2) + 1.2))
    if bars:
        labels, ratios = zip(*bars, strict=True)
        ys = range(len(bars))
        ax.barh(ys, ratios, color="tab:green")
        ax.set_yticks(list(ys), labels, fontsize=7)
        for y, r in zip(ys, ratios, strict=True):
            ax.text(r, y, f" {r:.1%}", va="center", fontsize=7)
        ax.invert_yaxis()
    else:
        ax.text(0.5, 0.5, "no achieved-vs-ceiling ratios in this record", ha="center", transform=ax.transAxes)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("achieved / ceiling measured in the same run")
    names = ", ".join(
        f"{c['name']}={c['value']:.3g} {c['unit']}" for c in record["ceilings"] if c["available"]
    )
    ax.set_title(f"{record['benchmark']['name']}: {names}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
