"""The report across machines, built from mixed records: a real CPU training run made here, CPU records of
another machine, a skipped GPU run, lstmnb's reference records (real H100 runs) and the published figures.
Checks the findings text and table, the data each chart draws (not pixels), provenance, and that the
reference records stay apart from the user's own (the comparison across machines: test_report_page.py)."""

from __future__ import annotations

import json
import platform
import warnings
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from test_report import run_record, write_jsonl

from lstmnb import records, report

SHARED_RECORDS = Path(__file__).resolve().parents[2] / "shared" / "records"
REFERENCE_FILES = ["h100-cli-runs.jsonl", "h100-notebook-series.jsonl", "h100-scratch-and-sweep.jsonl",
                   "h100-study-setting-corrected.jsonl", "h100-study-setting.jsonl", "h200-ladder.jsonl"]


def raw_reference() -> list[dict]:
    """The shipped reference records read as plain JSON, to compute expected figures independently."""
    folder = Path(report.__file__).resolve().parent.parent / "reference_records"
    return [json.loads(line) for name in REFERENCE_FILES for line in (folder / name).read_text().splitlines() if line]


def seconds_of(recs, *, kind, epochs, input_path, batch=64, graph=False, points=2, residual=False, source="sample"):
    """Training seconds of the finished single-device runs matching a setting (plain dict filtering)."""
    return [r["timing"]["train_s"] for r in recs
            if r["status"] == "ok" and r["config"].get("strategy") == "single" and r["device"]["kind"] == kind
            and r["data"].get("source", "sample") == source
            and r["config"]["epochs"] == epochs and r["config"]["input_path"] == input_path
            and r["config"]["batch_size"] == batch and r["config"]["cuda_graph"] == graph
            and r["config"]["residual"] == residual and len(r["data"]["points"]) == points
            and r["experiment"] not in ("batch-sweep", "speed")]


@pytest.fixture(scope="module")
def reference():
    return report.load_reference_records()


@pytest.fixture(scope="module")
def published():
    return report.load_published()


@pytest.fixture(scope="module")
def own_records(tmp_path_factory):
    """The user's results: a real 2-epoch CPU run on a small synthetic series (written here, by lstmnb),
    CPU runs of the published setting from a laptop, and a GPU run the laptop had to skip."""
    from test_train import _series

    from lstmnb.training import preset_config, train
    from lstmnb.windows import make_windows

    root = tmp_path_factory.mktemp("results")
    values, times = _series()
    cfg = preset_config("published", window=12, hidden=8, epochs=2, input_path="fast", progress=False, device="cpu",
                        split_dates=None)  # 30 days: the split by fractions, not at 2021-01-01
    windows = make_windows(values, times, cfg.window_config())
    real = train(windows, cfg).record
    records.append_record(real, root / "here" / "runs.jsonl")
    laptop = [run_record("cpu", "Intel(R) Core(TM) i7", e, "dataloader", 9.0 * e, host="laptop") for e in (5, 10, 15)]
    laptop.append(run_record("cuda", None, 5, "fast", 0, status="skipped", host="laptop"))
    write_jsonl(root / "laptop" / "runs.jsonl", laptop)
    return root


def test_reference_records_ship_with_the_package(reference):
    shipped = resources.files("lstmnb").joinpath("reference_records")
    assert sorted(p.name for p in shipped.iterdir() if p.name.endswith(".jsonl")) == REFERENCE_FILES
    raw = raw_reference()
    assert len(reference) == len(raw) == 77
    assert set(reference["device.hostname"]) == {"vm"}
    assert set(reference["software.git_commit"].str[:7]) == {"dc6aa31", "a7631a2", "7a75be1", "0711b99"}
    labels = {report.device_label(k, n) for k, n in zip(reference["device.kind"], reference["device.name"])}
    assert labels == {"CPU", "H100", "H200"}
    note = report.reference_note()
    assert all(s in note for s in ("H100", "H200", "dc6aa31", "2026-11-22", "3763319", "7a75be1", "2026-11-27",
                                   "0711b99", "2026-11-30"))
    if SHARED_RECORDS.exists():  # the package copy is the shared measurement, unedited
        for name in [n for n in REFERENCE_FILES if (SHARED_RECORDS / n).exists()]:
            shipped = Path(report.__file__).resolve().parent.parent / "reference_records" / name
            assert shipped.read_bytes() == (SHARED_RECORDS / name).read_bytes()


