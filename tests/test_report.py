"""Report tables from run records: device labels, the published epochs x devices form, merging records
from several machines, speedups, accuracy per device, loss curves, the published figures."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lstmnb import records, report

SHARED_PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "published_figures.yaml"


def run_record(device_kind: str, device_name: str, epochs: int, input_path: str, train_s: float, *,
               status: str = "ok", experiment: str = "epochs", strategy: str = "single", rmse: float = 0.8,
               host: str = "host") -> dict:
    """A record as lstmnb.training writes it, with only the fields the report reads."""
    rec = {
        "schema": records.SCHEMA, "run_id": f"{host}-{device_kind}-{input_path}-{epochs}-{train_s}",
        "started": "2026-01-01T00:00:00+00:00", "experiment": experiment, "status": status, "reason": None,
        "device": {"kind": device_kind, "name": device_name, "count": 1, "hostname": host},
        "profile": host, "config": {"epochs": epochs, "input_path": input_path, "strategy": strategy, "batch_size": 128,
                                     "pin_memory": False, "persistent_workers": False},  # the study's loader
    }
    if status == "ok":
        rec.update(
            timing={"train_s": train_s, "samples_per_s": 18000 * epochs / train_s},
            metrics={"test_rmse_k": rmse, "persistence_rmse_k": 1.0, "climatology_rmse_k": 2.5,
                     "val_persistence_rmse_k": 0.95},
            epochs=[{"epoch": e, "train_loss": 1.0 / e, "val_loss": 1.1 / e, "val_rmse_k": 1.0 + 1.0 / e}
                    for e in range(1, epochs + 1)],
        )
    else:
        rec["reason"] = "no CUDA GPU visible on this machine"
    return rec


def write_jsonl(path: Path, recs: list[dict], broken_after: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in recs]
    if broken_after is not None:
        lines.insert(broken_after, '{"schema": 1, "run_id": "half-writ')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def two_machines(tmp_path) -> Path:
    """Records from a CPU-only laptop (with a skipped GPU run and a broken line) and a Colab T4 machine."""
    laptop = [run_record("cpu", "Intel(R) Core(TM) i7", e, p, s, host="laptop")
              for p, base in (("dataloader", 9.0), ("fast", 3.0)) for e, s in ((5, base * 5), (10, base * 10), (15, base * 15))]
    laptop.append(run_record("cuda", None, 5, "fast", 0, status="skipped", host="laptop"))
    colab = [run_record("cuda", "Tesla T4", e, p, s, host="colab", rmse=0.79)
             for p, base in (("dataloader", 1.5), ("fast", 0.3)) for e, s in ((5, base * 5), (10, base * 10), (15, base * 15))]
    colab.append(run_record("cuda", "Tesla T4", 5, "fast", 99.0, host="colab", strategy="dataparallel"))
    write_jsonl(tmp_path / "laptop" / "runs.jsonl", laptop, broken_after=3)
    write_jsonl(tmp_path / "colab" / "runs.jsonl", colab)
    return tmp_path


@pytest.mark.parametrize("kind, name, label", [
    ("cpu", "AMD EPYC 7B13", "CPU"), ("cuda", "Tesla T4", "T4"), ("cuda", "Tesla P100-PCIE-16GB", "P100"),
    ("cuda", "Tesla V100-SXM2-32GB", "V100"), ("cuda", "NVIDIA A40", "A40"), ("cuda", "NVIDIA A100-SXM4-80GB", "A100"),
    ("cuda", "NVIDIA A100 80GB PCIe", "A100"), ("cuda", "NVIDIA H100 80GB HBM3", "H100"),
    ("cuda", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"), ("cuda", "NVIDIA A10", "NVIDIA A10"),
    ("cuda", None, "CUDA"), ("mps", "Apple MPS", "MPS"),
])
def test_device_labels(kind, name, label):
    assert report.device_label(kind, name) == label


def test_device_order_follows_the_published_columns():
    assert report.order_devices(["A100", "RTX", "CPU", "A40", "T4"]) == ["CPU", "T4", "A40", "A100", "RTX"]


def test_records_from_two_machines_merge_into_the_published_form(two_machines):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = records.load_records(two_machines)
    broken = [str(w.message) for w in caught if "broken record line" in str(w.message)]
    assert broken and "laptop/runs.jsonl:4" in broken[0]  # the file and line are named
    assert len(df) == 6 + 1 + 6 + 1  # every good record kept

    tables = {title.split(", ")[-1]: t for title, t, _ in report.epochs_tables(report.comparison_rows(df))}
    table = tables["DataLoader path: training seconds"]
    assert list(table.index) == [5, 10, 15]
    assert list(table.columns) == ["CPU · laptop", "T4 · colab"]
    assert table.loc[10, "CPU · laptop"] == "90" and table.loc[15, "T4 · colab"] == "22.5"
    # the DataParallel run and the skipped run are not single-device timings
    assert tables["fast input path: training seconds"].loc[5, "T4 · colab"] == "1.5"


def test_accuracy_never_mixes_epochs_counts(tmp_path):
    """One epoch of the study's setting does not beat persistence, five do: two rows, never one median."""
    recs = [run_record("cpu", "cpu", 1, "dataloader", 1.7, rmse=3.2), run_record("cpu", "cpu", 1, "dataloader", 1.6, rmse=3.0),
            run_record("cpu", "cpu", 5, "dataloader", 8.0, rmse=0.85)]
    acc = report.rmse_by_device(records.load_records(write_jsonl(tmp_path / "runs.jsonl", recs)))
    by_epochs = acc.reset_index().set_index("epochs")
    assert by_epochs.loc[1, "runs"] == 2 and by_epochs.loc[1, "model RMSE (K)"] == pytest.approx(3.1)
    assert not by_epochs.loc[1, "beats persistence"] and by_epochs.loc[5, "beats persistence"]
    assert by_epochs.loc[5, "model RMSE (K)"] == pytest.approx(0.85)


