"""The report's figures, in one home. What every chart shares, so a mark means one thing on the whole page (the
style of each source: measured here, reference records, published; labelled groups of rows; log axes with plain
ticks; legends outside the data); the comparison across machines in pictures (training seconds and samples/s of
every device column and setting on one shared log axis, grouped by problem; each GPU over a CPU, bars from 1,
every group saying over which CPU); and the per-source plots (epochs x devices, loss curves, convergence, cost).

Each comparison chart has a data function (``seconds_chart``, ``samples_chart``, ``speedup_chart``) that says
whether there is anything to compare; a chart is drawn only from data that compares something, and otherwise
the data's ``why`` says what to run. ``notes`` are the notes of the devices the chart shows, to print under it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from . import labels as num
from .compare import FASTEST, comparison_epochs, own_cpu_speedups
from .labels import PUBLISHED_PROBLEM_LABEL
from .published import MEASURED, NOTE_MARK, PUBLISHED, REFERENCE, SOURCE_WORDS, device_notes, over_which_cpu
from .scaling import convergence_table

# --- what every chart shares: one style per source, row groups, plain log ticks -----------------------------

# one marker meaning per report: the source of a figure (never its epochs or anything else)
SOURCE_STYLE = {
    MEASURED: {"color": "C0", "marker": "o", "filled": True, "label": "measured here"},
    REFERENCE: {"color": "C2", "marker": "s", "filled": True, "label": "reference records (lstmnb, shipped)"},
    PUBLISHED: {"color": "C1", "marker": "D", "filled": False, "label": "published (the study)"},
}


def marker_kwargs(source: str, size: float = 46) -> dict:
    """``ax.scatter`` keywords of a source's marker."""
    style = SOURCE_STYLE[source]
    return {"marker": style["marker"], "s": size, "linewidths": 1.4, "edgecolors": style["color"],
            "facecolors": style["color"] if style["filled"] else "white", "zorder": 3}


def source_handles(sources: Sequence[str]) -> list:
    """Legend entries for the sources shown, in the report's order."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], ls="", marker=SOURCE_STYLE[s]["marker"], markersize=7, markeredgewidth=1.4,
                   color=SOURCE_STYLE[s]["color"],
                   markerfacecolor=SOURCE_STYLE[s]["color"] if SOURCE_STYLE[s]["filled"] else "white",
                   label=SOURCE_STYLE[s]["label"]) for s in (MEASURED, REFERENCE, PUBLISHED) if s in set(sources)]


def row_positions(groups: Sequence[str]) -> tuple[list[float], list[tuple[float, str]], float]:
    """y of each row (in the given order) with a header line before each new group: (row ys, [(header y,
    group)], total height in rows)."""
    ys, headers, y, last = [], [], 0.0, object()
    for group in groups:
        if group != last:
            headers.append((y, group))
            y += 1.0
            last = group
        ys.append(y)
        y += 1.0
    return ys, headers, y


def draw_groups(ax, headers: list[tuple[float, str]], total: float) -> None:
    """Each group's header, bold at the left of the data area on a band of its own, and the y limits."""
    for i, (y, text) in enumerate(headers):
        ax.axhspan(y - 0.5, y + 0.5, color="0.95", zorder=0, lw=0)
        if i:
            ax.axhline(y - 0.5, color="0.6", lw=0.8, zorder=1)
        ax.text(0.004, y, text, transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=8.5,
                fontweight="bold", color="0.2", zorder=4)
    ax.set_ylim(total - 0.5, -0.5)


