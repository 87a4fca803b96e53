"""`lstmnb doctor` on this machine: what it reports, and its exit status for the profiles' needs."""

from __future__ import annotations

import pytest
import torch

from lstmnb.cli import main
from lstmnb.doctor import MISSING, OK, diagnose, kernel_problem


def test_doctor_reports_this_machine_and_is_ready_for_the_cpu_profile(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    lines = {}  # name -> its row, wrapped continuation lines (indented) joined to it
    for line in out.splitlines():
        if line.strip() and not line[0].isspace():
            name = line.split()[0] + (" " + line.split()[1] if line.startswith("profile") else "")
            lines[name] = line
        elif line.strip() and lines:
            lines[name] += " " + line.strip()
    assert torch.__version__ in lines["torch"] and "ok" in lines["profile cpu"]
    if not torch.cuda.is_available():
        assert "absent" in lines["GPU"] and "no usable CUDA GPU" in lines["GPU"]
        # what the runner does with a GPU profile here: it refuses it (the line said its runs would be skipped)
        t4 = lines["profile colab-t4"]
        assert "`lstmnb notebooks run --profile colab-t4` refuses to start here" in t4 and "-p device auto" in t4
        assert main(["notebooks", "run", "--profile", "colab-t4", "--only", "02"]) == 2
        capsys.readouterr()
    for name in ("gloo", "numba", "numba-cuda", "gcsfs", "papermill", "sphinx"):
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


# --- doctor --deep: real jobs ---------------------------------------------------------------------------

@pytest.mark.slow  # a training run and two spawned gloo ranks (~15 s on 2 busy cores)
def test_deep_check_runs_the_cpu_jobs_and_skips_the_gpu_ones_with_the_reason(capsys):
    """One real run of `doctor --deep` for a CPU profile and a GPU profile: the CPU jobs pass here, so the
    cpu profile is ready; without a GPU the carc-a100 profile's GPU jobs are unproven, so the exit is 1."""
    status = main(["doctor", "--deep", "--profile", "cpu", "--profile", "carc-a100"])
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:2]): line for line in out.split("deep check")[1].splitlines()[2:]
            if line[:1].strip() and not line.startswith("profile")}
    assert " ok " in rows[("cpu", "train")] and "test RMSE" in rows[("cpu", "train")]
    assert " ok " in rows[("cpu", "ddp")] and "2 ranks over gloo" in rows[("cpu", "ddp")]
    assert "profile cpu: its jobs passed" in out
    if not torch.cuda.is_available():
        for job in ("eager", "captured", "bf16", "memory", "nccl"):
            assert "skipped" in rows[("cuda", job)] and "no usable CUDA GPU" in rows[("cuda", job)], job
        assert "profile carc-a100: needs cuda eager steps (skipped)" in out and status == 1
    for engine in ("numba-cuda", "numba-cuda-block"):
        assert rows[("numba.cuda", engine)].split()[2] in ("ok", "skipped")


def test_deep_readiness_follows_what_each_profile_needs():
    from lstmnb.selfcheck import FAILED, OK, SKIPPED, Job, deep_ready

    def job(device, name, status, unproven=False):
        return Job(device, name, status, 1.0, "why", unproven)

    cpu = [job("cpu", "train", OK), job("cpu", "ddp gloo x2", OK)]
    gpu = [job("cuda:0", "eager steps", OK), job("cuda:0", "captured steps", OK), job("cuda:0", "memory cap", OK),
           job("cuda:0", "bf16", SKIPPED), job("cuda", "nccl x2", SKIPPED), job("numba.cuda", "numba-cuda", FAILED)]
    assert deep_ready(cpu + gpu, "cuda") == (True, [])  # one GPU: NCCL does not apply; numba is not a need
    broken = job("cuda:0", "captured steps", FAILED)
    assert deep_ready(cpu + [broken], "cuda") == (False, [broken]) and deep_ready(cpu + [broken], "cpu")[0]
    no_gpu = job("cuda", "eager steps", SKIPPED, unproven=True)
    assert deep_ready(cpu + [no_gpu], "cuda") == (False, [no_gpu]) and deep_ready(cpu + [no_gpu], "cpu")[0]
    late = job("cpu", "ddp gloo x2", SKIPPED, unproven=True)  # the budget ran out before it
    assert deep_ready([cpu[0], late], "cpu") == (False, [late])


def test_deep_budget_grows_with_the_gpus_and_only_cuda0_gets_the_full_checks():
    from lstmnb.selfcheck import BUDGET_S, FULL_GPU_JOBS, SMOKE_S, deep_budget, gpu_rows

    assert deep_budget(0) == deep_budget(1) == BUDGET_S
    assert deep_budget(8) == BUDGET_S + 7 * SMOKE_S
    rows = gpu_rows(8)
    full = [r.name for r in rows if r.device == "cuda:0"]
    assert full == [name for name, _ in FULL_GPU_JOBS]
    others = [(r.device, r.name) for r in rows if r.device.startswith("cuda:") and r.device != "cuda:0"]
    assert others == [(f"cuda:{i}", "smoke steps") for i in range(1, 8)]
    assert rows[-1].name == "nccl x2" and rows[-1].run is not None
    one = gpu_rows(1)
    assert one[-1].name == "nccl x2" and one[-1].run is None and "needs 2" in one[-1].skip


def test_an_exception_inside_a_job_is_a_failed_row_not_a_traceback():
    import torch

    from lstmnb.selfcheck import FAILED, OK, SKIPPED, Planned, Skip, run_job

    def bad_shapes(windows) -> str:  # a real torch error raised inside the job
        return str(torch.zeros(2, 3) @ torch.zeros(2, 3))

    def missing(windows) -> str:
        raise Skip("not here", unproven=True)

    job = run_job(Planned("cpu", "matmul", bad_shapes), None)
    assert job.status == FAILED and job.detail.startswith("RuntimeError:") and "\n" not in job.detail
    assert job.seconds is not None
    skipped = run_job(Planned("cpu", "skip", missing), None)
    assert (skipped.status, skipped.detail, skipped.unproven) == (SKIPPED, "not here", True)
    assert run_job(Planned("cpu", "ok", lambda w: f"{len(w)} windows"), [1, 2]).status == OK
    late = run_job(Planned("cpu", "late", bad_shapes), None, over_budget="budget spent")
    assert late.status == SKIPPED and late.unproven and late.seconds is None