@pytest.mark.parametrize("config, label", [
    ({"batch_size": 128, "lr": 0.001, "input_path": "dataloader", "num_workers": 2}, report.LIKE_FOR_LIKE),
    ({"batch_size": 64, "lr": 0.001, "input_path": "dataloader", "num_workers": 2}, "batch 64 · DataLoader"),
    ({"input_path": "dataloader", "num_workers": 0}, "published setting · DataLoader (0 workers)"),
    # the study's loader was torch's defaults: pinned memory and workers kept between epochs are differences
    ({"input_path": "dataloader", "num_workers": 2, "pin_memory": True, "persistent_workers": True},
     "published setting · DataLoader (pinned memory, workers kept)"),
    ({"input_path": "dataloader", "num_workers": 4, "persistent_workers": True}, "published setting · DataLoader (4 workers, workers kept)"),
    ({"input_path": "fast", "cuda_graph": True}, "published setting, CUDA graph · fast input"),
    ({"batch_size": 256, "lr": 0.004, "residual": True, "amp": "auto", "input_path": "fast"},
     "batch 256, lr 0.004, residual, AMP auto · fast input"),
    # the published optimisation with the recommended inputs and a blended forecast is not the published setting
    ({"batch_size": 128, "lr": 0.001, "calendar": True, "cycles": True, "point_weights": "persistence",
      "blend": "baselines", "input_path": "dataloader", "num_workers": 2},
     "calendar inputs, cycles input, persistence point weights, baselines blend · DataLoader"),
])
def test_setting_labels(config, label):
    assert report.setting_label(config) == label


def test_a_record_from_before_the_persistent_workers_knob_kept_its_workers():
    """lstmnb's loader kept its workers between epochs until the knob existed: such a record is not like for like."""
    old = run_record("cpu", "Intel(R) Core(TM) i7", 5, "dataloader", 45.0, host="laptop")
    del old["config"]["persistent_workers"]
    new = run_record("cpu", "Intel(R) Core(TM) i7", 5, "dataloader", 47.0, host="laptop")
    rows = report.comparison_rows(pd.json_normalize([old, new]), None, None).set_index("setting")
    assert rows.loc["published setting · DataLoader (workers kept)", "seconds"] == 45.0
    assert rows.loc[report.LIKE_FOR_LIKE, "seconds"] == 47.0
    assert rows["like_for_like"].astype(bool).to_dict() == {"published setting · DataLoader (workers kept)": False,
                                                             report.LIKE_FOR_LIKE: True}


@pytest.mark.parametrize("problem, label", [
    ({"points": 2, "start": "2020-01-01", "end": "2021-06-30", "window": 24, "hidden": 64}, report.PUBLISHED_PROBLEM_LABEL),
    ({"points": 90, "start": "2020-01-01", "end": "2021-06-30", "window": 24, "hidden": 64}, "90 points"),
    ({"points": 2, "start": "2020-01-01", "end": "2020-01-21", "window": 12, "hidden": 8},
     "2020-01-01..2020-01-21, window 12, hidden 8"),
    ({"points": 2, "places": ((20.0, 280.0), (40.0, 280.0))}, report.PUBLISHED_PROBLEM_LABEL),
    ({"points": 2, "places": ((35.0, 10.0), (40.0, 280.0))}, "other points"),  # as many points, not the study's
])
def test_problem_labels(problem, label):
    assert report.problem_label(problem) == label


