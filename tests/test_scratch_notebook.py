"""Notebook 07 executes end to end through papermill with small parameters and leaves its records."""

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
def test_notebook_runs_with_small_parameters(tmp_path):
    papermill = pytest.importorskip("papermill")
    from lstmnb.records import read_records

    out = tmp_path / "07.ipynb"
    results = tmp_path / "results"
    papermill.execute_notebook(
        str(NOTEBOOK), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path),
        parameters={"scratch_epochs": 2, "scratch_forecast_epochs": 3, "scratch_hidden": 8,
                    "scratch_versions": ["loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch"],
                    "output_dir": str(tmp_path), "results": str(results), "profile": "test"},
    )
    recs = read_records(results)
    assert [r["version"] for r in recs] == ["loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch"]
    assert all(r["profile"] == "test" and r["experiment"] == "scratch_versions" for r in recs)
    assert {p.name for p in (tmp_path / "figures").glob("*.png")} == {"07_data.png", "07_versions.png",
                                                                       "07_forecast.png"}
    text = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"
                   for o in c.outputs)
    assert "numpy" in text and "seasonal_naive" in text
    by_version = {r["version"]: r for r in recs}
    for v in ("numba-cuda", "numba-cuda-block"):  # without a GPU: skipped with the reason, and the notebook went on
        if by_version[v]["status"] == "skipped":
            assert "cannot start" in by_version[v]["reason"] and "numpy " in by_version[v]["reason"]