def plain_log_x(ax, low: float, high: float) -> None:
    """A log x axis from ``low`` to ``high`` whose ticks read as plain numbers (0.5, 1, 2, 5, 10, ...)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_xlim(low, high)
    decades = math.log10(high / low)
    subs = (1.0, 2.0, 5.0) if decades <= 4 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plain_number(value: float) -> str:
    """A tick label without exponents: 0.05, 2, 500, 20k, 1.5M."""
    for div, unit in ((1e6, "M"), (1e4, "k")):
        if value >= div:
            return f"{value / (div if unit == 'M' else 1e3):g}{unit}"
    return f"{value:g}"


def plain_log_y(ax) -> None:
    """Plain tick labels on a log y axis (0.5, 1, 2 instead of 5x10^-1)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def legend_above(ax, handles: list, ncol: int | None = None) -> None:
    """A legend in one row above the axes, clear of the data."""
    if handles:
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=ncol or len(handles),
                  fontsize=8, frameon=False, borderaxespad=0.2, handletextpad=0.3, columnspacing=1.2)


def value_span(values) -> tuple[float, float]:
    """x limits of a log axis that leave room for labels right of the largest value."""
    values = [float(v) for v in values if v == v and v > 0]
    low, high = min(values), max(values)
    return low / 1.8, high * 3.2

# --- the comparison across machines: seconds, samples/s, each GPU over a CPU --------------------------------

@dataclass
class ChartData:
    """The data a chart draws (one row per point or bar), or empty with ``why`` saying what is missing;
    ``notes`` go under the chart."""

    data: pd.DataFrame
    why: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.data.empty


def _notes(data: pd.DataFrame, published: dict | None) -> list[str]:
    shown = set(data.loc[data["source"] == PUBLISHED, "device"]) if "device" in data else set()
    return list(device_notes(published, shown).values()) if shown and published is not None else []


def _marked(device: str, column: str, notes: list[str], source: str) -> str:
    """``column`` with the note mark where a note applies: the notes are on published figures, so a device
    measured here or in the reference records is never marked (a measured CPU is not the study's CPU†)."""
    noted = source == PUBLISHED and any(n.startswith(f"{NOTE_MARK} {device} ") for n in notes)
    return column + (NOTE_MARK if noted else "")


def _problem_group(problem: str) -> str:
    return "published problem" if problem == PUBLISHED_PROBLEM_LABEL else f"problem: {problem}"


def seconds_chart(rows: pd.DataFrame, published: dict | None = None) -> ChartData:
    """Training seconds of every comparison row (``repeats.comparison_rows``), one point per epochs count,
    rows grouped by problem. Needs two device columns (from any source)."""
    if rows.empty:
        return ChartData(pd.DataFrame(), "no finished training runs to compare: run 03 "
                                          "(`lstmnb notebooks run --profile cpu`)")
    if rows["column"].nunique() < 2:
        return ChartData(pd.DataFrame(), f"only one device column ({rows['column'].iloc[0]}): run 04 on a GPU "
                                          "(e.g. `--profile colab-t4`), or show the published figures, to compare")
    data = rows[["column", "device", "setting", "problem", "source", "epochs", "seconds"]].copy()
    data["group"] = data["problem"].map(_problem_group)
    notes = _notes(data, published)
    data["label"] = [f"{_marked(d, c, notes, src)}\n{s}"
                     for d, c, s, src in zip(data["device"], data["column"], data["setting"], data["source"])]
    return ChartData(data.reset_index(drop=True), notes=notes)


def samples_chart(rows: pd.DataFrame) -> ChartData:
    """Training samples/s per device column, setting and problem, from the rows with the most epochs
    (the same figure as that row's everywhere), records only: the published figures give total seconds,
    not samples/s. Rows grouped by problem; needs two device columns."""
    have = rows[rows["source"] != PUBLISHED].dropna(subset=["samples_per_s"]) if not rows.empty else rows
    if have.empty or have["column"].nunique() < 2:
        found = f" (only {have['column'].iloc[0]})" if not have.empty else ""
        return ChartData(pd.DataFrame(), f"samples/s needs runs on two devices in the records{found}; the published "
                                          "figures give total seconds only: run 03 and 04, or add the reference "
                                          "records (`-p reference_records true`)")
    longest = have.loc[have.groupby(["column", "setting", "problem"], sort=False)["epochs"].idxmax()]
    data = longest[["column", "device", "setting", "problem", "source", "epochs", "samples_per_s"]].copy()
    data["group"] = data["problem"].map(_problem_group)
    data["label"] = [f"{c}\n{s}" for c, s in zip(data["column"], data["setting"])]
    return ChartData(data.reset_index(drop=True))


