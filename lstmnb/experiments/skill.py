"""Skill across leads: one model per lead time on the same data, scored per point against persistence and
climatology on the same target hours, with the skill score against each (1 - MSE / MSE of the reference:
1 is perfect, 0 is no better than the reference, below 0 is worse)."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import pandas as pd

from ..errors import ConfigError
from ..records import Recorder
from ..training import prepare_windows, train, with_overrides


def skill_experiment(request, cfg, leads: Iterable[int] = (1, 6, 24), *, results=None,
                     on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train one model per lead (``cfg`` otherwise unchanged); each record's ``skill`` section holds its
    per-point scores. Validation and test score the same target hours at every lead."""
    leads = [int(v) for v in leads]
    if not leads or min(leads) < 1:
        raise ConfigError(f"leads={leads!r} must be whole numbers of hours >= 1")
    recorder = Recorder(results, on_point)
    for lead in leads:
        run_cfg = with_overrides(cfg, lead_hours=lead, experiment="skill", checkpoint=None, resume=False)
        run_cfg.validate()
        windows, info = prepare_windows(request, run_cfg, progress=cfg.progress)
        result = train(windows, run_cfg, data_info=info)
        recorder.add(result.record)
    return recorder.records


def skill_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (point, lead): targets, RMSE of model, persistence and climatology, and the skill scores."""
    rows = [row for r in records if r.get("status") == "ok" and r.get("skill") for row in r["skill"]["per_point"]]
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).set_index(["point", "lead_hours"]).sort_index()


def plot_skill(table: pd.DataFrame):
    """RMSE against lead for the model and both baselines, one panel per point."""
    import matplotlib.pyplot as plt

    points = list(dict.fromkeys(table.index.get_level_values("point")))
    fig, axes = plt.subplots(1, len(points), figsize=(5 * len(points), 3.6), squeeze=False, sharey=True)
    for ax, point in zip(axes[0], points):
        t = table.xs(point, level="point")
        for col, label, style in (("model_rmse_k", "LSTM", "-o"), ("persistence_rmse_k", "persistence", "--s"),
                                  ("climatology_rmse_k", "climatology", ":^")):
            ax.plot(t.index, t[col], style, label=label)
        ax.set(title=f"point {point}", xlabel="lead (hours)", ylabel="test RMSE (K)")
        ax.set_xticks(list(t.index))
    axes[0][0].legend()
    fig.tight_layout()
    return fig
