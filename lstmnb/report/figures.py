"""The report's figures, in one home: the first screen's ladder, loss curves, convergence and cost, each drawn
from data its caller made and labelled (``ladder``, ``tables``, ``scaling``), each a matplotlib Figure.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def plot_ladder(panels: list[dict[str, Any]]):
    """One panel per machine (``ladder.panels``): each rung's seconds on its CPU and GPU side by side (log axis),
    every bar labelled with its seconds and x that machine's CPU at rung 0, every empty slot saying why."""
    import matplotlib.pyplot as plt

    rungs = max(len(p["rungs"]) for p in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, (1.2 + 0.62 * rungs) * len(panels)), squeeze=False)
    colours = {"cpu": "#4477aa", "cuda": "#ee7733"}
    for ax, p in zip(axes[:, 0], panels):
        measured = [b["seconds"] for b in p["bars"] if b["seconds"] is not None]
        top = max(max(measured, default=1.0), 1e-3)
        low = min(min(measured, default=1.0), top) / 3
        for b in p["bars"]:
            s = b["seconds"]
            if s is not None:
                ax.barh(b["y"], s, height=0.38, color=colours[b["device"]], left=0)
            ax.text(s * 1.05 if s else low * 1.1, b["y"], ("CPU: " if b["device"] == "cpu" else "GPU: ") + b["label"],
                    va="center", fontsize=8, color="black" if s else "grey")
        ax.set_xscale("log")
        ax.set_xlim(low, top * 80)
        ax.set_yticks(range(len(p["rungs"])), p["rungs"])
        ax.set_xlabel(p["xlabel"])
        ax.set_ylim(len(p["rungs"]) - 0.4, -0.6)
        ax.set_title(p["title"], fontsize=9, loc="left", pad=4)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def plot_loss_curves(curves: pd.DataFrame):
    """Training loss and validation RMSE per epoch, one line per run, coloured by device column (solid:
    fast input, dashed: DataLoader); the legend below both panels, clear of the curves."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

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
        ax1.set_yscale("log")  # with plain tick labels: 0.005, 0.01, 0.02, not 5x10^-3
        ax1.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax1.yaxis.set_minor_formatter(NullFormatter())
    ax1.set(xlabel="epoch", ylabel="training loss (MSE, scaled)", title="training loss")
    ax2.set(xlabel="epoch", ylabel="validation RMSE (K)", title="validation RMSE")
    if curves["val_rmse_k"].isna().all():  # the published setting has no validation part: say so, not blank axes
        ax2.text(0.5, 0.5, "no validation RMSE: these runs have no validation part\n(the published setting has "
                 "none: it trains on 2020, tests on 2021)", ha="center", va="center", transform=ax2.transAxes)
        ax2.set(xticks=[], yticks=[])
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(handles) - 1) // 5), 1, 1))
    return fig


def plot_convergence(table: pd.DataFrame):
    """Validation loss against epoch and against wall time, one line per (experiment, world size), from
    ``scaling.convergence_table``."""
    import matplotlib.pyplot as plt

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


def plot_cost(table: pd.DataFrame):
    """Cost against wall time per run (log-log), labelled by device and device count."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    cost_col = next((c for c in table.columns if c.startswith("cost ")), None)
    if table.empty or cost_col is None:
        ax.set_title("no priced runs")
        return fig
    for _, row in table.dropna(subset=[cost_col]).iterrows():
        ax.scatter(row["wall s"], row[cost_col])
        ax.annotate(f"{row['device']} x{row['devices']}", (row["wall s"], row[cost_col]), fontsize="small",
                    xytext=(3, 3), textcoords="offset points")
    examples = (table["price source"] == "example").any()
    ax.set(xscale="log", yscale="log", xlabel="wall seconds", ylabel=cost_col,
           title="cost vs time" + (" (example prices)" if examples else ""))
    fig.tight_layout()
    return fig
