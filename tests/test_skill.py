"""Skill across leads: one model per lead on the same data, per-point scores on the same target hours, the
MSE skill score everywhere, points as given, a pooled row, and a local store's own dates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lstmnb.cli import main
from lstmnb.data import Request, fit_times
from lstmnb.datasets.sample import write_sample
from lstmnb.errors import ConfigError
from lstmnb.experiments import skill
from lstmnb.training import preset_config
from lstmnb.training.evaluate import mse_skill_score


def test_mse_skill_score():
    assert mse_skill_score(1.0, 4.0) == 0.75 and mse_skill_score(4.0, 4.0) == 0.0 and mse_skill_score(8.0, 4.0) == -1.0
    assert mse_skill_score(1.0, 0.0) is None


def test_one_model_per_lead_scored_per_point_on_the_same_targets(tmp_path):
    # points as a user types them, west longitude and not sorted: rows keep them, in this order
    request = Request(source="sample", points=((40.0, -80.0), (35.0, 281.75), (20.0, 280.0)), start="2020-01-01",
                      end="2020-02-15")
    cfg = preset_config(device="cpu", window=12, hidden=8, epochs=2, progress=False)
    recs = skill.skill_experiment(request, cfg, (6, 1), results=tmp_path)
    assert [r["config"]["lead_hours"] for r in recs] == [6, 1] and all(r["experiment"] == "skill" for r in recs)
    table = skill.skill_table(recs)
    points = ["40,-80 (cell 40.00N 280.00E)", "35,281.75 (cell 35.00N 281.75E)", "20,280 (cell 20.00N 280.00E)"]
    assert list(table.index) == [(p, lead) for p in points + [skill.POOLED] for lead in (6, 1)]
    # the same target hours at both leads: the test part's targets and the climatology's score agree
    for point in points:
        t = table.xs(point, level="point")
        assert t["targets"].nunique() == 1 and t["climatology_rmse_k"].nunique() == 1
    # persistence gets worse with the lead; the scores follow the one definition
    assert (table.xs(6, level="lead_hours")["persistence_rmse_k"].values
            > table.xs(1, level="lead_hours")["persistence_rmse_k"].values).all()
    for b in ("persistence", "climatology"):
        np.testing.assert_allclose(table[f"mse_skill_vs_{b}"], 1 - table["model_rmse_k"] ** 2 / table[f"{b}_rmse_k"] ** 2)
    # the pooled row is the run's own pooled figures (the reported forecast's and the baselines')
    for r in recs:
        pooled = table.loc[(skill.POOLED, r["config"]["lead_hours"])]
        m = r["metrics"]
        assert pooled["model_rmse_k"] == pytest.approx(m["test_rmse_k"], rel=1e-5)
        assert pooled["network_rmse_k"] == pytest.approx(m["network_test_rmse_k"], rel=1e-5)
        assert pooled["persistence_rmse_k"] == pytest.approx(m["persistence_rmse_k"], rel=1e-5)
        assert pooled["mse_skill_vs_persistence"] == pytest.approx(m["mse_skill_vs_persistence"], rel=1e-4)
        assert pooled["targets"] == r["data"]["scored"]["test"]["samples"]
        # the climatology is stated once per run: under a year of training, the hour-of-day mean
        assert r["data"]["climatology"]["kind"] == "hour-of-day"
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2


def test_leads_are_checked(capsys):
    with pytest.raises(ConfigError, match="leads"):
        skill.skill_experiment(Request(), preset_config(device="cpu"), [0])
    with pytest.raises(ConfigError, match="repeats 6"):
        skill.check_leads([6, 1, 6])
    # the command refuses a repeated lead in one line, before anything trains
    assert main(["skill", "--leads", "6,1,6", "--no-record"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--leads 6,1,6 repeats 6; give each lead once, e.g. 6,1" in err
    # a row per lead: a forecast of several hours would pool leads 6..8 in lead 6's row
    with pytest.raises(ConfigError, match="^horizon 3: skill across leads scores one lead per model"):
        skill.skill_experiment(Request(), preset_config(device="cpu", horizon=3), [6])
    assert main(["skill", "--leads", "6", "--horizon", "3", "--no-record"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--horizon 3: skill across leads scores one lead per model, and each row would " \
        "pool leads L..L+2 under lead L; use --horizon 1" in err


@pytest.fixture(scope="module")
def march_store(tmp_path_factory):
    """A local store with other dates than the sample: March 2019 only."""
    return write_sample(tmp_path_factory.mktemp("march") / "march.zarr", start="2019-03-01T00", end="2019-03-31T23",
                        lat=(40.5, 39.5), lon=(279.5, 280.5), variables=["2m_temperature"])


def test_a_local_store_without_dates_uses_its_valid_range_and_clips_an_end_past_it(march_store, tmp_path, capsys):
    assert main(["data", "--source", str(march_store), "--point", "40,280", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("note:") == 1
    assert "note: time range 2019-03-01T00..2019-03-31T23: this store's valid range (no --start/--end given)" in out
    assert "2019-03-01T00:00 .. 2019-03-31T23:00 (744 hours)" in out
    # from Python the notes name the request's fields as Python gives them
    fitted, notes = fit_times(Request(source=str(march_store), points=((40, 280),), end="2019-03-20"), start_given=False,
                              end_given=True)
    assert notes == ["start 2019-03-01T00: this store's first valid hour (no start given)"]
    assert fitted.start == "2019-03-01T00"
    # a training run on it, with an end past the store: clipped, said once, and recorded with the store's dates
    results = tmp_path / "runs.jsonl"
    code = main(["train", "--source", str(march_store), "--point", "40,280", "--end", "2019-06-30", "--window", "6",
                 "--hidden", "4", "--epochs", "1", "--device", "cpu", "--no-progress", "--results", str(results)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("note:") == 2 and out.count("climatology:") == 1
    assert "note: start 2019-03-01T00: this store's first valid hour (no --start given)" in out
    assert "note: end 2019-06-30 is past this store's last valid hour; clipped to 2019-03-31T23" in out
    record = json.loads(results.read_text())
    assert (record["data"]["start"], record["data"]["end"]) == ("2019-03-01T00", "2019-03-31T23")
    assert record["data"]["split_times"]["test"][1] == "2019-03-31 23:00:00"
    # the sample too: an end past it is clipped (without building it first to learn its range)
    assert main(["data", "--point", "20,280", "--start", "2021-06-30", "--end", "2021-12-31", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "note: end 2021-12-31 is past this store's last valid hour; clipped to 2021-06-30T23" in out
    assert "2021-06-30T00:00 .. 2021-06-30T23:00 (24 hours)" in out
    # a start after the store's end, or before its start, is an error naming the store's range
    assert main(["data", "--source", str(march_store), "--point", "40,280", "--start", "2019-04-02"]) == 2
    assert "start 2019-04-02 is after this store's last valid hour; its valid range is 2019-03-01T00..2019-03-31T23" \
        in capsys.readouterr().err
    assert main(["data", "--source", str(march_store), "--point", "40,280", "--start", "2019-02-01"]) == 2
    assert "outside this store's valid range 2019-03-01T00..2019-03-31T23" in capsys.readouterr().err


def test_results_show_the_seed(tmp_path, capsys):
    for seed in (0, 1):
        assert main(["train", "--end", "2020-01-20", "--window", "6", "--hidden", "4", "--epochs", "1", "--seed", str(seed),
                     "--device", "cpu", "--no-progress", "--results", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["results", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    end = lines[0].index(" seed ") + len(" seed")  # the column's values are right-aligned under its name
    assert [line[:end].split()[-1] for line in lines[1:]] == ["0", "1"]
