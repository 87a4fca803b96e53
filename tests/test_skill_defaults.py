"""The default forecaster at both of the study's points (real ERA5: land at 40N, open sea at 20N) and at every
lead, on the study's test part (2021-01..06): no point loses to persistence (on validation by construction, on
test as measured), and at 24 h the forecast is below the better baseline. One skill experiment with the
defaults serves every test here (measured: RMSE 0.629 / 2.676 / 4.457 K against persistence 1.054 / 4.767 /
4.634 K on land, 0.171 / 0.520 / 0.667 K against 0.194 / 0.669 / 0.706 K at sea, at 1 / 6 / 24 h)."""

from __future__ import annotations

import pytest

from lstmnb.data import Request
from lstmnb.experiments import skill
from lstmnb.training import preset_config

pytestmark = pytest.mark.slow  # three models on 2020 at two points: a few minutes on 2 cores

LEADS = (1, 6, 24)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # the recommended setting, as `lstmnb skill` runs it, validated on 2020-10..12 and tested on the study's test part;
    # one thread: beside the other pytest-xdist worker the load policy mostly chooses one anyway, and two, chosen
    # in a lull of that worker's, would share a core with it and spin (this fixture took 64 to 192 s in suites;
    # 63 s on one thread beside one busy core)
    cfg = preset_config(device="cpu", progress=False, split_dates=("2020-10-01", "2021-01-01"), threads=1)
    return {r["config"]["lead_hours"]: r for r in skill.skill_experiment(Request(), cfg, LEADS,
                                                                          results=tmp_path_factory.mktemp("skill"))}


def test_every_point_beats_persistence_at_every_lead(runs):
    for lead, record in runs.items():
        assert record["status"] == "ok" and record["config"]["blend"] == "baselines"
        assert record["config"]["point_weights"] == "persistence" and record["config"]["cycles"]
        assert record["data"]["source"] == "study" and record["data"]["kind"] == "real"
        assert record["data"]["scored"]["test"]["first"].startswith("2021-01-01")
        rows = record["skill"]["per_point"]
        assert [r["requested"] for r in rows] == ["40,280", "20,280"]
        for row in rows:  # on the test part
            assert row["model_rmse_k"] < row["persistence_rmse_k"], (lead, row)
            assert row["mse_skill_vs_persistence"] > 0
        for row in record["skill"]["blend"]["per_point"]:  # on validation, where the blend was fitted
            assert row["val_reported_rmse_k"] <= row["val_persistence_rmse_k"] + 1e-9, (lead, row)
            assert row["val_reported_rmse_k"] <= row["val_network_rmse_k"] + 1e-9, (lead, row)


def test_at_24_h_the_forecast_is_below_the_better_baseline(runs):
    m = runs[24]["metrics"]
    better = min(m["persistence_rmse_k"], m["climatology_rmse_k"])
    assert m["test_rmse_k"] < better, m
    # the network's own: alone it is already below persistence
    assert m["network_test_rmse_k"] < m["persistence_rmse_k"]
    # learned at 24 h's own rate (5e-4), improving past its first epochs
    assert runs[24]["config"]["lr"] == 5e-4 and runs[24]["config"]["lr_by_lead"] and runs[1]["config"]["lr"] == 4e-3
    val = [e["val_rmse_k"] for e in runs[24]["epochs"]]
    assert val.index(min(val)) + 1 >= 3, val  # the best epoch
    # nine months of training: the climatology is the hour-of-day one, and the record says so
    assert runs[24]["data"]["climatology"]["kind"] == "hour-of-day"


def test_the_pooled_rows_and_the_skill_scores_agree_with_the_records(runs):
    table = skill.skill_table(list(runs.values()))
    for lead, record in runs.items():
        pooled = table.loc[(skill.POOLED, lead)]
        assert pooled["model_rmse_k"] == pytest.approx(record["metrics"]["test_rmse_k"], rel=1e-5)
        assert pooled["mse_skill_vs_persistence"] == pytest.approx(record["metrics"]["mse_skill_vs_persistence"], rel=1e-4)
