"""The default forecaster at every point and every lead on the embedded sample, its sea point included: no
point loses to persistence (on validation by construction, on test as measured), and at 24 h the forecast is
at least 10% below the better baseline. One skill experiment with the defaults serves every test here."""

from __future__ import annotations

import pytest

from lstmnb.data import DEFAULT_POINTS, Request
from lstmnb.data.sample import SEA_POINT
from lstmnb.experiments import skill
from lstmnb.training import preset_config

pytestmark = pytest.mark.slow  # three models on the sample's 18 months at three points: a few minutes on 2 cores

LEADS = (1, 6, 24)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    request = Request(points=DEFAULT_POINTS + (SEA_POINT,))
    cfg = preset_config(device="cpu", progress=False)  # the recommended setting, as `lstmnb skill` runs it
    return {r["config"]["lead_hours"]: r for r in skill.skill_experiment(request, cfg, LEADS,
                                                                          results=tmp_path_factory.mktemp("skill"))}


def test_every_point_beats_persistence_at_every_lead(runs):
    for lead, record in runs.items():
        assert record["status"] == "ok" and record["config"]["blend"] == "baselines"
        assert record["config"]["point_weights"] == "persistence" and record["config"]["cycles"]
        rows = record["skill"]["per_point"]
        assert [r["requested"] for r in rows] == ["40,280", "20,280", "35,281.75"]
        for row in rows:  # on the test part
            assert row["model_rmse_k"] < row["persistence_rmse_k"], (lead, row)
            assert row["mse_skill_vs_persistence"] > 0
        for row in record["skill"]["blend"]["per_point"]:  # on validation, where the blend was fitted
            assert row["val_reported_rmse_k"] <= row["val_persistence_rmse_k"] + 1e-9, (lead, row)
            assert row["val_reported_rmse_k"] <= row["val_network_rmse_k"] + 1e-9, (lead, row)


def test_at_24_h_the_forecast_is_at_least_10_percent_below_the_better_baseline(runs):
    m = runs[24]["metrics"]
    better = min(m["persistence_rmse_k"], m["climatology_rmse_k"])
    assert m["test_rmse_k"] <= 0.9 * better, m
    # most of it is the network's own: alone it is already well below persistence
    assert m["network_test_rmse_k"] < 0.95 * m["persistence_rmse_k"]
    # and it was learned: the untrained network is persistence (residual head), its first epoch already beats
    # validation persistence by far, and at 24 h's own rate (5e-4) it goes on improving past its first epochs
    assert runs[24]["epochs"][0]["val_rmse_k"] < 0.95 * m["val_persistence_rmse_k"]
    assert runs[24]["config"]["lr"] == 5e-4 and runs[24]["config"]["lr_by_lead"] and runs[1]["config"]["lr"] == 4e-3
    val = [e["val_rmse_k"] for e in runs[24]["epochs"]]
    assert val.index(min(val)) + 1 >= 3, val  # the best epoch
    # the climatology is the day-of-year one: the training part covers a year
    assert runs[24]["data"]["climatology"]["kind"] == "day-of-year"


def test_the_pooled_rows_and_the_skill_scores_agree_with_the_records(runs):
    table = skill.skill_table(list(runs.values()))
    for lead, record in runs.items():
        pooled = table.loc[(skill.POOLED, lead)]
        assert pooled["model_rmse_k"] == pytest.approx(record["metrics"]["test_rmse_k"], rel=1e-5)
        assert pooled["mse_skill_vs_persistence"] == pytest.approx(record["metrics"]["mse_skill_vs_persistence"], rel=1e-4)
