"""Skill across leads: one model per lead on the same data, per-point scores on the same target hours."""

from __future__ import annotations

import numpy as np
import pytest

from lstmnb.data import Request
from lstmnb.errors import ConfigError
from lstmnb.experiments import skill
from lstmnb.training import preset_config


def test_one_model_per_lead_scored_per_point_on_the_same_targets(tmp_path):
    request = Request(start="2020-01-01", end="2020-02-15")
    cfg = preset_config(device="cpu", window=12, hidden=8, epochs=2, progress=False)
    recs = skill.skill_experiment(request, cfg, (1, 6), results=tmp_path)
    assert [r["config"]["lead_hours"] for r in recs] == [1, 6] and all(r["experiment"] == "skill" for r in recs)
    table = skill.skill_table(recs)
    assert list(table.index) == [(p, lead) for p in sorted(recs[0]["data"]["cells"]) for lead in (1, 6)]
    # the same target hours at both leads: the test part's targets and the climatology's score agree
    for point in table.index.get_level_values("point").unique():
        t = table.xs(point, level="point")
        assert t["targets"].nunique() == 1 and t["climatology_rmse_k"].nunique() == 1
    # persistence gets worse with the lead; the skill scores follow their definition
    assert (table.xs(6, level="lead_hours")["persistence_rmse_k"].values
            > table.xs(1, level="lead_hours")["persistence_rmse_k"].values).all()
    expected = 1 - table["model_rmse_k"] ** 2 / table["persistence_rmse_k"] ** 2
    np.testing.assert_allclose(table["mse_skill_vs_persistence"], expected)
    # pooled over points, the per-point persistence matches the run's own baseline figure
    first = recs[0]
    pooled = np.sqrt((table.xs(1, level="lead_hours")["persistence_rmse_k"] ** 2).mean())
    assert pooled == pytest.approx(first["metrics"]["persistence_rmse_k"], rel=1e-6)  # truth via float32 samples
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2


def test_leads_are_checked():
    with pytest.raises(ConfigError, match="leads"):
        skill.skill_experiment(Request(), preset_config(device="cpu"), [0])
