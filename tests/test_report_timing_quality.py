"""Timings a student can trust (report.repeats, the one timing rule): real runs of the epochs experiment, repeated and
alternated, become one row per setting (the median of the repeats) with input path, batch and threads; a
row whose repeats disagree by more than 20%, or that ran while other processes kept the cores busy, is
marked."""

from __future__ import annotations

import copy

import pytest
from conftest import tiny_epochs_runs

from lstmnb import report
from lstmnb.report import repeats as timing_quality


@pytest.fixture(scope="module")
def runs():
    return tiny_epochs_runs(["fast"])


def test_repeats_alternate_and_become_one_median_row(runs):
    assert [r["config"]["epochs"] for r in runs] == [1, 2, 1, 2, 1, 2]  # every row once before any twice
    table = report.timing_rows(runs)
    assert list(table["epochs"]) == [1, 2] and set(table["repeats"]) == {3}
    for epochs, row in table.set_index("epochs").iterrows():
        seconds = sorted(r["timing"]["train_s"] for r in runs if r["config"]["epochs"] == epochs)
        assert row["train s (median)"] == round(seconds[1], 2)
        assert row["input"] == "fast" and row["batch"] == 128 and row["setting"] == "published"
        assert row["threads"] == "/".join(map(str, sorted({r["threads"]["used"] for r in runs
                                                           if r["config"]["epochs"] == epochs})))
        assert isinstance(row["samples/s"], int) and row["samples/s"] % 10 == 0  # rounded, not 18519.9129
        rmse = sorted(r["metrics"]["test_rmse_k"] for r in runs if r["config"]["epochs"] == epochs)
        assert row["test RMSE K"] == round(rmse[1], 3)  # what those seconds bought
    assert "median of its repeats (3 run(s), alternated" in report.timing_note(table)


def test_disagreeing_repeats_and_busy_cores_are_marked(runs):
    quiet = copy.deepcopy(runs)  # tiny real runs differ a lot (the first pays torch's start): made even here
    for r in quiet:
        r["threads"]["busy_cores"] = 0.0
        r["timing"]["train_s"] = 0.1 * r["config"]["epochs"]
    assert not (report.timing_rows(quiet)["check"] != "").any()
    assert "no row is marked" in report.timing_note(report.timing_rows(quiet))
    slow = copy.deepcopy(quiet)
    first = next(r for r in slow if r["config"]["epochs"] == 1)
    first["timing"]["train_s"] = 1.5 * max(r["timing"]["train_s"] for r in quiet if r["config"]["epochs"] == 1)
    table = report.timing_rows(slow).set_index("epochs")
    assert table.loc[1, "check"].startswith(timing_quality.MARK + " repeats differ by")
    assert table.loc[2, "check"] == ""
    busy = copy.deepcopy(quiet)
    busy[-1]["threads"].update(busy_cores=1.2, used=1, default=2, cores=2)  # the last repeat of 2 epochs
    table = report.timing_rows(busy).set_index("epochs")
    assert "1 of 3 ran beside busy processes (others kept 1.2 of 2 cores busy as it started, so it took 1 of 2 threads)" \
        in table.loc[2, "check"]
    assert "1 of 2 row(s) marked" in report.timing_note(report.timing_rows(busy))


def test_recommended_runs_are_not_called_published(runs):
    rec = copy.deepcopy(runs)
    for r in rec:
        r["experiment"] = "epochs-recommended"
    assert set(report.timing_rows(rec)["setting"]) == {"recommended (profile)"}
    assert report.timing_rows([{"status": "skipped", "reason": "no GPU"}]).empty


def test_run_tables_print_no_nan_and_rounded_rates(runs):
    """02's tables from a real record: the model's own rows leave the skill column blank (no NaN), the
    baselines' rows carry the record's score; samples/s are whole tens."""
    record = runs[0]
    table = report.metrics_table(record)
    skill = report.tables.SKILL_COLUMN
    model_rows = [i for i in table.index if i not in ("persistence", "climatology")]
    assert model_rows and all(table.loc[i, skill] == "" for i in model_rows)
    assert table.loc["persistence", skill] == f"{record['metrics']['mse_skill_vs_persistence']:.3f}"
    rates = report.epochs_table(record)["samples_per_s"]
    assert all(int(v) % 10 == 0 for v in rates) and not rates.isna().any()


def _at_published_setting(run: dict, seconds: float, busy: float = 0.0) -> dict:
    """A real tiny run's record relabelled as a 15-epoch run of the published setting and problem (the study's
    data, model and split, the DataLoader path): the comparison of 06 then puts it against the study's CPU."""
    r = copy.deepcopy(run)
    r["config"].update(epochs=15, window=24, hidden=64, layers=2, input_path="dataloader", num_workers=2,
                       split_dates=["2021-01-01", "2021-01-01"])
    r["config"].pop("fractions", None)
    r["data"].update(points=[[40.0, 280.0], [20.0, 280.0]], start="2020-01-01", end="2021-06-30", kind="real")
    r["timing"]["train_s"] = seconds
    r["threads"].update(busy_cores=busy, cores=2, default=2, used=1 if busy else 2)
    r["run_id"] = f"{r['run_id']}-{seconds}-{busy}"
    return r


@pytest.mark.parametrize("seconds, busy, why", [
    ((100.0, 101.0, 102.0), (0.0, 0.0, 0.0), ""),
    ((100.0, 105.0, 160.0), (0.0, 0.0, 0.0), "repeats differ by 60%"),
    ((100.0, 101.0, 102.0), (0.0, 0.0, 1.2), "1 of 3 ran beside busy processes (others kept 1.2 of 2 cores busy"),
])
def test_06_marks_a_median_of_the_published_setting_as_03_marks_its_runs(runs, tmp_path, seconds, busy, why):
    """06's comparison rows carry the same median that 03's run table shows: where 03 marks it (repeats that
    disagree, busy cores), the row's ``rough`` says so in the same words; where 03 does not, neither does the row."""
    from test_report import write_jsonl

    from lstmnb import records

    own = [_at_published_setting(runs[0], s, b) for s, b in zip(seconds, busy)]
    write_jsonl(tmp_path / "here" / "runs.jsonl", own)
    rows = report.comparison_rows(records.load_records(tmp_path))
    rough = rows.loc[rows["like_for_like"].astype(bool), "rough"].iloc[0]
    check = report.timing_rows(own)["check"].iloc[0]
    if not why:
        assert check == "" and rough == ""
    else:
        assert why in check and check == f"{timing_quality.MARK} {rough}"