def speedup_chart(rows: pd.DataFrame, published: dict | None = None) -> ChartData:
    """Each GPU over a CPU (``repeats.own_cpu_speedups``: its own machine's; a published GPU's, the
    study's CPU run) at the same problem and epochs, per setting both ran and fastest against fastest:
    the published problem at its comparison epochs, other problems at theirs. A ratio over a CPU that is
    not the GPU's own machine's names that CPU in its label."""
    if rows.empty:
        return ChartData(pd.DataFrame(), "no finished training runs: run 03 (`lstmnb notebooks run --profile cpu`)")
    parts = [own_cpu_speedups(rows, p, comparison_epochs(rows, p)) for p in dict.fromkeys(rows["problem"])]
    data = pd.concat([p for p in parts if not p.empty], ignore_index=True) if any(not p.empty for p in parts) else None
    if data is None:
        return ChartData(pd.DataFrame(), "no GPU and CPU runs of one machine at the same problem and epochs: run 03 "
                                          "and 04 on the same machine (e.g. `lstmnb notebooks run --profile colab-t4 "
                                          "--only 03,04`)")
    notes = _notes(data, published)
    problem = data["problem"].map(lambda p: "" if p == PUBLISHED_PROBLEM_LABEL else f", {p}")
    data["group"] = [f"{SOURCE_WORDS[s]} · {m}{p}, {e} epochs: over {over_which_cpu(same, s)}" for s, m, p, e, same in
                     zip(data["source"], data["machine"], problem, data["epochs"], data["same_machine"])]
    labels = []
    for _, r in data.iterrows():
        who = _marked(r["device"], r["device"], notes, r["source"])
        what = (f"fastest of each: {r['fastest_setting']}\nCPU: {r['cpu_setting']}" if r["setting"] == FASTEST
                else r["setting"])
        over = "" if r["same_machine"] or r["source"] == PUBLISHED else f"\nover {r['cpu_machine']}"
        labels.append(f"{who}: {what}{over}")
    data["label"] = labels
    return ChartData(data, notes=notes)


def _row_axes(n_rows: float, title: str, width: float = 10.5):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, 1.0 + 0.34 * n_rows))
    ax.set_title(title, loc="left", fontsize=10.5, pad=18)
    ax.grid(axis="x", which="major", color="0.88", lw=0.6)
    ax.set_axisbelow(True)
    return fig, ax


def _rows(data: pd.DataFrame) -> tuple[list[str], pd.Series, list, float]:
    """(tick labels, y of each data row, group headers, height): one chart row per label within a
    group (the same device column and setting of two problems are two rows)."""
    key = data["group"] + "\n" + data["label"]
    keys = list(dict.fromkeys(key))
    first = data.assign(key=key).drop_duplicates("key").set_index("key")
    ys, headers, total = row_positions([first.at[k, "group"] for k in keys])
    return [first.at[k, "label"] for k in keys], key.map(dict(zip(keys, ys))), headers, total


def _log_rows(fig, ax, data: pd.DataFrame, value: str, xlabel: str, labels, y, headers, total):
    """What the seconds and samples/s charts share: the problem groups, the row labels, a plain log axis of
    ``value`` and one legend entry per source."""
    draw_groups(ax, headers, total)
    ax.set_yticks(sorted(set(y)), labels, fontsize=7.5)
    plain_log_x(ax, *value_span(data[value]))
    ax.set_xlabel(xlabel)
    legend_above(ax, source_handles(data["source"]))
    fig.tight_layout()
    return fig


