"""Notebook 07: committed clean, and executed end to end through papermill (in the `ci` series) with its records."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "07_from_scratch_lstm.ipynb"


def test_notebook_is_committed_clean_with_a_parameters_cell():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and "How long it takes" in nb.cells[0].source
    assert "google.colab" in nb.cells[1].source and "remove-cell" in nb.cells[1].metadata.get("tags", [])
    assert "parameters" in nb.cells[2].metadata.get("tags", [])
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


@pytest.mark.slow
def test_notebook_runs_in_the_ci_series_and_leaves_its_records(ci_series):
    """07 as the `ci` series ran it (conftest.py), on a machine without a GPU."""
    from lstmnb.records import read_records

    recs = [r for r in read_records(ci_series.results) if r["experiment"] == "scratch_versions"]
    assert [r["version"] for r in recs] == ["loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch",
                                            "torch-cuda"]
    assert all(r["profile"] == "ci" for r in recs)
    assert {"07_data", "07_versions", "07_forecast"} <= {p.stem for p in (ci_series.run_dir / "figures").glob("*.png")}
    text = "".join(o.get("text", "") for c in nbformat.read(ci_series.run_dir / "07_from_scratch_lstm.ipynb",
                                                            as_version=4).cells
                   if c.cell_type == "code" for o in c.outputs)
    assert "numpy" in text and "seasonal_naive" in text
    by_version = {r["version"]: r for r in recs}
    assert all(by_version[v]["status"] == "ok" for v in ("loops", "numpy", "numba-cpu", "torch"))
    for v in ("numba-cuda", "numba-cuda-block"):  # without a GPU (and no simulator): skipped with the reason, and
        if by_version[v]["status"] != "ok":  # the notebook went on
            assert by_version[v]["status"] == "skipped"
            assert "cannot start" in by_version[v]["reason"] and "numpy " in by_version[v]["reason"]
