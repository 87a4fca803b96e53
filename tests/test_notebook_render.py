"""The rendered report, the run folder's site: cells a report hides by tag stay out of it (the Colab cell, the
parameters and papermill's copy of them), and a notebook whose run records were all skipped is listed as
skipped with the reason, never as ok."""

from __future__ import annotations

import html
import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from test_report import run_record

from lstmnb import notebooks, records
from lstmnb.notebooks.series import NotebookRun, SeriesResult, records_outcome, run_ids


def _site_page(tmp_path, parameters_hidden: bool) -> str:
    """A notebook's page in a site built from it (its stored outputs, not re-executed)."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    from lstmnb.notebooks.site import build_site

    cells = [
        new_markdown_cell("# ANSWER_TITLE"),
        new_markdown_cell("Each rank's gradient $g_r = \\frac{N}{B}\\sum_{i} \\ell_i$ is averaged:\n\n"
                          "$$g = \\frac{1}{N}\\sum_{r=1}^{N} g_r$$"),
        new_code_cell("COLAB_MARKER = 1", metadata={"tags": ["remove-cell"]}),
        new_code_cell("PARAM_MARKER = 1", metadata={"tags": ["parameters"] + (["remove-cell"] if parameters_hidden else [])}),
        new_code_cell("INJECTED_MARKER = 2", metadata={"tags": ["injected-parameters"]}),
        new_code_cell("HIDDEN_CODE_MARKER = 3", metadata={"tags": ["remove-input"]},
                      outputs=[new_output("stream", name="stdout", text="VISIBLE_OUTPUT\n")]),
        new_code_cell("SHOWN_CODE_MARKER = 4"),
    ]
    folder = tmp_path / f"run_{parameters_hidden}"
    folder.mkdir()
    path = folder / "02_model.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    runs = [NotebookRun("02_model", "ok", 1.0, notebook=path)]
    index = build_site(SeriesResult("ci", folder, folder / "results", runs))
    return (index.parent / "02_model.html").read_text()


@pytest.mark.slow
def test_tagged_cells_stay_out_of_the_report_and_its_math_reads_offline(tmp_path):
    """The site's page of a notebook leaves out what its tags hide; its equations are MathML (drawn by the
    browser without MathJax from the web): the inline one inline, the displayed one as a block, no TeX left."""
    page = _site_page(tmp_path, parameters_hidden=True)
    assert "ANSWER_TITLE" in page and "VISIBLE_OUTPUT" in page and "SHOWN_CODE_MARKER" in page
    for hidden in ("COLAB_MARKER", "PARAM_MARKER", "INJECTED_MARKER", "HIDDEN_CODE_MARKER"):
        assert hidden not in page, hidden
    assert page.count("<math") == 2 and page.count('display="block"') == 1 and page.count('display="inline"') == 1
    assert page.count("<mfrac>") == 2 and "<munderover>" in page and "<msub><mi>g</mi><mi>r</mi></msub>" in page
    assert "\\frac" not in page and "$g_r" not in page
    assert not re.search(r"<script[^>]*mathjax", page, re.IGNORECASE)
    # a parameters cell left visible keeps papermill's injected values visible too
    page = _site_page(tmp_path, parameters_hidden=False)
    assert "PARAM_MARKER" in page and "INJECTED_MARKER" in page and "COLAB_MARKER" not in page


def test_tex_that_cannot_be_read_stays_visible():
    from lstmnb.notebooks.mathml import to_mathml

    assert to_mathml("x^") == "<code class=\"tex\">x^</code>"  # a superscript without its script


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
    assert result.ok  # a notebook whose runs were all skipped ran to its end
    from lstmnb.notebooks.site import READING, _status_table

    page = _status_table(result)  # the series' table under the report, on the site's front page
    assert f"<td>04_single_gpu</td><td>{READING['04']}</td><td>ran; its runs skipped (no CUDA GPU visible on this " \
           "machine)</td>" in page
    assert "<td>03_cpu_baseline</td><td>training time on your CPU" in page and "</td><td>ok</td>" in page
    # the reading order: every notebook in series order with its question
    assert page.index("03_cpu_baseline") < page.index("04_single_gpu")


def test_the_printed_summary_is_readable_at_100_columns(tmp_path, capsys):
    """A long skip reason goes beneath the table, wrapped; the table's rows stay short."""
    from lstmnb.cli.notebooks_cmd import print_series

    reason = ("no usable CUDA GPU on this machine (torch 2.13.0+cpu, CUDA build: none); the GPU notebooks ran "
              "their cells and recorded every GPU run as skipped with this reason, so the report shows them "
              "as skipped, never as a number")
    runs = [NotebookRun("03_cpu_baseline", "ok", 9.0), NotebookRun("04_single_gpu", "skipped", 4.0, reason=reason)]
    print_series(SeriesResult("ci", tmp_path / "a-long-run-folder-name" / "20260101-000000", tmp_path, runs,
                              site_note="no site: sphinx not installed"))
    out = capsys.readouterr().out
    table = out.split("\nrun folder")[0]
    assert max(len(line) for line in table.splitlines()) <= 100, table
    assert "04_single_gpu runs skipped: no usable CUDA GPU" in out  # it ran; its runs were skipped
    assert " ".join(reason.split()) in " ".join(table.split())  # every word of it, wrapped
    assert str(tmp_path) not in table  # the folder below
    assert "report      no site: sphinx not installed" in out  # no rendered report: said in one line


