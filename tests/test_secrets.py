"""No credential or environment variable value reaches records, checkpoints, notebooks, HTML or logs:
fake secrets (canaries) in the environment of real runs, then every byte they wrote is searched: here the whole
notebook series; `lstmnb train` (with a checkpoint), `doctor` and a notebook's page in test_portable.py."""

from __future__ import annotations

import pytest
from conftest import leaks, written


@pytest.mark.slow
def test_notebook_series_leaks_no_secret(ci_series):
    """The whole notebook series, executed with the ci profile and fake credentials in its environment
    (conftest.ci_series): its notebooks, the site, figures, tables, records and the runner's lines hold no
    canary."""
    files = written(ci_series.run_dir)
    assert any(p.endswith(".html") for p in files) and any(p.endswith("runs.jsonl") for p in files)
    assert leaks({**files, "runner": "\n".join(ci_series.said).encode()}, ci_series.canaries) == []
