"""Each notebook's "What this showed" (report.words) is written from its own results: real records
of tiny runs here, so every number in the text is the records' number, and changing the results changes
the text."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from conftest import tiny_epochs_runs

from lstmnb import report


@pytest.fixture(scope="module")
def runs():
    return tiny_epochs_runs(["fast", "dataloader"])


def test_model_conclusion_quotes_the_record(runs):
    from lstmnb.experiments import skill

    record = runs[1]
    m = record["metrics"]
    text = report.model_conclusion(record, skill.skill_table([record]))
    assert text.startswith("## What this showed") and "**03**" in text
    assert f"{record['model']['parameters']:,} parameters" in text
    assert f"{m['test_rmse_k']:.2f} K RMSE" in text and f"persistence ({m['persistence_rmse_k']:.2f} K)" in text
    assert f"it {'beats' if m['test_rmse_k'] < m['persistence_rmse_k'] else 'does not beat'} persistence (" in text
    assert f"{m['mse_skill_vs_persistence']:.2f} against persistence" in text
    t = record["timing"]  # the seconds said are the record's, the validation passes named apart
    assert (f"in {t['train_s']:.1f} s of training steps ({t['train_s'] + t['eval_s']:.1f} s with the validation "
            "passes)") in text
    failed = {**record, "status": "failed", "reason": "out of memory", "metrics": {}}
    assert "did not finish (failed: out of memory)" in report.model_conclusion(failed)


def test_cpu_baseline_conclusion_follows_the_timings(runs):
    quiet = copy.deepcopy(runs)
    for r in quiet:
        r["threads"]["busy_cores"] = 0.0
        r["timing"]["train_s"] = (1.0 if r["config"]["input_path"] == "fast" else 3.0) * r["config"]["epochs"]
    table = report.timing_rows(quiet)
    study = pd.Series({1: 9.0, 2: 18.0})
    text = report.cpu_baseline_conclusion(table, study, "Losses match.")
    assert "dataloader path: 3.0 s for 1 epoch to 6.0 s for 2 epochs, about 3.00 s per extra epoch" in text
    assert "takes 3.00x the time of the fast path" in text
    assert "6.0 s here against 18.0 s there, 3.00x as fast" in text
    assert "No timing row is marked" in text and "Losses match." in text and "rough" not in text
    quiet[-1]["threads"].update(busy_cores=1.5, used=1, default=2, cores=2)  # the last dataloader 2-epoch run
    text = report.cpu_baseline_conclusion(report.timing_rows(quiet), study)
    assert "1 of 4 timing row(s) are marked" in text and "a rough figure" in text
    assert "No timed run finished" in report.cpu_baseline_conclusion(report.timing_rows([]))


def test_analysis_conclusion_names_what_the_page_found():
    published = report.load_published()
    comparison = report.published_comparison(published, None)
    screen = report.Screen("The study's code takes 60 s here. More follows.", None, "")
    text = report.analysis_conclusion(screen, comparison, None)
    assert "Our own measurement: The study's code takes 60 s here." in text
    assert "at 15 epochs ranks A40, V100, CPU" in text and "T4† and P100† are left out as flagged" in text
    assert "0 record(s)" in text


def test_scratch_and_region_conclusions_read_their_tables():
    table = pd.DataFrame({"status": ["ok", "ok", "skipped"], "run_s": [8.0, 2.0, None],
                          "speedup_vs_loops": [1.0, 4.0, None], "train_loss": [0.1, 0.1, None]},
                         index=["loops", "numpy", "numba-cuda"])
    text = report.scratch_conclusion(table)
    assert "`numpy`, 2 s, 4x the Python loops" in text and "gave 4.0x" in text and "`numba-cuda`" in text
    skill = pd.DataFrame({"MSE skill score vs none": [0.0, 0.12, -0.3, -4.0]},
                         index=["none", "sparse", "dense", "persistence"])
    scaling = pd.DataFrame({"mode": ["one process", "tiles", "windows"], "threads": [2, 2, 2], "ranks": [1, 2, 2],
                            "speedup": [1.0, 1.6, float("nan")], "note": ["", "", "no speed-up: one process of 2 threads"]})
    text = report.region_conclusion(skill, None, scaling)
    assert "`sparse` against the point model: MSE skill score 0.12 (better" in text
    assert "`dense` against the point model: MSE skill score -0.30 (not better" in text
    assert "`none`" not in text and "`persistence`" not in text
    assert "`tiles` on 2 ranks: 1.60x" in text and "1 sharding case(s) print no speed-up (one process of 2 threads)" in text
    assert "still improving" not in text and "synthetic" not in text
    capped = skill.assign(epochs=[2, 2, 2, None], best_epoch=[2, 2, 2, None])
    text = report.region_conclusion(capped, None, None, data_kind="synthetic")
    assert "MSE skill score 0.12 (better on this synthetic area and period)" in text
    assert "Every model was still improving at its last epoch (the cap of 2)" in text
    assert "still improving" not in report.region_conclusion(capped.assign(best_epoch=[2, 1, 2, None]))
