"""The benchmarks' tiny mode (``--tiny``, what CI runs through benchmarks/run_tiny.py) goes through every part
whose figures the full run prints, at tiny sizes: a part the tiny mode skips is never run before someone
runs the benchmark at full size."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_era5_extracts_tiny_mode_runs_the_kill_and_resume_test(tmp_path):
    # the script's approach (a) opens the store with dask chunks: the `bench` extra, which CI installs after the
    # test suite and then runs this script's tiny mode (benchmarks/run_tiny.py), kill-and-resume included
    pytest.importorskip("dask", reason="the bench extra (pip install -e \".[bench]\") is not installed")
    out = subprocess.run([sys.executable, str(BENCHMARKS / "era5_extract.py"), "--tiny", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("kill at ~50% and resume (3 blocks of 2 h)") for line in lines), out.stdout[-2000:]
    assert lines[-1] == "benchmark done: tables above"
