"""No credential or environment variable value reaches records, checkpoints, notebooks, HTML or logs:
fake secrets (canaries) in the environment of real runs, then every byte they wrote is searched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fake_secrets


@pytest.fixture
def secret_env(tmp_path, sample_store_path):
    """The session's environment plus fake credentials (conftest.fake_secrets); returns (env, the canaries)."""
    secrets, canaries = fake_secrets(tmp_path)
    return {**os.environ, **secrets}, canaries


def _leaks(texts: dict[str, bytes], canaries: set[str]) -> list[str]:
    return [f"{name}: {c}" for name, data in texts.items() for c in canaries if c.encode() in data]


def _written(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_train_and_doctor_leak_no_secret(secret_env, tmp_path):
    env, canaries = secret_env
    out = tmp_path / "out"
    train = subprocess.run([sys.executable, "-m", "lstmnb", "train", "--start", "2020-01-01", "--end", "2020-01-10",
                            "--epochs", "1", "--hidden", "8", "--threads", "1", "--no-progress",
                            "--results", str(out / "runs.jsonl"), "--checkpoint", str(out / "c.pt")],
                           env=env, capture_output=True, timeout=300)
    assert train.returncode == 0, train.stderr[-2000:]
    doctor = subprocess.run([sys.executable, "-m", "lstmnb", "doctor"], env=env, capture_output=True, timeout=300)
    written = _written(out)
    assert {Path(p).name for p in written} == {"runs.jsonl", "c.pt", "c.pt.sha256"}
    logs = {"train stdout": train.stdout, "train stderr": train.stderr, "doctor": doctor.stdout + doctor.stderr}
    assert _leaks({**written, **logs}, canaries) == []


@pytest.mark.slow
def test_notebook_series_leaks_no_secret(ci_series):
    """The whole notebook series, executed with the ci profile and fake credentials in its environment
    (conftest.ci_series): its notebooks, the site, figures, tables, records and the runner's lines hold no
    canary."""
    written = _written(ci_series.run_dir)
    assert any(p.endswith(".html") for p in written) and any(p.endswith("runs.jsonl") for p in written)
    assert _leaks({**written, "runner": "\n".join(ci_series.said).encode()}, ci_series.canaries) == []