def plot_seconds(chart: ChartData):
    """Training seconds (log axis, plain ticks) of every device column and setting, grouped by problem:
    one marker per source, the epochs count written beside each point."""
    data = chart.data
    labels, y, headers, total = _rows(data)
    fig, ax = _row_axes(total, "training seconds (total, warm-up epoch included); the small numbers are epochs")
    for _, g in data.groupby(y, sort=False):
        ax.plot(sorted(g["seconds"]), y[g.index], color="0.75", lw=1, zorder=2)
    for source, g in data.groupby("source", sort=False):
        ax.scatter(g["seconds"], y[g.index], **marker_kwargs(source))
    for i, r in data.iterrows():
        ax.annotate(str(int(r["epochs"])), (r["seconds"], y[i]), xytext=(0, 5), textcoords="offset points",
                    ha="center", va="bottom", fontsize=6.5, color="0.35")
    return _log_rows(fig, ax, data, "seconds", "training seconds (log scale)", labels, y, headers, total)


def plot_samples_per_s(chart: ChartData):
    """Training samples/s (log axis, plain ticks) per device column and setting, grouped by problem."""
    data = chart.data
    labels, y, headers, total = _rows(data)
    fig, ax = _row_axes(total, "training samples/s (steady epochs; the runs with the most epochs of each setting)")
    for source, g in data.groupby("source", sort=False):
        ax.scatter(g["samples_per_s"], y[g.index], **marker_kwargs(source))
    for i, r in data.iterrows():
        ax.annotate(f"{r['samples_per_s']:,.0f}", (r["samples_per_s"], y[i]), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=7)
    return _log_rows(fig, ax, data, "samples_per_s", "samples per second (log scale)", labels, y, headers, total)


def plot_speedup(chart: ChartData):
    """Horizontal bars from 1 on a linear axis: each GPU's x faster than a CPU (``speedup_chart``), per
    setting and fastest against fastest, grouped by machine; the value and both times beside each bar."""
    data = chart.data
    labels, y, headers, total = _rows(data)
    fig, ax = _row_axes(total, "each GPU over a CPU: records over their own machine's CPU, published GPUs over the "
                               "study's one CPU run (each group says which)")
    high = max(2.0, float(data["x_own_cpu"].max()))
    for i, r in data.iterrows():
        style = SOURCE_STYLE[r["source"]]
        ax.barh(y[i], r["x_own_cpu"] - 1, left=1, height=0.62, color=style["color"] if style["filled"]
                else "white", edgecolor=style["color"], lw=1.2, hatch=None if style["filled"] else "//")
        cpu = "the study's CPU run" if r["source"] == PUBLISHED else "CPU"
        ax.text(max(r["x_own_cpu"], 1) + high * 0.01, y[i],
                f"{num.ratio(r['x_own_cpu'])}  ({num.seconds(r['seconds'])} vs {cpu} {num.seconds(r['cpu_seconds'])})",
                va="center", fontsize=7)
    ax.axvline(1, color="0.3", lw=1)
    draw_groups(ax, headers, total)
    ax.set_yticks(sorted(set(y)), labels, fontsize=7.5)
    ax.set_xlim(min(0.0, float(data["x_own_cpu"].min()) - 0.1), high * 1.35)
    ax.set_xlabel("x faster: the CPU's seconds / the GPU's, same problem and epochs (1 = as fast; linear scale)")
    legend_above(ax, source_handles(data["source"]))
    fig.tight_layout()
    return fig

# --- per-source plots: epochs x devices, loss curves, convergence, cost -------------------------------------

def _device_bars(ours: pd.DataFrame, published: pd.DataFrame | None, *, height: float, empty: str, title: str,
                 ylabel: str, line: float | None = None):
    """Bars by device, one per epochs value, of an epochs x devices table: ours, and the published one
    beside it when given. ``title`` may use {source}; ``line`` draws a reference line at that value. The
    panels share their y axis and give an epochs count the same colour in both, so bars of equal height
    mean equal values."""
    import matplotlib.pyplot as plt

    panels = [(MEASURED, ours)] + ([(PUBLISHED, published)] if published is not None and not published.empty else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), height), squeeze=False, sharey=True)
    colours = {e: f"C{i}" for i, e in enumerate(sorted({e for _, t in panels for e in t.index}))}
    for ax, (source, table) in zip(axes[0], panels):
        if table.empty:
            ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        else:
            table.T.plot.bar(ax=ax, rot=0, color=[colours[e] for e in table.index])
            if line is not None:
                ax.axhline(line, color="grey", lw=0.8)
            ax.legend(title="epochs")
        ax.set(title=title.format(source=source), xlabel="device", ylabel=ylabel)
    fig.tight_layout()
    return fig