def test_repeats_take_the_median(tmp_path):
    recs = [run_record("cpu", "cpu", 5, "fast", s) for s in (10.0, 11.0, 30.0)]
    df = records.load_records(write_jsonl(tmp_path / "runs.jsonl", recs))
    ((_, table, _),) = report.epochs_tables(report.comparison_rows(df))
    assert table.loc[5].tolist() == ["11"]


def test_accuracy_loss_curves_and_status_per_device_column(two_machines):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = records.load_records(two_machines)
    acc = report.rmse_by_device(df)  # per device on a machine: two laptops' CPUs would be two rows
    # one row per device column, problem, setting and epochs count (the report's one median rule)
    assert list(dict.fromkeys(acc.index.get_level_values("device column"))) == ["CPU · laptop", "T4 · colab"]
    assert len(acc) == 12 and (acc["runs"] == 1).all()
    assert sorted(set(acc.index.get_level_values("epochs"))) == [5, 10, 15]
    t4 = acc.xs("T4 · colab", level="device column")
    assert t4["model RMSE (K)"].tolist() == pytest.approx([0.79] * 6)
    assert t4["beats persistence"].all() and t4["beats climatology"].all()

    curves = report.loss_curves(df)
    assert len(curves) == 2 * (5 + 10 + 15) * 2
    assert set(curves["device"]) == {"CPU · laptop", "T4 · colab"}
    assert (curves["val_persistence_rmse_k"] == 0.95).all()  # the baseline line of the plot

    status = report.status_table(df)
    skipped = status[status["status"] == "skipped"]
    assert skipped["device"].tolist() == ["CUDA"] and "no CUDA GPU" in skipped["reason"].iloc[0]


def test_no_records_give_empty_tables(tmp_path):
    df = records.load_records(tmp_path)
    assert df.empty
    assert report.rmse_by_device(df).empty and report.loss_curves(df).empty
    assert report.epochs_tables(report.comparison_rows(df)) == []


def test_only_skipped_records_give_no_timing_table(tmp_path):
    df = records.load_records(write_jsonl(tmp_path / "runs.jsonl", [run_record("cuda", None, 5, "fast", 0, status="skipped")]))
    assert report.epochs_tables(report.comparison_rows(df)) == []
    assert report.status_table(df)["status"].tolist() == ["skipped"]


def test_published_figures_are_the_shared_file():
    """The package copy holds every figure of the shared file unchanged; it only adds the provenance block and the
    study's printed training losses."""
    if not SHARED_PUBLISHED.exists():
        pytest.skip(f"{SHARED_PUBLISHED} is not in this checkout; the package copy cannot be compared")
    ours, shared = report.load_published(), yaml.safe_load(SHARED_PUBLISHED.read_text())
    assert set(ours["era5_lstm_gpu_benchmark"].pop("provenance")["machine"]) == set(shared["era5_lstm_gpu_benchmark"]["devices"])
    assert ours["era5_lstm_gpu_benchmark"].pop("training_loss")["carc_15_epochs"][5] == 0.0048
    assert ours == shared


