"""What happened to each notebook of a series run, and the run folder's ``index.html``.

A notebook that ran to the end is ``ok``, unless every run record it wrote was skipped (04 on a machine
without a GPU): then it is ``skipped`` with the records' reasons, so the index never lists a notebook as
``ok`` whose runs measured nothing, and says "ran; its runs skipped" (04 still teaches its step-time lesson
on the CPU), never that the notebook itself did not run.
"""

from __future__ import annotations

import html
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..paths import atomic_path


@dataclass
class NotebookRun:
    """What happened to one notebook of the series."""

    name: str
    status: str = "not run"  # ok | skipped | failed | interrupted | not run
    seconds: float | None = None
    notebook: Path | None = None
    html: Path | None = None
    error: str | None = None
    reason: str | None = None  # why a skipped notebook measured nothing (its records' reasons)

    @property
    def label(self) -> str:
        """The status in a word or two: 'runs skipped' for a notebook that ran but whose runs were all skipped."""
        return "runs skipped" if self.status == "skipped" else self.status

    @property
    def summary(self) -> str:
        """The status as the index shows it: 'ran; its runs skipped (no usable CUDA GPU ...)'."""
        if self.status == "skipped":
            return f"ran; its runs skipped ({self.reason})" if self.reason else "ran; its runs skipped"
        return self.status


@dataclass
class SeriesResult:
    """The outcome of ``run_series``: where things are and one entry per selected notebook."""

    profile: str
    run_dir: Path
    results: Path
    runs: list[NotebookRun]
    site: Path | None = None  # the site's index.html (lstmnb.notebooks.site), when one was built
    site_note: str | None = None  # why there is no site

    @property
    def ok(self) -> bool:
        """Every notebook ran to its end (a notebook whose runs were all skipped did)."""
        return all(r.status in ("ok", "skipped") for r in self.runs)

    @property
    def report(self) -> Path | None:
        """The HTML of the analysis notebook (06), else the last HTML written."""
        htmls = [r.html for r in self.runs if r.html]
        analysis = [h for h in htmls if h.stem.startswith("06")]
        return (analysis or htmls or [None])[-1]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"notebook": r.name, "status": r.summary,
                              "seconds": round(r.seconds, 1) if r.seconds is not None else None,
                              "html": str(r.html) if r.html else ""} for r in self.runs]).set_index("notebook")


def _read(results: Path) -> list[dict]:
    from ..records import read_records

    if not Path(results).exists():
        return []
    with warnings.catch_warnings():  # a broken line is the report's to name, not the runner's
        warnings.simplefilter("ignore")
        return read_records(results)


def run_ids(results: Path) -> set[str]:
    """The run ids of the records in ``results`` now (taken before a notebook runs)."""
    return {str(r.get("run_id")) for r in _read(results)}


def records_outcome(results: Path, before: set[str]) -> tuple[str, str | None]:
    """('skipped', their reasons) when every record written to ``results`` since ``before`` was skipped,
    else ('ok', None) (also when the notebook wrote no record: 01, 02's data steps, 06)."""
    new = [r for r in _read(results) if str(r.get("run_id")) not in before]
    if not new or any(r.get("status") != "skipped" for r in new):
        return "ok", None
    reasons = list(dict.fromkeys(str(r.get("reason") or "no reason given") for r in new))
    return "skipped", "; ".join(reasons)


# the reading order the index gives: each notebook's question, by its number
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


def _reading_order(result: SeriesResult) -> str:
    """An ordered list: every notebook of the run with its question and link; 06 marked as the answer."""
    items = []
    for r in result.runs:
        what = READING.get(r.name[:2])
        name = (f"<a href={html.escape(r.html.name)!r}>{html.escape(r.name)}</a>" if r.html else html.escape(r.name))
        items.append(f"<li>{name}{': ' + html.escape(what) if what else ''}"
                     f"{' <b>(the answer: start here for the result)</b>' if r.name.startswith('06') else ''}</li>")
    return ("<h2>Reading order</h2><p>Read the notebooks in this order; each ends with what it showed and "
            f"points to the next.</p><ol>{''.join(items)}</ol>") if items else ""


def write_index(result: SeriesResult) -> Path:
    """``index.html`` in the run folder: the reading order (each notebook's question, linked), then a table
    with each notebook's status, seconds and HTML."""
    rows = "".join(
        f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(r.summary)}</td>"
        f"<td>{'' if r.seconds is None else f'{r.seconds:.1f}'}</td>"
        f"<td>{f'<a href={html.escape(r.html.name)!r}>{html.escape(r.html.name)}</a>' if r.html else ''}</td>"
        f"<td>{html.escape(r.error or '')}</td></tr>"
        for r in result.runs
    )
    page = (f"<!doctype html><meta charset='utf-8'><title>lstmnb {result.profile}</title>"
            f"<h1>lstmnb notebook series, profile {html.escape(result.profile)}</h1>"
            f"<p>results: {html.escape(str(result.results))}</p>{_reading_order(result)}<h2>Runs</h2>"
            f"<table border=1 cellpadding=4><tr><th>notebook</th><th>status</th><th>seconds</th><th>HTML</th>"
            f"<th>error</th></tr>{rows}</table>")
    target = result.run_dir / "index.html"
    with atomic_path(target, suffix=".html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return target
