"""Skill across leads: one model per lead time on the same data, scored per point against persistence and climatology on
the same target hours, with the MSE skill score against each (``training.evaluate.mse_skill_score``: 1 - MSE_model /
MSE_baseline; 1 is perfect, 0 is no better than the baseline, below 0 is worse). Points are shown as the user gave them,
with the grid cell used, in the order given; a pooled row per lead sums over them."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..records import Recorder
from ..rules import PYTHON, Spelling
from ..training import prepare_windows, train, with_overrides
from ..training.evaluate import mse_skill_score
from ..training.guards import stop_if_diverged

POOLED = "all points (pooled)"
FORECASTS = ("model", "network", "persistence", "climatology")


def check_leads(leads: Iterable[int], say: Spelling = PYTHON) -> list[int]:
    """Lead times as whole hours >= 1, each once; else a ConfigError naming them as ``say`` spells ``leads``."""
    leads = list(leads)
    if not leads or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in leads):
        raise say.refuse("leads", leads, ": lead times must be whole hours >= 1, e.g. 1,6,24")
    twice = sorted({v for v in leads if leads.count(v) > 1})
    if twice:
        raise say.refuse("leads", leads, f"repeats {','.join(map(str, twice))}; give each lead once, e.g. "
                                         f"{','.join(map(str, dict.fromkeys(leads)))}")
    return [int(v) for v in leads]


def check_one_lead(horizon: int, option: str = "horizon") -> None:
    """Skill across leads scores one lead per model: a horizon of several hours would pool leads L..L+H-1 in the
    row of lead L."""
    if horizon != 1:
        raise ConfigError(f"{option} {horizon}: skill across leads scores one lead per model, and each row would pool "
                          f"leads L..L+{horizon - 1} under lead L; use {option} 1 (a forecast of {horizon} hours at "
                          f"once: lstmnb train --horizon {horizon})")


def skill_experiment(request, cfg, leads: Iterable[int] = (1, 6, 24), *, results=None,
                     on_point: Callable[[dict[str, Any]], None] | None = None, say: Spelling = PYTHON) -> list[dict]:
    """Train one model per lead (``cfg`` otherwise unchanged), in the order given; each record's ``skill``
    section holds its per-point scores. Validation and test score the same target hours at every lead. ``say``:
    how the runs' refusals and advice name settings."""
    leads = check_leads(leads)
    check_one_lead(cfg.horizon)
    recorder = Recorder(results, on_point)
    for lead in leads:
        run_cfg = with_overrides(cfg, lead_hours=lead, experiment="skill", checkpoint=None, resume=False)
        windows, info = prepare_windows(request, run_cfg, progress=cfg.progress, say=say)  # validates run_cfg first
        result = train(windows, run_cfg, data_info=info, say=say)
        stop_if_diverged(result.record, recorder.results)  # a lead whose run diverged ends the study, recorded
        recorder.add(result.record)
    return recorder.records


def _pooled(rows: list[dict[str, Any]], lead: int) -> dict[str, Any]:
    """The scores over all points of one lead: each forecast's MSE summed over every point's targets."""
    targets = np.array([r["targets"] for r in rows], dtype=np.float64)
    out: dict[str, Any] = {"point": POOLED, "lead_hours": lead, "targets": int(targets.sum())}
    mse = {}
    for name in FORECASTS:
        if all(r.get(f"{name}_rmse_k") is not None for r in rows):
            mse[name] = float(np.sum(np.array([r[f"{name}_rmse_k"] for r in rows]) ** 2 * targets) / targets.sum())
            out[f"{name}_rmse_k"] = float(np.sqrt(mse[name]))
    for b in ("persistence", "climatology"):
        out[f"mse_skill_vs_{b}"] = mse_skill_score(mse["model"], mse[b])
    return out


def skill_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (point, lead), points in the order given (each as given, with its grid cell) and leads in the order
    run, then a pooled row per lead: targets, RMSE of the reported forecast (``model``), of the network alone (where the
    reported forecast is a blend), of persistence and of climatology, and the MSE skill scores (``mse_skill_vs_*``)."""
    runs = [r for r in records if r.get("status") == "ok" and r.get("skill")]
    rows, pooled = [], []
    for r in runs:
        per_point = r["skill"]["per_point"]
        # each point as the user gave it, with the grid cell used: ``40,-80 (cell 40.00N 280.00E)``
        rows += [{**row, "point": f"{row['requested']} (cell {row['point']})" if row.get("requested")
                  else str(row["point"])} for row in per_point]
        pooled.append(_pooled(per_point, r["skill"]["lead_hours"]))
    if not rows:
        return pd.DataFrame()
    order = list(dict.fromkeys(row["point"] for row in rows)) + [POOLED]
    table = pd.DataFrame(rows + pooled).drop(columns=["requested"], errors="ignore")
    table["point"] = pd.Categorical(table["point"], categories=order, ordered=True)
    table = table.sort_values("point", kind="stable").set_index(["point", "lead_hours"])
    columns = ["targets", *[f"{n}_rmse_k" for n in FORECASTS], "mse_skill_vs_persistence", "mse_skill_vs_climatology"]
    return table[[c for c in columns if c in table]]


def plot_skill(table: pd.DataFrame):
    """Per point (and pooled): test RMSE against lead of the model and both baselines (top), and the model's
    MSE skill score against each baseline (bottom; above 0 the model beats it)."""
    import matplotlib.pyplot as plt

    points = list(dict.fromkeys(table.index.get_level_values("point")))
    fig, axes = plt.subplots(2, len(points), figsize=(4.6 * len(points), 6.4), squeeze=False, sharex="col")
    for ax in axes[1][1:]:  # one scale for the skill scores; each point's RMSE on its own (a sea point's is small)
        ax.sharey(axes[1][0])
    for col, point in enumerate(points):
        t = table.xs(point, level="point")
        top, bottom = axes[0][col], axes[1][col]
        for name, label, style in (("model_rmse_k", "LSTM (reported)", "-o"), ("persistence_rmse_k", "persistence", "--s"),
                                   ("climatology_rmse_k", "climatology", ":^")):
            top.plot(t.index, t[name], style, label=label)
        top.set(title=str(point), ylabel="test RMSE (K)")
        for name, label, style in (("mse_skill_vs_persistence", "vs persistence", "-s"),
                                   ("mse_skill_vs_climatology", "vs climatology", "-^")):
            bottom.plot(t.index, t[name].astype(float), style, label=label)
        bottom.axhline(0.0, color="grey", lw=0.8)
        bottom.set(xlabel="lead (hours)", ylabel="MSE skill score")
        bottom.set_xticks(list(t.index))
    axes[0][0].legend(fontsize=8)
    axes[1][0].legend(fontsize=8, title="1 - MSE / MSE(baseline)", title_fontsize=8)
    fig.tight_layout()
    return fig
