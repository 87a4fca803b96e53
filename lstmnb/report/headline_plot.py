"""The first screen's figure (``headline.Headline``): one row per device on one log axis of seconds,
grouped by source and machine; top panel like for like, bottom panel each device's fastest setting;
each device's speedup over a CPU (its own machine's; a published GPU's, the study's CPU run) printed in a
column beside the axis."""

from __future__ import annotations

import math
import textwrap

import pandas as pd

from . import numbers as num
from .headline import FAST, LIKE, Headline
from .style import draw_groups, marker_kwargs, plain_log_x, row_positions, source_handles, value_span


def _speedup_text(r: pd.Series) -> str:
    if r["state"] != "measured":
        return "—"
    if r["device"] == "CPU":
        return "1x (the CPU itself)"
    if pd.isna(r["x_own_cpu"]):
        return "no CPU run on this machine"
    note = r["note"] if isinstance(r["note"], str) else ""
    text = f"{num.ratio(r['x_own_cpu'])}{note}"
    if not r["same_machine"]:
        text += f" over {r['cpu_machine']}"
    elif r["panel"] == FAST:
        text += f" (CPU's fastest: {num.seconds(r['cpu_seconds'])})"
    return text


def _label(r: pd.Series) -> str:
    name = r["column"].split(" · ")[0]  # the device (with a CPU's cores); the group header names the machine
    note = r["note"] if isinstance(r["note"], str) else ""
    return f"{name}{note}"


def plot_headline(h: Headline):
    """The first screen's figure: panel 1 like for like at ``h.epochs``, panel 2 the fastest setting per
    device (records only: the study timed one setting), sharing one log axis of seconds."""
    import matplotlib.pyplot as plt

    panels = [(LIKE, f"{h.epochs} epochs at the published setting, DataLoader path (like for like)"),
              (FAST, f"{h.epochs} epochs at each device's fastest setting in the records (the study timed one "
                     "setting)")]
    panels = [(p, t) for p, t in panels if (h.entries["panel"] == p).any()]
    layouts = []
    for panel, _ in panels:
        e = h.entries[h.entries["panel"] == panel]
        ys, headers, total = row_positions(list(e["group"]))
        layouts.append((e, ys, headers, total))
    heights = [total for *_, total in layouts]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11.5, 0.9 + 0.27 * sum(heights) + 0.55 * len(panels)),
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights})
    measured = h.entries[h.entries["state"] == "measured"]
    low, high = value_span(measured["seconds"])
    for ax, (panel, title), (e, ys, headers, total) in zip(axes[:, 0], panels, layouts):
        ax.set_title(title, loc="left", fontsize=10, pad=4)
        ax.grid(axis="x", which="major", color="0.88", lw=0.6)
        ax.set_axisbelow(True)
        headers = [(y, f"{g.split(' · ', 1)[0]} · {h.machines.get(g, g.split(' · ', 1)[-1])}") for y, g in headers]
        draw_groups(ax, headers, total)
        for y, (_, r) in zip(ys, e.iterrows()):
            if r["state"] == "measured":
                ax.scatter([r["seconds"]], [y], **marker_kwargs(r["source"], 52))
                text = num.seconds(r["seconds"])
                if r["panel"] == FAST:  # the setting can be long: wrapped, on the side of the point with more room
                    text = textwrap.fill(f"{text} ({r['setting'].replace(' · ', ', ')})", 75)
                right_half = math.log(r["seconds"] / low) > 0.5 * math.log(high / low)
                ax.annotate(text, (r["seconds"], y), xytext=(-7 if right_half else 7, 0), textcoords="offset points",
                            va="center", ha="right" if right_half else "left", fontsize=8, linespacing=1.0)
            else:
                # one line per row: several engines' skip reasons run to many lines; the findings list them all
                why = textwrap.shorten(r["why"], 105, placeholder=" … (every reason: Findings, below)")
                ax.text(0.01, y, why, transform=ax.get_yaxis_transform(), va="center", fontsize=7.5, color="0.35",
                        style="italic")
            ax.text(1.01, y, _speedup_text(r), transform=ax.get_yaxis_transform(), va="center", fontsize=8.5,
                    fontweight="bold" if r["state"] == "measured" and r["device"] != "CPU" else "normal")
        ax.set_yticks(ys, [_label(r) for _, r in e.iterrows()], fontsize=8)
    axes[0, 0].text(1.01, 1.0, "x faster than a CPU\n(its own machine's)", transform=axes[0, 0].transAxes, va="bottom",
                    fontsize=8.5, color="0.25")
    plain_log_x(axes[-1, 0], low, high)
    axes[-1, 0].set_xlabel("training seconds, total for the epochs (log scale; left is faster)")
    fig.legend(handles=source_handles(measured["source"]), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.045 * 8 / fig.get_figheight(), 1, 1))
    return fig
