"""The comparison across machines in pictures, each on one shared log axis for every device: training
seconds and samples/s (measured, reference and published together, the source shown by style and
legend), and the speedup over one stated reference.

Each chart has a data function (``seconds_chart``, ``samples_chart``; ``compare.speedups``) that says
whether there is anything to compare; a chart is drawn only from data that compares something, and
otherwise the data's ``why`` says what to run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .compare import PUBLISHED_PROBLEM_LABEL, Speedups
from .devices import order_devices
from .published import MEASURED, PUBLISHED, REFERENCE

# source by style: filled for the records (the user's blue, lstmnb's reference green), hollow for published
SOURCE_STYLE = {
    MEASURED: {"color": "C0", "filled": True, "hatch": None},
    REFERENCE: {"color": "C2", "filled": True, "hatch": "..."},
    PUBLISHED: {"color": "C1", "filled": False, "hatch": "//"},
}
EPOCH_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass
class ChartData:
    """The data a chart draws (one row per point), or empty with ``why`` saying what is missing."""

    data: pd.DataFrame
    why: str = ""

    @property
    def ok(self) -> bool:
        return not self.data.empty


def row_label(column: str, setting: str, problem: str) -> str:
    """The two-line label of one chart row: device column, then setting (and problem unless published)."""
    extra = "" if problem == PUBLISHED_PROBLEM_LABEL else f" [{problem}]"
    return f"{column}\n{setting}{extra}"


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.copy()
    out["label"] = [row_label(c, s, p) for c, s, p in zip(out["column"], out["setting"], out["problem"])]
    return out


def seconds_chart(rows: pd.DataFrame) -> ChartData:
    """Training seconds of every comparison row (``compare.comparison_rows``), one point per epochs count.

    Needs two device columns (from any source); rows keep the reading order of ``comparison_rows``.
    """
    if rows.empty:
        return ChartData(pd.DataFrame(), "no finished training runs to compare: run 03 "
                                          "(`lstmnb notebooks run --profile cpu`)")
    if rows["column"].nunique() < 2:
        return ChartData(pd.DataFrame(), f"only one device column ({rows['column'].iloc[0]}): run 04 on a GPU "
                                          "(e.g. `--profile colab-t4`), or show the published figures, to compare")
    data = _labelled(rows)[["label", "column", "setting", "problem", "source", "epochs", "seconds"]]
    return ChartData(data.reset_index(drop=True))


def samples_chart(rows: pd.DataFrame) -> ChartData:
    """Training samples/s per comparison row (median over its epochs counts), records only: the
    published sources give total seconds, not samples/s. Needs two device columns."""
    have = rows[rows["source"] != PUBLISHED].dropna(subset=["samples_per_s"]) if not rows.empty else rows
    if have.empty or have["column"].nunique() < 2:
        found = f" (only {have['column'].iloc[0]})" if not have.empty else ""
        return ChartData(pd.DataFrame(), f"samples/s needs runs on two devices in the records{found}; the published "
                                          "figures give total seconds only: run 03 and 04, or add the reference "
                                          "records (`-p reference_records true`)")
    labelled = _labelled(have)
    data = (labelled.groupby("label", sort=False)
            .agg(column=("column", "first"), setting=("setting", "first"), problem=("problem", "first"),
                 source=("source", "first"), samples_per_s=("samples_per_s", "median"))
            .reset_index())
    return ChartData(data)


def _source_legend(ax, sources, extra=()):
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", markersize=8, color=SOURCE_STYLE[s]["color"],
                      markerfacecolor=SOURCE_STYLE[s]["color"] if SOURCE_STYLE[s]["filled"] else "none",
                      label=s) for s in sources]
    return handles + list(extra)


def _rows_axes(n_rows: int, title: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.42 * n_rows))
    ax.set_title(title, loc="left", fontsize=11)
    ax.grid(axis="x", which="both", color="0.9", lw=0.6)
    ax.set_axisbelow(True)
    return fig, ax


def plot_seconds(chart: ChartData):
    """Training seconds (log axis) of every device column and setting: marker = epochs, colour and fill =
    source (measured here, reference, published)."""
    from matplotlib.lines import Line2D

    data = chart.data
    labels = list(dict.fromkeys(data["label"]))
    fig, ax = _rows_axes(len(labels), "training seconds (total, warm-up epoch included), every device on one axis")
    epochs = sorted(data["epochs"].unique())
    marker = {e: EPOCH_MARKERS[i % len(EPOCH_MARKERS)] for i, e in enumerate(epochs)}
    y = {label: i for i, label in enumerate(labels)}
    for label, g in data.groupby("label", sort=False):
        ax.plot(sorted(g["seconds"]), [y[label]] * len(g), color="0.8", lw=1, zorder=1)
    for (source, e), g in data.groupby(["source", "epochs"], sort=False):
        style = SOURCE_STYLE[source]
        ax.scatter(g["seconds"], g["label"].map(y), marker=marker[e], s=46, zorder=2, linewidths=1.3,
                   edgecolors=style["color"], facecolors=style["color"] if style["filled"] else "none")
    problems = data.drop_duplicates("label")["problem"].tolist()
    for i in range(1, len(problems)):
        if problems[i] != problems[i - 1]:  # a line between the problems
            ax.axhline(i - 0.5, color="0.5", lw=0.8, ls=":")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xscale("log")
    ax.set_xlabel("training seconds (log scale)")
    epoch_handles = [Line2D([], [], ls="", marker=marker[e], color="0.3", markerfacecolor="none",
                            label=f"{e} epoch{'s' if e != 1 else ''}") for e in epochs]
    sources = [s for s in (MEASURED, REFERENCE, PUBLISHED) if s in set(data["source"])]
    ax.legend(handles=_source_legend(ax, sources, epoch_handles), loc="upper left", bbox_to_anchor=(1.01, 1),
              fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def plot_samples_per_s(chart: ChartData):
    """Training samples/s (log axis) per device column and setting, coloured by source."""
    data = chart.data
    labels = list(data["label"])
    fig, ax = _rows_axes(len(labels), "training samples/s (steady epochs, median over runs); published: seconds only")
    left = data["samples_per_s"].min() / 2
    for source, g in data.groupby("source", sort=False):
        style = SOURCE_STYLE[source]
        ax.hlines(g.index, left, g["samples_per_s"], color=style["color"], lw=1, alpha=0.5)
        ax.scatter(g["samples_per_s"], g.index, s=46, color=style["color"], zorder=2)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xscale("log")
    ax.set_xlim(left=left)
    ax.set_xlabel("samples per second (log scale)")
    sources = [s for s in (MEASURED, REFERENCE) if s in set(data["source"])]
    ax.legend(handles=_source_legend(ax, sources), loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
              frameon=False)
    fig.tight_layout()
    return fig


def speedup_chart(sp: Speedups) -> ChartData:
    """The bars of the speedup chart: one per (setting, device column) with a value, in drawing order."""
    if sp.table.empty:
        return ChartData(pd.DataFrame(), sp.why)
    data = sp.table.rename_axis(index="setting", columns="column").stack().dropna().rename("speedup")
    return ChartData(data.reset_index())


def _column_source(column: str) -> str:
    if column.endswith(f" · {PUBLISHED}"):
        return PUBLISHED
    return REFERENCE if column.endswith(f" · {REFERENCE}") else MEASURED


def _bar_style(colour: str, source: str) -> dict:
    """Bars by source: measured solid, reference dotted over a lighter fill, published hollow and hatched."""
    if source == PUBLISHED:
        return {"facecolor": "white", "edgecolor": colour, "hatch": "//", "lw": 1.2}
    if source == REFERENCE:
        return {"facecolor": colour, "edgecolor": "white", "hatch": "...", "lw": 0.0, "alpha": 0.75}
    return {"facecolor": colour, "edgecolor": colour, "lw": 1.2}


def plot_speedup(sp: Speedups):
    """Horizontal bars, x faster than the stated reference (log axis): the like-for-like setting first,
    then the faster settings; colour = device, style = source (hatched: published, dotted: reference)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    data = speedup_chart(sp).data
    columns = list(sp.table.columns)
    colour = {d: f"C{i}" for i, d in enumerate(order_devices(sp.devices[c] for c in columns))}
    col_colour = {c: colour[sp.devices[c]] for c in columns}
    settings = list(sp.table.index)
    fig, ax = plt.subplots(figsize=(11, 1.4 + 0.24 * len(data) + 0.3 * len(settings)))
    y, ticks = 0.0, []
    for setting in settings:
        bars = data[data["setting"] == setting]
        start = y
        for _, bar in bars.iterrows():
            source = _column_source(bar["column"])
            ax.barh(y, bar["speedup"], height=0.8, **_bar_style(col_colour[bar["column"]], source))
            ax.text(bar["speedup"] * 1.04, y, f"{bar['speedup']:.3g}x", va="center", fontsize=7)
            y += 1
        ticks.append(((start + y - 1) / 2, setting))
        y += 0.8
    ax.set_yticks([t for t, _ in ticks], [s.replace(" · ", "\n") for _, s in ticks], fontsize=8)
    ax.set_ylim(y - 0.5, -0.7)
    ax.set_xscale("log")
    ax.set_xlim(min(0.7, data["speedup"].min() * 0.7), data["speedup"].max() * 2)  # room for the labels
    ax.axvline(1.0, color="0.3", lw=1, ls="--")
    ax.set_xlabel(f"x faster than the reference (log scale); reference = 1: {sp.reference}", fontsize=9)
    ax.set_title(f"speedup over one reference: {sp.reference_column}, {sp.reference_setting}, {sp.epochs} epochs",
                 loc="left", fontsize=11)
    handles = [Patch(**_bar_style(col_colour[c], _column_source(c)), label=c) for c in columns]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.grid(axis="x", which="both", color="0.9", lw=0.6)
    ax.set_axisbelow(True)
    fig.tight_layout()
    return fig
