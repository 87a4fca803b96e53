"""`lstmnb doctor` on this machine: what it reports, and its exit status for the profiles' needs."""

from __future__ import annotations

import torch

from lstmnb.cli import main
from lstmnb.doctor import MISSING, OK, diagnose, kernel_problem


def test_doctor_reports_this_machine_and_is_ready_for_the_cpu_profile(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0] + (" " + line.split()[1] if line.startswith("profile") else ""): line
             for line in out.splitlines() if line.strip()}
    assert torch.__version__ in lines["torch"] and "ok" in lines["profile cpu"]
    if not torch.cuda.is_available():
        assert "absent" in lines["GPU"] and "no usable CUDA GPU" in lines["GPU"]
    for name in ("gloo", "numba", "numba-cuda", "gcsfs", "papermill", "nbconvert"):
        assert name in lines, name
    assert out.rstrip().endswith("ready")


def test_a_profile_whose_needs_are_missing_exits_non_zero(capsys):
    rows, ready = diagnose(["ci"])
    assert ready and [r.status for r in rows if r.name == "profile ci"] == [OK]
    rows, ready = diagnose(["carc-a100"])  # kernel 'lstmnb', and a GPU
    row = next(r for r in rows if r.name == "profile carc-a100")
    if kernel_problem("lstmnb") or not torch.cuda.is_available():
        assert not ready and row.status == MISSING
        assert main(["doctor", "--profile", "carc-a100"]) == 1
        assert capsys.readouterr().out.rstrip().endswith("not ready: see the 'missing' lines")