def test_runs_at_other_points_are_another_problem():
    def at(points, rmse, stopped_early=False, host="laptop"):
        rec = run_record("cpu", "Intel(R) Core(TM) i7", 15, "dataloader", 40.0 + rmse, rmse=rmse, host=host)
        rec["data"] = {"points": points}
        rec["metrics"]["stopped_early"] = stopped_early
        return rec

    study, elsewhere = [[40.0, -80.0], [20.0, 280.0]], [[35.0, 10.0], [40.0, 280.0]]  # -80 E is 280 E
    df = pd.json_normalize([at(study, 0.70), at(study, 0.60, stopped_early=True), at(elsewhere, 3.0)])
    rows = report.comparison_rows(df, None, None)
    assert sorted(rows["problem"]) == ["other points", report.PUBLISHED_PROBLEM_LABEL]
    assert rows.set_index("problem")["like_for_like"].astype(bool).to_dict() == {
        "other points": False, report.PUBLISHED_PROBLEM_LABEL: True}
    # the early-stopped run's seconds are not the epochs asked for: never a median of the comparison
    assert rows.set_index("problem")["runs"].to_dict() == {"other points": 1, report.PUBLISHED_PROBLEM_LABEL: 1}


def test_findings_from_the_reference_records(reference, published):
    raw = raw_reference()
    text, table = report.findings(pd.DataFrame(), published, reference)
    pub = published["era5_lstm_gpu_benchmark"]["epochs"][5]  # the table is at 5 epochs, where most columns have runs
    assert "lstmnb's reference records: 77 records from 2 machines (vm: Intel Xeon, 16 cores, NVIDIA H100 80GB HBM3; " \
           "2026-11-22..2026-11-27; vm: Intel Xeon, 16 cores, NVIDIA H200; 2026-11-30): H100 on vm (H100) measured" in text
    # every commit the records name, not the first machine row's
    assert "(lstmnb 0.1.0 @ dc6aa31, 7a75be1, a7631a2, 0711b99)" in text
    # like for like is the study's code (rung 0: a tensor per sample, the study's loader, the loss read every step):
    # the H200 ladder's; the earlier H100 DataLoader runs pinned memory and kept workers, or read the loss every 100
    # steps (rung 3), and are labelled so, never like for like
    (h200_study,), (cpu_study,) = ([r["timing"]["train_s"] for r in raw if (r.get("ladder") or {}).get("rung") == 0
                                    and r["device"]["kind"] == kind] for kind in ("cuda", "cpu"))
    settings = set(report.comparison_rows(None, reference, None)["setting"])
    assert {"published setting · DataLoader (pinned memory, workers kept)",
            "published setting, loss read every 100 steps · DataLoader"} <= settings
    assert "no run records of your own" in text
    assert "no multi-GPU records: run 05 on a node with 2+ GPUs" in text

    h200, h100 = table.loc["H200 · vm (H200) · reference"], table.loc["H100 · vm (H100) · reference"]
    assert float(h200["fastest s"]) > 0 and "CUDA graph" in h200["fastest setting"] and "CUDA graph" in h100["fastest setting"]
    # like for like at 5 epochs; the CPU of the same machine on the same setting is its own row, the ladder's
    # explicit --threads (the count the run would have taken anyway) no difference
    assert h200["like for like s"] == f"{h200_study:.3g}" and h100["like for like s"] == "—"
    assert table.loc["CPU (16 cores) · vm (H200) · reference", "like for like s"] == f"{cpu_study:.3g}"
    assert h200["problem"] == report.PUBLISHED_PROBLEM_LABEL and h200["epochs"] == 5
    # published seconds as published (two decimals), never rounded to three figures
    assert table.loc["A40 · published", "like for like s"] == f"{pub['A40']:g}"
    # no speedups here: a GPU over its own CPU is the ladder's, over the study's CPU run the study's comparison's
    assert not [c for c in table.columns if c.startswith("x ")]
    assert set(table["source"]) == {report.REFERENCE, report.PUBLISHED}


