"""The study's real ERA5 (shipped, the default source) and its setting (``--preset published``) replicated:
the same samples per epoch and the study's printed training losses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from lstmnb.cli import main
from lstmnb.data import SAMPLE, STUDY, Request, check_request, extract
from lstmnb.datasets.arco_layout import store_problem
from lstmnb.datasets.study import ATTRIBUTION, STUDY_POINTS, study_store, study_values
from lstmnb.errors import ConfigError
from lstmnb.experiments import replication
from lstmnb.training import preset_config

SHARED_CSV = Path(__file__).resolve().parents[2] / "shared" / "data" / "era5_t2m_published_points_2020-01_2021-06.csv"


def test_the_default_request_reads_the_real_data_through_the_arco_layout():
    request = Request()
    assert request.source == STUDY and request.as_record()["kind"] == "real"
    store = study_store()
    assert store_problem(store) is None
    ds = xr.open_zarr(store, chunks=None)
    assert ds["2m_temperature"].dims == ("time", "latitude", "longitude") and ds["2m_temperature"].attrs["units"] == "K"
    assert list(ds["latitude"].values) == [40.0, 20.0] and list(ds["longitude"].values) == [280.0]
    assert ds.attrs["attribution"] == ATTRIBUTION and "Copernicus" in ATTRIBUTION
    got = extract(request, progress=False)
    times, _, _, values = study_values()
    assert got.sizes == {"time": 13128, "point": 2}
    np.testing.assert_array_equal(got["2m_temperature"].values, values)
    assert pd.Timestamp(got["time"].values[0]) == times[0] and pd.Timestamp(got["time"].values[-1]) == times[-1]
    # the real sea point is smooth and the land point is not (std 1.5 K against 9.7 K: shared/data/README.md)
    assert 1.0 < values[:, 1].std() < 2.0 and 8.5 < values[:, 0].std() < 11.0


@pytest.mark.skipif(not SHARED_CSV.exists(), reason="../shared/data is not beside this checkout")
def test_the_shipped_values_are_the_studys_file():
    table = pd.read_csv(SHARED_CSV)
    _, lat, lon, values = study_values()
    for p, (la, lo) in enumerate(STUDY_POINTS):
        rows = table[(table.latitude == la) & (table.longitude == lo)]
        np.testing.assert_array_equal(rows["2m_temperature"].to_numpy(np.float32), values[:, p])


@pytest.mark.parametrize("request_, named", [
    (Request(points=((35.0, 281.75),)), "points 35,281.75: not in the study's data; source='study' holds"),
    (Request(source=STUDY, box=(38, 40, 279, 280)), "a box needs an area"),
    (Request(end="2021-12-31"), "time range 2020-01-01T00..2021-12-31T23 is outside the study's data"),
    (Request(variables=("surface_pressure",)), "variables surface_pressure: not in the study's data"),
])
def test_what_the_real_data_cannot_serve_is_one_line_naming_what_it_holds(request_, named):
    from lstmnb.rules import CLI

    for say, other in ((None, "source='arco-v3'"), (CLI, "--source arco-v3")):  # Python's spelling, the CLI's
        with pytest.raises(ConfigError) as err:
            check_request(request_) if say is None else check_request(request_, say=say)
        text = str(err.value)
        assert (named if say is None else named.replace("source='study'", "--source study")) in text and "\n" not in text
        assert "40N 280E" in text and "2020-01-01..2021-06-30" in text and other in text and "sample" in text


def test_a_box_uses_the_synthetic_sample_and_western_longitudes_name_the_same_points():
    assert Request(box=(38, 40, 279, 280)).source == SAMPLE
    assert Request(box=(38, 40, 279, 280)).as_record()["kind"] == "synthetic"
    check_request(Request(points=((40, -80), (20, -80))))  # 280E given as -80


def test_the_published_preset_is_the_studys_setting():
    cfg = preset_config("published")
    assert (cfg.layers, cfg.hidden, cfg.window, cfg.lead_hours, cfg.batch_size) == (2, 64, 24, 1, 128)
    assert (cfg.input_path, cfg.num_workers, cfg.lr, cfg.fused_adam, cfg.epochs, cfg.patience) == \
        ("dataloader", 2, 1e-3, False, 5, None)
    assert (cfg.residual, cfg.calendar, cfg.cycles, cfg.point_weights, cfg.blend) == (False, False, False, "none", "off")
    assert cfg.split_dates == ("2021-01-01", "2021-01-01")  # the same date twice: no validation part
    source = cfg.as_record()["preset_source"]
    assert "Parallel_LSTM_Model_run_CARC.ipynb" in source["source"] and len(source["differences"]) == 6
    # the study's DataLoader(batch_size=128, shuffle=True, num_workers=2) kept torch's defaults: pageable host
    # memory and workers started afresh every epoch
    assert (cfg.pin_memory, cfg.persistent_workers) == (False, False)
    # and its code's costs (rung 0 of the ladder): a tensor per sample, glibc's heap, the loss read every step
    assert (cfg.sample_tensors, cfg.heap, cfg.loss_every, cfg.cuda_graph) == ("per_sample", "system", 1, False)
    with pytest.raises(ConfigError, match="leaves no validation part, which patience=5 need"):
        preset_config("published", patience=5).validate()


def test_the_published_presets_dataloader_is_the_studys():
    """The DataLoader the published preset trains from has the study's settings (17,520 samples of its data,
    batch 128, 2 workers started afresh every epoch, pageable memory); persistent_workers=True keeps them."""
    import torch

    from lstmnb.training import prepare_windows
    from lstmnb.training.trainer import Trainer

    cfg = preset_config("published", device="cpu", progress=False)
    windows, _ = prepare_windows(Request(), cfg, progress=False)
    loader = Trainer(windows, cfg, torch.device("cpu")).feed.make_loader()
    assert len(loader.dataset) == 17520 and loader.batch_size == 128
    assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == (2, False, False)
    own = Trainer(windows, preset_config("published", persistent_workers=True), torch.device("cpu")).feed.make_loader()
    assert own.persistent_workers


@pytest.mark.slow
def test_the_published_preset_reproduces_the_studys_printed_losses(tmp_path, capsys):
    """5 epochs of the study's setting on its data: the mean training loss of epochs 3-5 within 35% of the
    study's printed 0.0072, 0.0055, 0.0048 (measured: 0.0074, 0.0057, 0.0047), 17,520 samples per epoch."""
    results = tmp_path / "runs.jsonl"
    assert main(["replicate", "--epochs", "5", "--no-progress", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    record = json.loads(results.read_text().splitlines()[-1])
    assert record["status"] == "ok" and record["data"]["kind"] == "real" and record["data"]["source"] == STUDY
    assert record["data"]["sizes"] == {"train": 17520, "val": 0, "test": 8688}
    assert all(e["samples_per_s"] and e["val_rmse_k"] is None for e in record["epochs"])
    losses = [e["train_loss"] for e in record["epochs"]]
    for got, printed in zip(losses[2:5], (0.0072, 0.0055, 0.0048)):
        assert abs(got - printed) / printed <= 0.35, (losses, printed)
    assert record["config"]["layers"] == 2 and record["config"]["batch_size"] == 128
    assert record["model"]["parameters"] == 4 * 64 * (1 + 64 + 2) + 4 * 64 * (2 * 64 + 2) + 65  # two LSTM layers + head
    assert replication.closeness(record)["reproduced"]
    assert "lstmnb reproduces the study's training loss" in out and "17,520 samples per epoch" in out
    table = replication.loss_table(record)
    assert list(table["study (CARC)"]) == [0.1655, 0.0168, 0.0072, 0.0055, 0.0048]


@pytest.mark.slow
def test_skill_on_the_study_data_per_point_puts_both_models_on_the_same_hours(tmp_path):
    """The report's per-point table: the study's model and the recommended forecaster, trained here on the
    study's data (small, 1 epoch), scored on the same 2021-01..06 hours; a run on the synthetic sample stays out."""
    from lstmnb import records, report
    from lstmnb.training import run

    small = dict(epochs=1, progress=False, device="cpu")
    run(Request(), preset_config("published", num_workers=0, **small), results=tmp_path)  # the study's model
    run(Request(), preset_config("published", input_path="fast", **small), results=tmp_path)  # fed another way
    # another setting, left out: the first run's record as a run at batch 256 would have written it
    other = json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[0])
    other["run_id"], other["config"]["batch_size"] = other["run_id"] + "-256", 256
    with open(tmp_path / "runs.jsonl", "a") as fh:
        fh.write(json.dumps(other) + "\n")
    run(Request(), preset_config("recommended", split_dates=("2020-10-01", "2021-01-01"), hidden=8, **small),
        results=tmp_path)
    run(Request(source="sample", end="2020-03-31"), preset_config("recommended", hidden=8, **small), results=tmp_path)
    table = report.study_skill_table(records.load_records([tmp_path]))
    # the recommended preset with a smaller model says so: its RMSE is not the recommended forecaster's
    assert list(table["forecast"].unique()) == ["the study's model, 1 epoch", "recommended (lstmnb), hidden 8"]
    assert list(table["point"].unique()) == ["40,280", "20,280"] and set(table["lead h"]) == {1}
    # the study's model fed by a DataLoader and by the fast path: two rows of one run each, never their median
    study = table[table["forecast"] == "the study's model, 1 epoch"]
    assert sorted(study["input"]) == ["DataLoader", "DataLoader", "fast", "fast"] and set(study["runs"]) == {1}
    for _, g in table.groupby("point"):  # the same target hours: the same persistence for both forecasts
        assert np.ptp(g["persistence RMSE K"]) < 1e-9
        assert np.allclose(1 - (g["model RMSE K"] / g["persistence RMSE K"]) ** 2, g["MSE skill vs persistence"])
    sea = table[table["point"] == "20,280"]["persistence RMSE K"].iloc[0]
    assert 0.15 < sea < 0.25  # the real sea point's 1 h persistence on 2021-01..06 (0.194 K measured)
    summary = report.study_skill_summary(table)
    assert summary.startswith("On the study's test part (2021-01..06): at 40,280,") and "of 3 forecasts" in summary
    for _, r in table[table["MSE skill vs persistence"] <= 0].iterrows():  # each loser named, as a loser
        said = f"{r['forecast']} ({r['input']}) at 1 h does not (MSE skill {r['MSE skill vs persistence']:.2f})"
        assert said in summary


def test_the_study_skill_table_leaves_out_a_run_tested_on_fewer_hours(tmp_path):
    """A run whose test part starts on 2021-01-01 but ends with an earlier --end (2021-03-31) was scored on
    other hours (its persistence RMSE at 40N: 0.980 K against 1.054 K on 2021-01..06): it was pooled into the
    table that speaks for 2021-01..06 beside runs on every hour. Only runs tested on 2021-01..06 stay."""
    from lstmnb import records, report
    from lstmnb.training import run

    cfg = preset_config("recommended", split_dates=("2020-10-01", "2021-01-01"), hidden=4, epochs=1, progress=False,
                        device="cpu", threads=1)
    whole = run(Request(), cfg, results=tmp_path).record
    run(Request(end="2021-03-31"), cfg, results=tmp_path)
    table = report.study_skill_table(records.load_records([tmp_path]))
    assert list(table["runs"]) == [1, 1] and list(table["point"]) == ["40,280", "20,280"]
    expected = [p["persistence_rmse_k"] for p in whole["skill"]["per_point"]]
    assert np.allclose(table["persistence RMSE K"], expected)


def test_a_run_on_other_data_is_not_called_a_replication():
    record = {"data": {"source": "sample", "kind": "synthetic"}, "config": {"preset": "published",
                                                                           "split_dates": ["2021-01-01"] * 2}}
    assert replication.verdict(record).startswith("This run is not the study's setting on the study's data "
                                                  "(synthetic data from 'sample')")
