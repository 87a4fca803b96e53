"""No credential or environment variable value reaches records, checkpoints, notebooks, HTML or logs:
fake secrets (canaries) in the environment of real runs, then every byte they wrote is searched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest


@pytest.fixture
def secret_env(tmp_path, sample_store_path):
    """The session's environment plus fake credentials; returns (env, the canary strings)."""
    tag = uuid.uuid4().hex
    canaries = {f"canary-{what}-{tag}" for what in ("aws", "token", "hf", "github", "plain", "key")}
    account = tmp_path / "service-account.json"
    account.write_text(json.dumps({"type": "service_account", "client_email": f"canary-email-{tag}@x.invalid",
                                   "private_key": f"canary-key-{tag}", "private_key_id": f"canary-id-{tag}"}))
    canaries |= {f"canary-email-{tag}", f"canary-id-{tag}"}
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": f"canary-aws-{tag}", "GCS_OAUTH_TOKEN": f"canary-token-{tag}",
           "HF_TOKEN": f"canary-hf-{tag}", "GITHUB_TOKEN": f"canary-github-{tag}",
           "LSTMNB_UNRELATED_SETTING": f"canary-plain-{tag}", "GOOGLE_APPLICATION_CREDENTIALS": str(account)}
    return env, canaries


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
def test_notebook_run_leaks_no_secret(secret_env, tmp_path):
    """The notebook that trains and records (02), executed with the ci profile: its notebook, the site,
    figures, records and the runner's output hold no canary."""
    env, canaries = secret_env
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "lstmnb", "notebooks", "run", "--profile", "ci", "--only", "02",
                           "--runs-dir", str(runs), "--no-progress"], env=env, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = _written(runs)
    assert any(p.endswith(".html") for p in written) and any(p.endswith("runs.jsonl") for p in written)
    assert _leaks({**written, "stdout": proc.stdout, "stderr": proc.stderr}, canaries) == []