@pytest.mark.slow
def test_mixed_records_make_one_report(own_records, reference, published):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        own = records.load_records(own_records)
    n_own = len(own)
    rows = report.comparison_rows(own, reference, published)
    assert len(own) == n_own and not own["_file"].str.contains("reference_records").any()  # never mixed in
    assert set(rows["source"]) == {report.MEASURED, report.REFERENCE, report.PUBLISHED}
    here = f"CPU ({own['device.cpu_cores'].dropna().iloc[0]:.0f} cores) · {platform.node()}"
    assert here in set(rows["column"])
    assert (rows[rows["source"] == report.REFERENCE]["column"].str.endswith("· reference")).all()
    real = rows[rows["column"] == here].iloc[0]
    assert real["problem"] == "window 12, hidden 8, split 70/15/15" and real["setting"] == "published setting · fast input"

    text, table = report.findings(own, published, reference)
    assert "measured here: 5 records from 2 machines" in text
    assert "CUDA on laptop skipped, not measured (1 record: no CUDA GPU visible" in text
    assert "no GPU runs measured here (the GPU rows shown are lstmnb's reference records)" in text
    assert table.loc[here, "problem"] == "window 12, hidden 8, split 70/15/15"
    assert table.loc[here, "like for like s"] == "—"
    assert table.loc["CPU · laptop", "like for like s"] == "45"  # at 5 epochs, where most columns have runs

    prov = report.provenance_table(own, reference, published)
    assert prov.loc["source", here] == report.MEASURED and prov.loc["machine", here] == platform.node()
    # the laptop's CUDA column was skipped in every record: never shown as measured
    assert prov.loc["source", "CUDA · laptop"] == "measured here: all skipped, nothing measured"
    assert prov.loc["source", "CPU · laptop"] == report.MEASURED
    assert prov.loc["torch", here] == __import__("torch").__version__
    assert prov.loc["lstmnb", "H100 · vm (H100) · reference"] == "0.1.0 @ dc6aa31, 7a75be1, a7631a2"
    assert prov.loc["lstmnb", "H200 · vm (H200) · reference"] == "0.1.0 @ 0711b99"
    assert prov.loc["CUDA", "A40 · published"] == "11.8" and prov.loc["dates", "A40 · published"] == "not stated"


def test_cpu_only_records_say_what_is_missing(tmp_path):
    recs = [run_record("cpu", "Intel(R) Core(TM) i7", 5, path, s, host="laptop")
            for path, s in (("dataloader", 45.0), ("fast", 15.0))]
    df = records.load_records(write_jsonl(tmp_path / "runs.jsonl", recs))
    text, table = report.findings(df)
    assert "no GPU runs measured here: run 04 on a GPU" in text and "no multi-GPU records" in text
    assert list(table.index) == ["CPU · laptop"] and table.loc["CPU · laptop", "fastest s"] == "15"
    assert report.published_comparison(report.load_published(), df).epochs == 5  # the count both sides have


def test_no_records_of_ones_own_still_answer_from_the_published_figures(published):
    text, table = report.findings(pd.DataFrame(), published)
    assert "no run records of your own: run the series" in text
    pub = published["era5_lstm_gpu_benchmark"]["epochs"][15]
    assert set(table["source"]) == {report.PUBLISHED} and table.loc["A40 · published", "fastest s"] == f"{pub['A40']:g}"
    comparison = report.published_comparison(published, pd.DataFrame())
    assert comparison.epochs == 15 and "A40 9.58 s" in comparison.markdown  # the study's own table, ranked
    assert report.findings(None)[1].empty


@pytest.mark.slow
def test_machines_table_lists_each_device_column(own_records):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = records.load_records(own_records)
    table = report.machines_table(df)
    assert set(table["machine"]) == {"laptop", platform.node()}
    skipped = table.loc["CUDA · laptop"]
    assert (skipped["ok"], skipped["skipped"]) == ("0", "1")
    assert table.loc["CPU · laptop", "records"] == "3" and table.loc["CPU · laptop", "dates"] == "2026-01-01"
    here = table[table["machine"] == platform.node()].iloc[0]
    assert here["torch"] == __import__("torch").__version__ and here["source"] == report.MEASURED
    assert report.machines_table(pd.DataFrame()).empty


