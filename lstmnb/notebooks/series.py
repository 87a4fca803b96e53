"""What happened to each notebook of a series run. A notebook that ran to the end is ``ok``, unless every run record
it wrote was skipped (04 without a GPU): then it is ``skipped`` with the records' reasons, never listed as ``ok`` nor
as not run (04 still teaches its step-time lesson on the CPU)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass
class NotebookRun:
    """What happened to one notebook of the series."""

    name: str
    status: str = "not run"  # ok | skipped | failed | interrupted | not run
    seconds: float | None = None
    notebook: Path | None = None
    error: str | None = None
    reason: str | None = None  # why a skipped notebook measured nothing (its records' reasons)

    @property
    def label(self) -> str:
        """The status in a word or two: 'runs skipped' for a notebook that ran but whose runs were all skipped."""
        return "runs skipped" if self.status == "skipped" else self.status

    @property
    def summary(self) -> str:
        """The status as the report's site shows it: 'ran; its runs skipped (no usable CUDA GPU ...)'."""
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
    site: Path | None = None  # the rendered report: the site's front page (lstmnb.notebooks.site), when built
    site_note: str | None = None  # why there is no site, in one line

    @property
    def ok(self) -> bool:
        """Every notebook ran to its end (a notebook whose runs were all skipped did)."""
        return all(r.status in ("ok", "skipped") for r in self.runs)


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
    return "skipped", "; ".join(dict.fromkeys(str(r.get("reason") or "no reason given") for r in new))  # each once
