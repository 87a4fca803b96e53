"""What the first screen's answer rests on (report.answer), on the published figures as shipped and on
lstmnb's real reference records: the shared CPU column, the flagged rows, ties within run-to-run noise,
and the eager against CUDA-graph lesson labelled as another machine's."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from lstmnb import report
from lstmnb.report import answer

REFERENCE_DIR = Path(report.__file__).resolve().parent.parent / "reference_records"


@pytest.fixture(scope="module")
def published():
    return report.load_published()


def _reference_seconds(kind: str, input_path: str, graph: bool) -> float:
    """Median seconds of the raw reference records of the study's setting on its data, 5 epochs, on the study's
    loader where the DataLoader path (plain dicts)."""
    raw = [json.loads(line) for f in sorted(REFERENCE_DIR.glob("*.jsonl")) for line in f.read_text().splitlines() if line]
    return statistics.median(
        r["timing"]["train_s"] for r in raw
        if r["status"] == "ok" and r["experiment"] == "train" and r["device"]["kind"] == kind
        and r["data"]["source"] == "study" and r["config"]["epochs"] == 5 and r["config"]["input_path"] == input_path
        and r["config"]["batch_size"] == 128 and r["config"]["layers"] == 2 and not r["config"]["residual"]
        and bool(r.get("cuda_graph", {}).get("used", r["config"]["cuda_graph"])) == graph
        and (input_path == "fast" or r["config"].get("persistent_workers") is False))


def test_tied_with_fastest_keeps_what_is_within_the_noise():
    s = pd.Series({"A40": 9.58, "P100": 10.04, "V100": 11.89})
    assert list(answer.tied_with_fastest(s).index) == ["A40", "P100"]
    assert list(answer.tied_with_fastest(s, within=0.01).index) == ["A40"]
    assert answer.tied_with_fastest(pd.Series(dtype=float)).empty


def test_published_basis_names_the_shared_cpu_the_flags_and_the_tie(published):
    text = answer.published_basis(published)
    table = report.published_epochs_table(published).loc[15]
    cpu = table["CPU"]
    for device in ("T4", "P100", "V100", "A40"):
        assert f"{cpu / table[device]:.3g}x" in text
    assert "one CPU run" in text and "does not say on which platform" in text
    assert "T4† and P100† are flagged" in text  # the P100 row is flagged as the T4's is
    clean = table.drop(["CPU", "T4", "P100"])
    assert f"{cpu / clean.max():.3g}x-{cpu / clean.min():.3g}x" in text
    assert "Tied, not ranked:** A40 (9.58 s) and P100† (10.04 s) differ by 5%" in text
    assert "V100 is 24% slower" in text
    # with the A40 clearly ahead, nothing is tied
    faster = copy.deepcopy(published)
    faster["era5_lstm_gpu_benchmark"]["epochs"][15]["A40"] = 5.0
    assert "Tied" not in answer.published_basis(faster)
    assert answer.published_basis(None) == ""


def test_the_p100_note_shows_beside_its_figures(published):
    head = report.headline(None, published, None)
    assert "P100" in head.notes and "7.39 s" in head.notes["P100"]
    assert "tied within run-to-run noise" in head.sentence and "A40" in head.sentence and "P100†" in head.sentence


def test_graph_lesson_from_the_reference_records_is_labelled_as_another_machines(published):
    reference = report.load_reference_records()
    text = answer.graph_lesson(None, reference)
    cpu_loader, gpu_loader = _reference_seconds("cpu", "dataloader", False), _reference_seconds("cuda", "dataloader", False)
    eager, graph = _reference_seconds("cuda", "fast", False), _reference_seconds("cuda", "fast", True)
    assert f"{cpu_loader / gpu_loader:.3g}x its own CPU on the DataLoader path" in text
    assert f"{eager / graph:.3g}x faster than eager" in text
    # the published problem's pair comes first (the one-layer records have pairs at more epochs)
    assert "reference records" in text and "another machine than yours" in text and "published problem, 5 epochs" in text
    assert answer.graph_lesson(None, None) is None
    paragraphs = answer.answer_context(None, published, reference)
    assert len(paragraphs) == 2 and paragraphs[1] == text
