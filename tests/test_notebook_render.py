"""The runner's HTML and series index: cells a report hides by tag stay out of the HTML (the Colab cell,
the parameters and papermill's copy of them), and a notebook whose run records were all skipped is listed
as skipped with the reason, never as ok."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from lstmnb import records
from lstmnb.notebooks import render_html
from lstmnb.notebooks.series import NotebookRun, SeriesResult, records_outcome, run_ids, write_index
from test_report import run_record


def _executed(tmp_path, parameters_hidden: bool):
    cells = [
        new_markdown_cell("# ANSWER_TITLE"),
        new_code_cell("COLAB_MARKER = 1", metadata={"tags": ["remove-cell"]}),
        new_code_cell("PARAM_MARKER = 1", metadata={"tags": ["parameters"] + (["remove-cell"] if parameters_hidden else [])}),
        new_code_cell("INJECTED_MARKER = 2", metadata={"tags": ["injected-parameters"]}),
        new_code_cell("HIDDEN_CODE_MARKER = 3", metadata={"tags": ["remove-input"]},
                      outputs=[new_output("stream", name="stdout", text="VISIBLE_OUTPUT\n")]),
        new_code_cell("SHOWN_CODE_MARKER = 4"),
    ]
    path = tmp_path / f"nb_{parameters_hidden}.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    return render_html(path).read_text()


def test_tagged_cells_stay_out_of_the_html(tmp_path):
    page = _executed(tmp_path, parameters_hidden=True)
    assert "ANSWER_TITLE" in page and "VISIBLE_OUTPUT" in page and "SHOWN_CODE_MARKER" in page
    for hidden in ("COLAB_MARKER", "PARAM_MARKER", "INJECTED_MARKER", "HIDDEN_CODE_MARKER"):
        assert hidden not in page, hidden
    # a parameters cell left visible keeps papermill's injected values visible too
    page = _executed(tmp_path, parameters_hidden=False)
    assert "PARAM_MARKER" in page and "INJECTED_MARKER" in page and "COLAB_MARKER" not in page


def test_a_notebook_whose_runs_were_all_skipped_is_skipped(tmp_path):
    results = tmp_path / "results"
    assert run_ids(results) == set() and records_outcome(results, set()) == ("ok", None)  # wrote nothing: ok
    records.append_record(run_record("cpu", "i7", 5, "fast", 4.0, host="a"), results)
    before = run_ids(results)
    assert records_outcome(results, before) == ("ok", None)  # the earlier notebook's record is not this one's
    for experiment in ("epochs", "batch-sweep"):
        records.append_record(run_record("cuda", None, 5, "fast", 0, status="skipped", experiment=experiment,
                                         host="a"), results)
    status, reason = records_outcome(results, before)
    assert (status, reason) == ("skipped", "no CUDA GPU visible on this machine")
    records.append_record(run_record("cuda", "Tesla T4", 5, "fast", 1.0, host="a"), results)
    assert records_outcome(results, before) == ("ok", None)  # one measured run: ok

    runs = [NotebookRun("03_cpu_baseline", "ok", 9.0), NotebookRun("04_single_gpu", status, 4.0, reason=reason)]
    result = SeriesResult("ci", tmp_path, results, runs)
    assert result.ok and result.table().loc["04_single_gpu", "status"] == f"skipped ({reason})"
    page = write_index(result).read_text()
    assert "<td>04_single_gpu</td><td>skipped (no CUDA GPU visible on this machine)</td>" in page
    assert "<td>03_cpu_baseline</td><td>ok</td>" in page
    # the reading order: every notebook in series order with its question
    order = page.split("<ol>")[1].split("</ol>")[0]
    assert order.index("03_cpu_baseline") < order.index("04_single_gpu") and "training time on your CPU" in order


@pytest.mark.slow
def test_series_index_lists_a_skipped_gpu_notebook_as_skipped(tmp_path):
    import torch

    from lstmnb import notebooks

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: 04 measures instead of skipping")
    result = notebooks.run_series("ci", only="04", runs_dir=tmp_path, echo=None, progress=False)
    (run,) = result.runs
    assert run.status == "skipped" and "no usable CUDA GPU" in run.reason and result.ok
    assert f"<td>04_single_gpu</td><td>skipped ({run.reason}" in (result.run_dir / "index.html").read_text()
