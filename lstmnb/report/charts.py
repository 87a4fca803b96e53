"""The comparison across machines in pictures: training seconds and samples/s of every device column and
setting on one shared log axis (rows grouped and labelled by problem; the source shown by the report's
one marker per source), and each device's speedup over a CPU, its own machine's or the study's CPU run
(bars from 1 on a linear axis, grouped by machine).

Each chart has a data function (``seconds_chart``, ``samples_chart``, ``speedup_chart``) that says
whether there is anything to compare; a chart is drawn only from data that compares something, and
otherwise the data's ``why`` says what to run. ``notes`` are the notes of the devices the chart shows
(the published T4's), to print under it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from . import numbers as num
from .compare import FASTEST, comparison_epochs, own_cpu_speedups
from .published import NOTE_MARK, PUBLISHED, SOURCE_WORDS, device_notes
from .settings import PUBLISHED_PROBLEM_LABEL
from .style import (
    draw_groups,
    legend_above,
    marker_kwargs,
    plain_log_x,
    row_positions,
    source_handles,
    value_span,
)


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
    """Training seconds of every comparison row (``compare.comparison_rows``), one point per epochs count,
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
    """Each GPU over a CPU (``compare.own_cpu_speedups``: its own machine's; a published GPU's, the
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


def over_which_cpu(same_machine: bool, source: str) -> str:
    """The CPU a speedup divides, in the words every label uses: a published GPU's is the study's one CPU run
    (never its own machine's), a record's its own machine's CPU."""
    if same_machine:
        return "its own machine's CPU"
    return "the study's one CPU run, platform not stated" if source == PUBLISHED else "another machine's CPU"


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
    draw_groups(ax, headers, total)
    ax.set_yticks(sorted(set(y)), labels, fontsize=7.5)
    plain_log_x(ax, *value_span(data["seconds"]))
    ax.set_xlabel("training seconds (log scale)")
    legend_above(ax, source_handles(data["source"]))
    fig.tight_layout()
    return fig


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
    draw_groups(ax, headers, total)
    ax.set_yticks(sorted(set(y)), labels, fontsize=7.5)
    plain_log_x(ax, *value_span(data["samples_per_s"]))
    ax.set_xlabel("samples per second (log scale)")
    legend_above(ax, source_handles(data["source"]))
    fig.tight_layout()
    return fig


def plot_speedup(chart: ChartData):
    """Horizontal bars from 1 on a linear axis: each GPU's x faster than a CPU (``speedup_chart``), per
    setting and fastest against fastest, grouped by machine; the value and both times beside each bar."""
    from .style import SOURCE_STYLE

    data = chart.data
    labels, y, headers, total = _rows(data)
    fig, ax = _row_axes(total, "each GPU over a CPU: records over their own machine's CPU, published GPUs over the "
                               "study's one CPU run (each group says which)")
    high = max(2.0, float(data["x_own_cpu"].max()))
    for i, r in data.iterrows():
        style = SOURCE_STYLE[r["source"]]
        ax.barh(y[i], r["x_own_cpu"] - 1, left=1, height=0.62, color=style["color"] if style["filled"]
                else "white", edgecolor=style["color"], lw=1.2, hatch=None if style["filled"] else "//")
        ax.text(max(r["x_own_cpu"], 1) + high * 0.01, y[i],
                f"{num.ratio(r['x_own_cpu'])}  ({num.seconds(r['seconds'])} vs "
                f"{'the study' + chr(39) + 's CPU run' if r['source'] == PUBLISHED else 'CPU'} {num.seconds(r['cpu_seconds'])})",
                va="center", fontsize=7)
    ax.axvline(1, color="0.3", lw=1)
    draw_groups(ax, headers, total)
    ax.set_yticks(sorted(set(y)), labels, fontsize=7.5)
    ax.set_xlim(min(0.0, float(data["x_own_cpu"].min()) - 0.1), high * 1.35)
    ax.set_xlabel("x faster: the CPU's seconds / the GPU's, same problem and epochs (1 = as fast; linear scale)")
    legend_above(ax, source_handles(data["source"]))
    fig.tight_layout()
    return fig
