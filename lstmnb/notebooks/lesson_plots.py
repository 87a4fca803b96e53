"""The figures of 04 and 05 (``lessons``' tables drawn): step time against batch, strong and weak scaling,
the all-reduce against message size. Every point is a median of repeats; flagged ones are drawn hollow."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

HOLLOW = "hollow marker, written rough: flagged (repeats disagree, too few, or the cores were busy)"


def _markers(ax, x, y, flags, color, label):
    """A median per point: filled, or hollow and written 'rough' beside it where its row is flagged."""
    flagged = flags.astype(str) != ""
    ax.plot(x, y, "-", color=color, lw=1, alpha=0.6)
    ax.plot(x[~flagged], y[~flagged], "o", color=color, label=label if (~flagged).any() else None)
    ax.plot(x[flagged], y[flagged], "o", mfc="white", color=color, label=f"{label} (rough)" if flagged.any() else None)
    for xi, yi in zip(x[flagged], y[flagged]):
        ax.annotate("rough", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)


def plot_step_times(table: pd.DataFrame, reference: pd.DataFrame | None = None, device: str = "this machine"):
    """Step time (left) and FLOP rate (right) against batch on this device; the reference H100's eager and
    graph steps beside them when given (labelled another machine's)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    b = pd.Series(table.index, index=table.index)
    _markers(ax1, b, table["step ms"], table["flag"], "C0", f"{device} (measured here)")
    _markers(ax2, b, table["GFLOP/s"], table["flag"], "C0", f"{device} (measured here)")
    if reference is not None and not reference.empty:  # (setting, CUDA graph, batch) rows, as lessons makes them
        for i, ((setting, graph), r) in enumerate(reference.groupby(level=[0, 1], sort=True)):
            r = r.droplevel([0, 1])
            name = f"H100 {'CUDA graph' if graph else 'eager'}, {setting} (reference, another machine)"
            for ax, col in ((ax1, "step ms"), (ax2, "GFLOP/s")):
                ax.plot(r.index, r[col], "s--", color=f"C{i + 2}", ms=5, lw=0.8, label=name)
    ax1.set(xscale="log", yscale="log", xlabel="batch (samples per step)", ylabel="ms per step",
            title="one training step against its batch")
    ax2.set(xscale="log", yscale="log", xlabel="batch (samples per step)", ylabel="GFLOP/s achieved",
            title="useful arithmetic per second")
    fig.tight_layout()
    handles, labels = ax1.get_legend_handles_labels()  # below the panels: clear of the data
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(0.01, 0.0), ncol=2,
               title=HOLLOW, title_fontsize=7)
    return fig


def plot_scaling(table: pd.DataFrame):
    """Epoch time per mode and ranks (left) and each step's compute and un-hidden communication (right)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    rows = table.reset_index()
    names = [f"{m}\n{n} rank{'s' if n > 1 else ''}\nbatch {int(g)}" for m, n, g in
             zip(rows["mode"], rows["ranks"], rows["global batch"])]
    colors = ["C0" if m == "strong" else "C1" for m in rows["mode"]]
    bars = ax1.bar(names, rows["epoch s"], color=colors)
    for bar, flag in zip(bars, rows["flag"]):
        if flag:
            bar.set_hatch("//")
            bar.set_alpha(0.6)
            ax1.annotate("rough", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                         va="bottom", fontsize=7)
    ax1.set(ylabel="s per epoch (median)", title="an epoch on 1 and on N ranks (hatched, rough: flagged)")
    ax2.bar(names, rows["compute ms"], color="C0", label="compute (under no_sync)")
    ax2.bar(names, rows["comm ms"].clip(lower=0).fillna(0), bottom=rows["compute ms"], color="C3",
            label="all-reduce not hidden (none on one rank)")
    ax2.set(ylabel="ms per step (median)", title="one step: compute and communication")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig


def plot_allreduce(table: pd.DataFrame):
    """All-reduce time and bus bandwidth against message size, the gradient size of one step marked."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    grad = table[table["gradients of one step"]]
    for ax, col, label in ((ax1, "time us", "median time"), (ax2, "busbw GB/s", "median bus bandwidth")):
        _markers(ax, table["bytes"], table[col], table["flag"], "C0", label)
        if not grad.empty:
            ax.plot(grad["bytes"], grad[col], "*", color="C3", ms=14, label="one step's gradients")
        ax.set(xscale="log", yscale="log", xlabel="message size (bytes)")
        ax.legend(fontsize=8)
    ax1.set(ylabel="µs per all-reduce", title="time per all-reduce")
    ax2.set(ylabel="GB/s", title="bus bandwidth")
    fig.tight_layout()
    return fig


def plot_amdahl(table: pd.DataFrame, fit: dict[str, float], rough: tuple[int, ...] = ()):
    """Amdahl's speedup against ranks (and with the all-reduce growing), the bound 1/s, the measured points
    (written 'rough' beside those of the rank counts in ``rough``: flagged rows)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    n = table.index
    ax.plot(n, n, ":", color="grey", label="ideal: N times faster")
    ax.plot(n, table["Amdahl"], "-", color="C0", label=f"Amdahl, s = {fit['serial share']:.2f}")
    ax.plot(n, table["comm growing as N - 1"], "--", color="C3", label="the all-reduce growing as N - 1")
    if fit["bound"] < float("inf"):
        ax.axhline(fit["bound"], color="C0", lw=0.8, alpha=0.5, label=f"bound 1/s = {fit['bound']:.1f}")
    got = table["measured"].dropna()
    ax.plot(got.index, got, "o", color="k", label="measured here (epoch time)")
    for n in got.index.intersection(list(rough)):
        ax.annotate("rough", (n, got[n]), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set(xscale="log", yscale="log", xlabel="ranks N", ylabel="speedup over one rank",
           title="Amdahl's law from this notebook's runs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
