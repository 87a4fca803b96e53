"""The rendered report: a run folder as a site (``<run folder>/site/index.html``) readable from ``file://`` (math as
MathML), the report (06) its front page, every other executed notebook a page listed under it with its status.
Built by Sphinx with myst-nb (which shows the executed notebooks without running them) and sphinx-book-theme (the
Jupyter Book cookbooks' theme; its web assets prebuilt, so no Node.js at run time): the optional ``site`` extra. Cells
tagged ``remove-cell`` are left out (the Colab install cell, a parameters cell with papermill's injected one), cells
tagged ``remove-input`` show their output only, so a page can open on its answer."""

from __future__ import annotations

import html
import importlib.util
import shutil
import tempfile
import warnings
from pathlib import Path

import nbformat

from ..paths import atomic_path
from . import mathml
from .series import SeriesResult

SITE_PACKAGES = ("sphinx", "myst_nb", "sphinx_book_theme")
REPORT_PREFIX = "06"  # the analysis notebook: the site's first entry
REMOVE_CELL = "remove-cell"

# the reading order: each notebook's question, by its number, in the series' table under the report
READING = {
    "01": "the data: the study's ERA5 at its two points",
    "02": "the model and its training, against persistence and climatology",
    "03": "training time on your CPU with the study's setting, beside the study's CPU (and its losses)",
    "04": "one GPU: the same training, eager and as a CUDA graph, batch and problem size",
    "05": "data parallelism from first principles, run for real: the whole program, a ring all-reduce "
          "by hand, DDP, scaling and Amdahl's law",
    "06": "the answer: how much faster a GPU is, what that rests on, every device side by side",
    "07": "the LSTM from its equations, and where parallel speed comes from",
    "08": "a whole area: neighbours, memory, sharding over ranks",
}


# every output table fits the page: a wide one scrolls sideways in its own box, its headers on one line
TABLE_CSS = """\
.cell_output table { display: block; max-width: 100%; overflow-x: auto; border-collapse: collapse; }
.cell_output th { white-space: nowrap; }
.cell_output td, .cell_output th { padding: 0.2em 0.6em; }
"""


def site_missing() -> str | None:
    """Why no site can be built here (a package of the ``site`` extra missing), or None."""
    missing = [name for name in SITE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return (f"no site: {', '.join(missing)} not installed (the optional 'site' extra: "
                'pip install "lstmnb[site]")')
    return None


def _conf(result: SeriesResult) -> str:
    title = f"lstmnb notebook series, profile {result.profile}"
    return "\n".join([
        "# written by lstmnb.notebooks.site for this run folder",
        f'extensions = ["myst_nb", {mathml.__name__!r}]',
        'myst_enable_extensions = ["dollarmath"]  # $...$ and $$...$$ are math, as in Jupyter',
        f"html_math_renderer = {mathml.SPHINX_RENDERER!r}  # equations drawn by the browser, offline too",
        'html_theme = "sphinx_book_theme"',
        f"project = {title!r}",
        f"html_title = {title!r}",
        "author = \"the lstmnb developers\"",
        'root_doc = "index"',
        'nb_execution_mode = "off"  # the notebooks ran already: their outputs are shown as they are',
        "html_show_sourcelink = False",
        "html_copy_source = False",
        'html_theme_options = {"show_toc_level": 2}',
        'html_static_path = ["_static"]',
        'html_css_files = ["report.css"]  # wide tables scroll in a box of their own; headers stay one line',
        "suppress_warnings = ['myst.header', 'mystnb.unknown_mime_type', 'misc.highlighting_failure']",
        "",
    ])


def _title(run) -> str:
    """The navigation's name of a page; a notebook whose recorded runs were all skipped says that it still ran."""
    name = run.name.replace("_", " ")
    if run.status == "skipped":
        return f"{name} (ran; its recorded runs skipped)"
    return name if run.status == "ok" else f"{name} ({run.label})"


def _status_table(result: SeriesResult) -> str:
    """The series in reading order: each notebook, its question, its status and seconds."""
    rows = "".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(READING.get(r.name[:2], ''))}</td>"
        f"<td>{html.escape(r.summary)}</td><td>{'' if r.seconds is None else f'{r.seconds:.1f}'}</td></tr>"
        for r in result.runs)
    return (f"<table class='table'><thead><tr><th>notebook</th><th>its question</th><th>status</th>"
            f"<th>seconds</th></tr></thead><tbody>{rows}</tbody></table>")