@pytest.mark.slow
def test_notebook_06_opens_with_our_measurement_and_merges_records_of_two_machines(tmp_path):
    """The first screen (report.first_screen), then the replication, then the study's published comparison under
    a heading that names it as the study's; the study's cross-machine ratios are never the first thing shown. The
    records of two machines (one file with a broken line, one in a folder below) are merged into its tables, and
    the reference records shown apart from them, never written into the user's results."""
    from lstmnb import notebooks

    laptop = [run_record("cpu", "Intel(R) Core(TM) i7", e, "dataloader", 9.0 * e, host="laptop") for e in (5, 10, 15)]
    laptop.append(run_record("cuda", None, 5, "fast", 0, status="skipped", host="laptop"))
    carc = [run_record("cuda", "Tesla V100-SXM2-32GB", e, "dataloader", 0.6 * e, host="carc") for e in (5, 10, 15)]
    own = write_jsonl(tmp_path / "mine" / "laptop.jsonl", laptop, broken_after=1)
    write_jsonl(tmp_path / "mine" / "carc" / "runs.jsonl", carc)
    before = own.read_bytes()
    result = notebooks.run_series("ci", only="06", runs_dir=tmp_path / "runs", echo=None, progress=False,
                                  overrides={"results_paths": [str(own.parent)], "reference_records": True})
    nb = json.loads((result.run_dir / "06_analysis.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    first = next("".join(o["data"]["text/markdown"]) for o in outputs if "text/markdown" in o.get("data", {}))
    assert "x faster" not in first and "1.17x" not in first and "each GPU is this much faster" not in first
    page = result.site.read_text()  # the rendered report: the site, 06 its front page
    page = page[page.index("<article"):]  # the page's own content, after the navigation
    order = [page.index(h) for h in ("Does lstmnb reproduce the study?", "published comparison",
                                     "Overview", "Findings")]
    assert order == sorted(order)
    study = page[order[1]:order[2]]
    assert "At 15 epochs (the longest count both the study and these records have)" in study
    assert "Left out of the ranking: T4† and P100†" in study and 'id="published-setting"' in study
    assert "google.colab" not in page and "results_paths = " not in page.split("Overview")[0]  # hidden cells
    assert "report.first_screen(" not in page  # its input hidden
    text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    assert "laptop.jsonl:2: skipped 1 broken record line" in text  # file and line named, good records kept
    assert "7 record(s) from 2 file(s)" in text
    tables = result.run_dir / "tables"
    epochs = pd.read_csv(tables / "06_epochs_published-problem-published-setting-DataLoader-path.csv", index_col=0,
                         dtype=str)
    assert list(epochs.columns[:2]) == ["CPU · laptop", "V100 · carc"] and "V100 · published" in epochs.columns
    assert epochs["CPU · laptop"].tolist() == ["45", "90", "135"] and epochs["V100 · carc"].tolist() == ["3", "6", "9"]
    assert (tables / "06_comparison.csv").exists()  # every source's rows, as the tables use them
    figures = {p.stem for p in (result.run_dir / "figures").glob("*.png")}
    assert {"06_first_screen", "06_loss_curves"} <= figures  # the reference ladder drawn; no other comparison chart
    assert (tables / "06_published_comparison.csv").exists()
    findings = pd.read_csv(tables / "06_findings.csv", index_col=0)
    assert {"CPU · laptop", "V100 · carc", "H200 · vm (H200) · reference", "A40 · published"} <= set(findings.index)
    assert own.read_bytes() == before  # the reference records were shown, never written into the user's results
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the broken line, said above
        own_records = records.load_records(own.parent)
    assert len(own_records) == len(laptop) + len(carc) and set(own_records["device.hostname"]) == {"laptop", "carc"}


@pytest.mark.parametrize("value, text", [
    (46.42, "46.42"), (146.41, "146.41"), (10.04, "10.04"), (98.2, "98.2"),  # published: as given
    (8.031234, "8.03"), (146.4123, "146"), (0.0123456, "0.0123"),  # measured: three significant figures
    (1234.56, "1235"), (35920.0, "35920"),  # whole seconds from 1000 on, never 1.23e+03
    (float("nan"), "—"),
])
def test_the_report_writes_a_figure_one_way(value, text):
    from lstmnb.report import labels as numbers

    assert numbers.figure(value) == text
    assert numbers.seconds(value) == text + " s"
