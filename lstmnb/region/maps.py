"""Per-cell maps as figures: every panel with its own colour scale and colour bar, and differences or skill scores on a
diverging scale centred on 0 (blue: better). One shared scale hid the result: beside climatology (several kelvin) every
model panel took the same dark colour. So a level panel (an RMSE) is scaled to its own range, a difference between two
forecasts gets a symmetric scale around 0, and a skill score the fixed scale -1..1 (its best is 1; a scale set by its
own largest value put every cell at the colour limit), lower values clipped and the colour bar saying so."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..errors import ConfigError


@dataclass(frozen=True)
class Panel:
    """One map: ``data`` (latitude, longitude), its ``title`` and colour-bar ``label``. ``kind``: 'level' (own
    scale), 'difference' (centred on 0, lower is better: an RMSE difference) or 'skill' (centred on 0, higher is
    better: a skill score)."""

    title: str
    data: xr.DataArray
    label: str
    kind: str = "level"


KINDS = {"level": "viridis", "difference": "RdBu_r", "skill": "RdBu"}


def plot_panels(panels: list[Panel], title: str):
    """The panels side by side, each with its own colour bar, under ``title``. Returns the figure."""
    import matplotlib.pyplot as plt

    if not panels:
        raise ConfigError("no maps to draw")
    if bad := [p.kind for p in panels if p.kind not in KINDS]:
        raise ConfigError(f"panel kind {bad[0]!r} is not one of {', '.join(KINDS)}")
    width = max(3.4 * len(panels), 5.0)  # one panel: room for its colour bar's label and a short title line
    fig, axes = plt.subplots(1, len(panels), figsize=(width, 3.8), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], panels):
        values = np.asarray(p.data.values, dtype=np.float64)
        cols = np.arange(p.data.sizes["longitude"])  # columns in order: a box across 0E stays in one piece
        style = {"cmap": KINDS[p.kind]}
        extend = "min" if p.kind == "skill" and np.nanmin(values) < -1 else "neither"
        if p.kind != "level":  # centred on 0; a skill score (at most 1): -1..1 for every panel, lower values clipped
            lim = 1.0 if p.kind == "skill" else (float(np.nanmax(np.abs(values))) or 1.0)
            style.update(vmin=-lim, vmax=lim)
        im = ax.pcolormesh(cols, p.data["latitude"].values, values, shading="nearest", **style)
        ax.set_title(p.title, fontsize=10)
        ticks = cols[:: -(-len(cols) // 3)]  # at most three labels: they are wide
        ax.set_xticks(ticks, [f"{p.data['longitude'].values[i] % 360:g}" for i in ticks])
        ax.set_xlabel("longitude (E)")
        fig.colorbar(im, ax=ax, label=p.label, shrink=0.85, orientation="horizontal", pad=0.2, extend=extend)
    axes[0][0].set_ylabel("latitude")
    # a long title wrapped to the figure's width (about 10 characters of 12 pt text an inch) and grown upwards
    # from the top edge: on one line it widened the saved figure (bbox_inches="tight") into wide empty margins
    fig.suptitle(textwrap.fill(title, width=int(width * 10), break_on_hyphens=False), y=1.0, va="bottom")
    return fig


def rmse_panels(maps: xr.Dataset, names: list[str]) -> list[Panel]:
    """A level panel of the per-cell RMSE of each of ``names`` (variables of ``maps``)."""
    if missing := [n for n in names if n not in maps.data_vars]:
        raise ConfigError(f"no map named {missing[0]!r}; the maps are {list(maps.data_vars)}")
    return [Panel(f"{n}: RMSE", maps[n], "test RMSE (K)") for n in names]


def map_title(what: str, maps: xr.Dataset) -> str:
    """A figure title naming ``what``, the lead, the test period and, where the maps' attrs say so, that their data
    are synthetic."""
    lead = maps.attrs.get("lead_hours")
    synthetic = " (synthetic data)" if maps.attrs.get("data_kind") == "synthetic" else ""
    return f"{what}, {lead} h ahead, test period {maps.attrs.get('period', 'test part')}{synthetic}"