@pytest.mark.slow
def test_the_report_lists_a_skipped_gpu_notebook_as_skipped(ci_series):
    """04 in the `ci` series (conftest.py), whose kernels see no GPU: it skips on a GPU machine too."""
    (run,) = [r for r in ci_series.runs if r.name == "04_single_gpu"]
    assert run.status == "skipped" and "no usable CUDA GPU" in run.reason and ci_series.ok
    assert ci_series.site == ci_series.run_dir / "site" / "index.html"
    assert not (ci_series.run_dir / "index.html").exists()
    assert f"<td>ran; its runs skipped ({html.escape(run.reason)}" in ci_series.site.read_text()
    assert not list(ci_series.run_dir.glob("*.html"))  # the site is the one rendered report


@pytest.mark.slow
def test_figures_reach_the_report_when_the_environment_says_agg(tmp_path, monkeypatch):
    """MPLBACKEND=Agg (SLURM job scripts, headless servers) reaches the kernel; the runner still gets the
    figure into the executed notebook and the report's page (before, every figure of the series was lost)."""
    from lstmnb.profiles import Profile

    monkeypatch.setenv("MPLBACKEND", "Agg")
    folder = tmp_path / "series"
    folder.mkdir()
    cells = [new_code_cell("label = 'here'", metadata={"tags": ["parameters"]}),
             new_code_cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n_ = ax.plot([1, 2, 3])")]
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": kernelspec}), folder / "01_plot.ipynb")
    result = notebooks.run_series(Profile("agg", "Agg in the environment"), notebooks=folder,
                                  runs_dir=tmp_path / "runs", echo=None, progress=False)
    run = result.runs[0]
    outputs = [o for c in nbformat.read(run.notebook, as_version=4).cells for o in c.get("outputs", [])]
    assert run.status == "ok" and [o["data"].keys() >= {"image/png"} for o in outputs if "data" in o] == [True]
    assert "<img" in (result.site.parent / "01_plot.html").read_text()


@pytest.mark.slow
def test_a_kernel_started_as_jupyterlab_does_shows_figures_once_the_series_steps_are_imported(monkeypatch):
    """JupyterLab and Colab start kernels without ``--matplotlib``; with MPLBACKEND=Agg exported, importing
    the notebooks' steps switches the kernel to inline, so the figure is an image, not ``<Figure ...>``."""
    from nbclient import NotebookClient

    monkeypatch.setenv("MPLBACKEND", "Agg")
    plot = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n_ = ax.plot([1, 2, 3])"
    backend = "import matplotlib\nprint(matplotlib.get_backend())"
    cells = [new_code_cell(backend), new_code_cell("from lstmnb.notebooks import steps\n" + backend),
             new_code_cell(plot)]
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = new_notebook(cells=cells, metadata={"kernelspec": kernelspec})
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["text"].strip().lower() == "agg"
    assert "inline" in nb.cells[1].outputs[0]["text"]
    assert [o["data"].keys() >= {"image/png"} for o in nb.cells[2].outputs if "data" in o] == [True]


def test_the_kernels_transport_is_encrypted_where_jupyter_can():
    """The runner asks jupyter_client for CurveZMQ keys (so ipykernel logs no "running over TCP without
    encryption" line) exactly where both sides can; elsewhere it leaves the default."""
    import zmq
    from jupyter_client.manager import KernelManager

    from lstmnb.notebooks.runner import kernel_config

    config = kernel_config()
    can = "transport_encryption" in KernelManager.class_traits() and zmq.has("curve")
    assert (config.KernelManager.get("transport_encryption") == "auto") == can
    if can:
        assert KernelManager(config=config).transport_encryption == "auto"


# --- the run folder as a site (issue 32) -----------------------------------------------------------------

@pytest.mark.slow
def test_the_site_puts_the_report_first_marks_skipped_notebooks_and_has_search(tmp_path):
    """A site built from real executed notebooks (tiny ones written here, run by nbclient on the kernel):
    the report is the front page, every other notebook a page listed under it, a skipped one marked with its reason,
    the hidden parameters hidden, search, and links relative so that file:// works."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    pytest.importorskip("sphinx_book_theme")
    import nbformat
    from nbclient import NotebookClient

    from lstmnb.notebooks.site import build_site

    runs = []
    for name, text, status, reason in (
            ("03_cpu_baseline", "print('cpu epochs done')", "ok", None),
            ("04_single_gpu", "print('gpu runs recorded as skipped')", "skipped", "no CUDA GPU visible here"),
            ("06_analysis", "print('the headline: cpu only')", "ok", None)):
        nb = nbformat.v4.new_notebook()
        hidden = nbformat.v4.new_code_cell("secret_setting = 1")
        hidden.metadata["tags"] = ["parameters", "remove-cell"]
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {name}\n\n" "with $B/N$ per rank:\n\n$$t = \\frac{K}{N}$$"),
                    hidden, nbformat.v4.new_code_cell(text)]
        NotebookClient(nb, kernel_name="python3", timeout=60).execute()
        path = tmp_path / f"{name}.ipynb"
        nbformat.write(nb, path)
        runs.append(NotebookRun(name, status, 1.0, notebook=path, reason=reason))
    index = build_site(SeriesResult("ci", tmp_path, tmp_path / "results", runs))
    site = index.parent
    assert index == tmp_path / "site" / "index.html"
    page = index.read_text()
    article = page[page.index("<article"):]  # the page's own content, after the navigation bar
    assert "the headline: cpu only" in article  # the report's own output opens the site
    assert article.index("the headline: cpu only") < article.index('href="03_cpu_baseline.html"') < article.index(
        'href="04_single_gpu.html"')
    assert not (site / "06_analysis.html").exists()  # the report is not a page twice
    assert "04 single gpu (ran; its recorded runs skipped)" in page and "no CUDA GPU visible here" in page
    assert "cpu epochs done" in (site / "03_cpu_baseline.html").read_text()  # the stored output, not re-executed
    gpu = (site / "04_single_gpu.html").read_text()
    assert "This notebook <strong>ran</strong>; every run it records was skipped: no CUDA GPU visible here" in gpu
    assert "secret_setting" not in gpu  # the hidden parameters cell stays hidden
    # the equations are MathML (inline and displayed), no TeX left for a MathJax loaded from the web
    assert gpu.count("<math") == 2 and "<mfrac>" in gpu and "\\frac" not in gpu
    assert not re.search(r"<script[^>]*mathjax", gpu, re.IGNORECASE)
    assert (site / "search.html").exists() and "06_analysis" in (site / "searchindex.js").read_text()  # its title
    css = (site / "_static" / "report.css").read_text()  # wide tables scroll in their own box
    assert "overflow-x: auto" in css and "white-space: nowrap" in css and "report.css" in gpu
    assert 'src="/' not in page and 'href="/' not in page  # relative links: opens from file://
    assert not list(tmp_path.glob(".site-src-*"))  # the sources were temporary