def plot_epochs_tables(ours: pd.DataFrame, published: pd.DataFrame | None = None):
    """Grouped bars of training seconds by epochs and device: ours, and the published table beside it."""
    return _device_bars(ours, published, height=4, empty="no runs", title="{source}",
                        ylabel="training seconds (total)")


def plot_loss_curves(curves: pd.DataFrame):
    """Training loss and validation RMSE per epoch, one line per run, coloured by device column (solid:
    fast input, dashed: DataLoader); the legend below both panels, clear of the curves."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator


    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    if curves.empty:
        for ax in (ax1, ax2):
            ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
        return fig
    colours = {d: f"C{i}" for i, d in enumerate(dict.fromkeys(curves["device"]))}
    for _, run in curves.groupby("run_id", sort=False):
        device = run["device"].iloc[0]
        style = "-" if run["input_path"].iloc[0] != "dataloader" else "--"
        ax1.plot(run["epoch"], run["train_loss"], style, color=colours[device], alpha=0.8)
        ax2.plot(run["epoch"], run["val_rmse_k"], style, color=colours[device], alpha=0.8)
    handles = [Line2D([], [], color=c, label=d) for d, c in colours.items()]
    handles += [Line2D([], [], color="0.3", ls="-", label="fast input"),
                Line2D([], [], color="0.3", ls="--", label="DataLoader")]
    pers = curves["val_persistence_rmse_k"].dropna() if "val_persistence_rmse_k" in curves else pd.Series()
    if not pers.empty:  # the baseline every model result is shown beside
        ax2.axhline(pers.median(), color="grey", lw=1, ls=":")
        handles.append(Line2D([], [], color="grey", lw=1, ls=":", label="persistence (validation)"))
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    loss = curves["train_loss"].dropna()
    if len(loss) and loss.min() > 0 and loss.max() / loss.min() > 10:  # a log axis only where it spans decades
        ax1.set_yscale("log")
        plain_log_y(ax1)
    ax1.set(xlabel="epoch", ylabel="training loss (MSE, scaled)", title="training loss")
    ax2.set(xlabel="epoch", ylabel="validation RMSE (K)", title="validation RMSE")
    if curves["val_rmse_k"].isna().all():  # the published setting has no validation part: say so, not blank axes
        ax2.text(0.5, 0.5, "no validation RMSE: these runs have no validation part\n(the published setting has "
                 "none: it trains on 2020, tests on 2021)", ha="center", va="center", transform=ax2.transAxes)
        ax2.set(xticks=[], yticks=[])
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(handles) - 1) // 5), 1, 1))
    return fig


def plot_convergence(records: list[dict[str, Any]]):
    """Validation loss against epoch and against wall time, one line per (experiment, world size)."""
    import matplotlib.pyplot as plt

    table = convergence_table(records)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (exp, n), g in table.groupby(["experiment", "world_size"]):
        label = f"{exp}, {n} device{'s' if n > 1 else ''}"
        ax1.plot(g["epoch"], g["val_loss"], marker="o", label=label)
        ax2.plot(g["cumulative_s"], g["val_loss"], marker="o", label=label)
    ax1.set(xlabel="epoch", ylabel="validation loss (MSE, scaled)", title="convergence per epoch")
    ax2.set(xlabel="wall seconds (training + validation)", ylabel="validation loss (MSE, scaled)",
            title="convergence in wall time")
    ax1.legend(fontsize="small")
    fig.tight_layout()
    return fig
