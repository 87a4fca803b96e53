"""No credential or environment variable value reaches records, checkpoints, notebooks, HTML or logs:
fake secrets (canaries) in the environment of real runs, then every byte they wrote is searched: here the whole
notebook series; `lstmnb train` (with a checkpoint), `doctor` and a notebook's page in test_portable.py."""

from __future__ import annotations

from pathlib import Path

import pytest


def _leaks(texts: dict[str, bytes], canaries: set[str]) -> list[str]:
    return [f"{name}: {c}" for name, data in texts.items() for c in canaries if c.encode() in data]


def _written(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_notebook_series_leaks_no_secret(ci_series):
    """The whole notebook series, executed with the ci profile and fake credentials in its environment
    (conftest.ci_series): its notebooks, the site, figures, tables, records and the runner's lines hold no
    canary."""
    written = _written(ci_series.run_dir)
    assert any(p.endswith(".html") for p in written) and any(p.endswith("runs.jsonl") for p in written)
    assert _leaks({**written, "runner": "\n".join(ci_series.said).encode()}, ci_series.canaries) == []