def _contents(result: SeriesResult, rest: list) -> str:
    """The series under the report: where the run is, each notebook's status, and the other pages."""
    entries = "\n".join(f"{_title(r)} <{r.name}>" for r in rest)
    toctree = f"```{{toctree}}\n:caption: Notebooks\n:maxdepth: 1\n\n{entries}\n```\n" if rest else ""
    return "\n".join([f"## The notebook series (profile {result.profile})", "",
                      f"Run folder `{result.run_dir}`; records in `{result.results}`. Every notebook of the series "
                      "in reading order, as it ran; each ends with what it showed and points to the next; a notebook "
                      "whose recorded runs were all skipped says why.", "",
                      "```{raw} html", _status_table(result), "```", "", toctree])


def follow_parameters(nb) -> None:
    """Tag papermill's ``injected-parameters`` cell ``remove-cell`` when the ``parameters`` cell is: the
    values a hidden parameters cell received stay hidden with it."""
    def tags(cell) -> list[str]:
        return list(cell.get("metadata", {}).get("tags", []))

    if any("parameters" in tags(c) and REMOVE_CELL in tags(c) for c in nb.cells):
        for cell in nb.cells:
            if "injected-parameters" in tags(cell) and REMOVE_CELL not in tags(cell):
                cell.setdefault("metadata", {}).setdefault("tags", []).append(REMOVE_CELL)


def _page(run, source: Path, target: Path, contents: str | None = None) -> None:
    """The executed notebook as a page, its hidden parameters' values hidden too; on top, a note where its recorded runs
    were all skipped, a warning where it failed."""
    nb = nbformat.read(source, as_version=4)
    follow_parameters(nb)
    if run.status == "skipped":
        note = ("```{note}\nThis notebook **ran**; every run it records was skipped" + (f": {run.reason}" if run.reason
                else "") + ". What it measured without a record (04's step times on this CPU) is on the page.\n```")
    elif run.status != "ok":
        note = f"```{{warning}}\nThis notebook was **{run.status}**{f': {run.error}' if run.error else '.'}\n```"
    if run.status != "ok":
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(note))
    if contents:  # the front page: the report, then the series under it
        nb.cells.append(nbformat.v4.new_markdown_cell(contents))
    nbformat.write(nb, target)


def build_site(result: SeriesResult) -> Path:
    """Build ``<run folder>/site`` (atomically: a failed build leaves no half site) from the run's
    executed notebooks; returns its ``index.html``. Needs the ``site`` extra (``site_missing``)."""
    from sphinx.application import Sphinx

    pages = [r for r in result.runs if r.notebook is not None and Path(r.notebook).exists()]
    target = result.run_dir / "site"
    with tempfile.TemporaryDirectory(prefix=".site-src-", dir=result.run_dir) as src_dir:
        src = Path(src_dir)
        (src / "conf.py").write_text(_conf(result), encoding="utf-8")
        report = next((r for r in pages if r.name.startswith(REPORT_PREFIX)), None)
        rest = [r for r in pages if r is not report]
        if report is None:  # 06 not run: the front page is the series' contents alone
            (src / "index.md").write_text(f"# lstmnb notebook series, profile {result.profile}\n\n"
                                          + _contents(result, rest), encoding="utf-8")
        else:  # the report is the front page, its first screen on top
            _page(report, Path(report.notebook), src / "index.ipynb", _contents(result, rest))
        (src / "_static").mkdir()
        (src / "_static" / "report.css").write_text(TABLE_CSS, encoding="utf-8")
        for run in rest:
            _page(run, Path(run.notebook), src / f"{run.name}.ipynb")
        with atomic_path(target) as out:
            with warnings.catch_warnings():  # the theme's deprecation notes about Sphinx's API are not the reader's
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", PendingDeprecationWarning)
                app = Sphinx(str(src), str(src), str(out), str(src / ".doctrees"), "html", status=None, warning=None,
                             freshenv=True, verbosity=0)
                app.build()
            if app.statuscode:
                raise RuntimeError(f"sphinx ended with status {app.statuscode}")
            shutil.rmtree(Path(out) / ".doctrees", ignore_errors=True)
    return target / "index.html"