def test_published_figures():
    ours = report.load_published()
    table = report.published_epochs_table(ours)
    assert list(table.index) == [5, 10, 15]
    assert list(table.columns) == ["CPU", "T4", "P100", "V100", "A40"]
    assert table.loc[10, "T4"] == 98.20  # the T4 jump at 10 epochs, as published
    titles = list(report.published_tables(ours))
    assert titles and all(t.startswith("published") for t in titles)


def test_plots_return_figures(two_machines):
    import matplotlib

    matplotlib.use("Agg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = records.load_records(two_machines)
    assert len(report.plot_loss_curves(report.loss_curves(df)).axes) == 2
    assert len(report.plot_loss_curves(pd.DataFrame()).axes) == 2


def test_scaling_table_speedup_and_efficiency(tmp_path):
    recs = []
    for strategy, rates in (("ddp", {1: 1000.0, 2: 1900.0, 4: 3600.0}), ("dataparallel", {1: 1000.0, 2: 1200.0})):
        for n, rate in rates.items():
            rec = run_record("cuda", "Tesla V100-SXM2-32GB", 3, "fast", 1.0, experiment="scaling-weak", strategy=strategy)
            rec["timing"].update(samples_per_s=rate, epoch_s_median=1e4 / rate)
            rec["world_size"] = n
            recs.append(rec)
    recs.append(run_record("cuda", None, 3, "fast", 0, status="skipped", experiment="scaling-weak", strategy="ddp"))
    df = records.load_records(write_jsonl(tmp_path / "runs.jsonl", recs))
    table = report.scaling_table(df).xs("weak", level="mode")
    ddp, dp = (table[(table["device"] == "V100") & (table["strategy"] == s)] for s in ("ddp", "dataparallel"))
    assert ddp.index.tolist() == [1, 2, 4]
    assert ddp.loc[4, "speedup"] == pytest.approx(3.6) and ddp.loc[4, "efficiency"] == pytest.approx(0.9)
    assert dp.loc[2, "speedup"] == pytest.approx(1.2)
    assert (ddp["repeats"] == 1).all() and ddp["flag"].str.contains("only 1 repeat").all()  # the one timing rule
    assert report.scaling_table(records.load_records(tmp_path / "none")).empty


def test_weak_scaling_without_its_own_one_device_run_takes_the_strong_one_of_the_same_batch(tmp_path):
    """Weak scaling from 2 devices up, beside strong scaling from 1: one device with a batch of 128 is the
    same run in both, so the weak rows get their speedup from it; a weak group with no such run gets none."""
    recs = []
    for mode, strategy, n, per_device, rate in (("strong", "ddp", 1, 128, 1000.0), ("strong", "ddp", 2, 64, 1500.0),
                                                ("weak", "ddp", 2, 128, 1800.0), ("weak", "dataparallel", 2, 128, 1500.0)):
        rec = run_record("cpu", None, 3, "fast", 1.0, experiment=f"scaling-{mode}", strategy=strategy)
        rec["timing"]["samples_per_s"] = rate
        rec["world_size"] = n
        rec["scaling"] = {"per_device_batch": per_device, "global_batch": per_device * n}
        recs.append(rec)
    table = report.scaling_table(records.load_records(write_jsonl(tmp_path / "runs.jsonl", recs)))
    weak = table.xs("weak", level="mode").set_index("strategy", append=True)
    assert weak.loc[(2, "ddp"), "speedup"] == pytest.approx(1.8) and weak.loc[(2, "ddp"), "efficiency"] == pytest.approx(0.9)
    assert pd.isna(weak.loc[(2, "dataparallel"), "speedup"]), "no one-device run of its strategy"
    assert weak.loc[(2, "dataparallel"), "note"] == "no speedup: no one-rank run of the same batch"


def test_the_printed_epochs_table_shows_the_training_loss_fall():
    """`lstmnb train` and quickstart print ``format_table(epochs_table(record))``: a real short run's losses,
    each to three significant figures (three decimals printed later epochs' losses all as 0.005 or 0.000)."""
    from test_train import _series

    from lstmnb.training import preset_config, train
    from lstmnb.windows import make_windows

    values, times = _series(24 * 30)
    cfg = preset_config("published", window=12, hidden=4, epochs=3, input_path="fast", progress=False, device="cpu",
                        split_dates=None)
    record = train(make_windows(values, times, cfg.window_config()), cfg).record
    text = report.format_table(report.epochs_table(record))
    losses = [e["train_loss"] for e in record["epochs"]]
    for loss in losses:
        assert (f"{loss:.3g}" if loss < 1 else f"{loss:,.3f}") in text
    assert len({f"{loss:.3g}" for loss in losses}) == 3  # three epochs, three different losses on the page
