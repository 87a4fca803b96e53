"""What every chart of the report shares, so that a mark means one thing on the whole page: the style of
each source (measured here, reference records, published: colour, marker, fill), labelled groups of
rows (problems, machines) on a y axis, log axes with plain tick labels, legends outside the data."""

from __future__ import annotations

import math
from typing import Sequence

from .published import MEASURED, PUBLISHED, REFERENCE

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
