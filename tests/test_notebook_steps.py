"""The steps behind the notebooks, on small real inputs (the sample store; short CPU runs)."""

from __future__ import annotations

import pandas as pd
import pytest

from lstmnb import era5, records, train
from lstmnb import experiments
from lstmnb.notebooks import steps
from lstmnb.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_make_request_and_config():
    req = steps.make_request("sample", [[40, -80], [20, 280]], "2020-01-01", "2020-01-31")
    assert req.points == ((40.0, -80.0), (20.0, 280.0)) and req.box is None and req.variables == ("2m_temperature",)
    assert steps.make_request().source == "study"  # points: the study's real ERA5
    box = steps.make_request(box=[38, 42, 279, 281])
    assert box.source == "sample" and box.points is None and box.box == (38.0, 42.0, 279.0, 281.0)
    cfg = steps.make_config(device="cpu", epochs=2, threads=None, batch_size=None, fractions=[0.6, 0.2, 0.2])
    assert steps.make_config("published").batch_size == 128 and steps.make_config("published").preset == "published"
    assert cfg.epochs == 2 and cfg.threads is None and cfg.fractions == (0.6, 0.2, 0.2)
    assert cfg.batch_size == 256 and cfg.preset == "recommended"  # None keeps the preset's value
    with pytest.raises(ConfigError, match="unknown training parameter.*epoch"):
        steps.make_config(epoch=2)
    with pytest.raises(ConfigError, match="batch_size=0"):
        steps.make_config(batch_size=0)


def test_cycles_of_a_known_series():
    times = pd.date_range("2020-01-01", periods=24 * 60, freq="h")
    hour = pd.Series(times.hour, index=times)
    series = pd.DataFrame({"a": 280 + (hour == 12) * 24.0, "b": 290.0}, index=times)
    daily = steps.daily_cycle(series)
    assert daily.loc[12, "a"] == pytest.approx(23.0) and daily.loc[0, "a"] == pytest.approx(-1.0)
    assert (daily["b"] == 0).all()
    seasonal = steps.seasonal_cycle(series)
    assert len(seasonal) == 2 and seasonal["b"].tolist() == [290.0, 290.0]


def test_gpu_check():
    import torch

    reason = steps.gpu_check("cuda")
    assert (reason is None) == torch.cuda.is_available()
    if reason:
        assert "no usable CUDA GPU" in reason
    assert "not a CUDA device" in steps.gpu_check("cpu")


def test_epochs_experiment_and_skipped_record(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    request = steps.make_request(end="2020-01-10")
    base = steps.make_config(device="cpu", window=6, hidden=4, num_workers=0, progress=False, profile="test")
    windows, info = train.prepare_windows(request, base, progress=False)
    runs = experiments.epochs_experiment(windows, info, base, [1, 2], ["fast", "dataloader"], results=tmp_path)
    assert [(r["config"]["input_path"], r["config"]["epochs"]) for r in runs] == [
        ("fast", 1), ("fast", 2), ("dataloader", 1), ("dataloader", 2)]
    assert len(records.read_records(tmp_path)) == 4
    summary = steps.runs_summary(runs)
    assert list(summary["epochs"]) == [1, 2, 1, 2] and "reason" not in summary  # all-None columns dropped
    assert list(summary["input"]) == ["fast", "fast", "dataloader", "dataloader"]
    assert (summary["device"] == "cpu").all() and (summary["status"] == "ok").all()
    assert (summary["median epoch s"] > 0).all() and (summary["warm-up epoch s"] > 0).all()
    assert (summary["test RMSE K"] > 0).all() and (summary["persistence K"] > 0).all()
    assert steps.runs_summary([]).empty
    with pytest.raises(ConfigError, match="epochs_list"):
        experiments.epochs_experiment(windows, info, base, [], ["fast"], results=None)

    skipped = steps.record_skipped(train.with_overrides(base, device="cuda", experiment="epochs"), "no GPU", tmp_path)
    assert skipped["status"] == "skipped" and "timing" not in skipped and "metrics" not in skipped
    assert len(records.read_records(tmp_path)) == 5

    assert list(steps.windows_table(windows).index) == ["train", "val", "test"]
    model = steps.model_table(base, windows.n_features, windows.sizes()["train"])
    assert model["parameters"].iloc[0] > 0 and model["training GFLOPs/epoch"].iloc[0] > 0
    result = train.train(windows, train.with_overrides(base, epochs=1), data_info=info)
    week = steps.forecast_frame(result, point=1, days=1)
    assert len(week) == 24 and list(week.columns) == ["truth", "forecast", "persistence"]
    with pytest.raises(ConfigError, match="point=5"):
        steps.forecast_frame(result, point=5)
    assert steps.save_figure(steps.plot_forecast(week), tmp_path / "out", "week").exists()
    assert steps.save_figure(steps.plot_forecast(week), None, "week") is None


def test_store_overview_and_subset(tmp_path):
    store = era5.open_store("sample")
    table = steps.store_variables(store)
    assert table.loc["2m_temperature", "units"] == "K"
    ds = era5.extract(steps.make_request(end="2020-01-03"), progress=False)
    series = steps.series_frame(ds)
    assert series.shape == (72, 2)
    path = steps.save_subset(ds, tmp_path, "subset")
    assert pd.read_csv(path).shape[0] == 72 * 2


def test_eager_vs_graph_times_both_and_says_why(tmp_path):
    import torch

    request = steps.make_request("sample", [[40, 280]], "2020-01-01", "2020-01-15")
    # batch 32: two weeks give enough full batches for a capture (3 warm-up steps, then the captured one)
    base = steps.make_config(device="cuda" if torch.cuda.is_available() else "cpu", window=12, hidden=8,
                             batch_size=32, progress=False)
    windows, info = train.prepare_windows(request, base, progress=False)
    table, why = steps.eager_vs_graph(windows, info, base, 2, results=tmp_path)
    assert list(table.index) == ["eager", "CUDA graph"] and (table["samples/s"] > 0).all()
    recs = records.read_records(tmp_path)
    assert [r["experiment"] for r in recs] == ["graph-off", "graph-on"]
    if torch.cuda.is_available():
        assert recs[1]["cuda_graph"]["captured_steps"] > 0
        assert table.loc["CUDA graph", "graph used"] and "x the samples/s" in why
    else:  # nothing to capture on a CPU: the sentence says so, from the record
        assert why == "No graph was captured: runs on cpu; CUDA graphs need a CUDA GPU."


def test_windows_table_of_a_split_without_validation_part():
    """02 with the published preset and fit_split_dates None keeps the study's split (no validation part):
    the windows table raised TypeError on the empty part's hours (None) instead of showing 0 samples."""
    windows, _ = train.prepare_windows(None, steps.make_config("published", split_dates=None, device="cpu"),
                                       progress=False)
    table = steps.windows_table(windows)
    assert list(table["samples"]) == [17520, 0, 8688] and table.loc["val", "from"] == ""
    assert table.loc["test", "from"] == "2021-01-01 00:00:00" and pd.isna(table.loc["val", "persistence RMSE (K)"])
