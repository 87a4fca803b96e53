"""carc/ddp_multi_node.sbatch's own shell logic, without SLURM: the commands it calls (scontrol, srun, lstmnb)
are stand-ins that print what they were given, so what the script hands srun and torchrun can be read.
(tests/test_slurm.py runs the scripts under a real SLURM.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "carc" / "ddp_multi_node.sbatch"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)


def _run_multi_node(tmp_path: Path, job_id: str, cpus_per_task: str | None = "4") -> str:
    """The srun line the script runs in job ``job_id`` on nodes gpu01, gpu02 (CPU ranks, 2 per node)."""
    bin_dir = tmp_path / f"bin-{job_id}"
    bin_dir.mkdir()
    # what `scontrol show hostnames gpu[01-02]` prints, in one write as scontrol's buffered output is (two
    # writes could meet `head -n 1` gone: SIGPIPE, which pipefail makes the script's exit status)
    _stub(bin_dir, "scontrol", "echo 'gpu01\ngpu02'")
    _stub(bin_dir, "srun", 'echo "SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-unset} srun $*"')
    _stub(bin_dir, "lstmnb", "exit 0")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", LSTMNB_ACTIVATE="none", LSTMNB_DEVICE="cpu",
               RANKS_PER_NODE="2", SLURM_SUBMIT_DIR=str(ROOT), SLURM_JOB_ID=job_id, SLURM_NNODES="2",
               SLURM_JOB_NODELIST="gpu[01-02]")
    env.pop("RDZV_PORT", None)
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = cpus_per_task
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if " srun " in x]
    return line


def _endpoint(line: str) -> str:
    words = line.split()
    return words[words.index("--rdzv-endpoint") + 1]


def test_srun_gets_the_jobs_cpus_per_task(tmp_path):
    """srun (SLURM 22.05+) does not inherit sbatch's --cpus-per-task: the script passes it on, or a step bound
    to cores would run the node's torchrun and all its ranks on one core."""
    assert _run_multi_node(tmp_path, "1234").startswith("SRUN_CPUS_PER_TASK=4 ")
    assert _run_multi_node(tmp_path, "1235", cpus_per_task=None).startswith("SRUN_CPUS_PER_TASK=unset ")


def test_rendezvous_on_the_first_node_at_a_port_of_the_job(tmp_path):
    """Two jobs whose first node is the same host must not share a c10d store: the port follows the job id."""
    first, second = _endpoint(_run_multi_node(tmp_path, "1234")), _endpoint(_run_multi_node(tmp_path, "1235"))
    assert first.split(":")[0] == second.split(":")[0] == "gpu01"
    ports = [int(e.split(":")[1]) for e in (first, second)]
    assert ports[0] != ports[1] and all(10000 <= p < 30000 for p in ports)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to a process is TerminateProcess on Windows: no trap runs")
def test_the_series_job_passes_slurms_warning_signal_to_lstmnb(tmp_path):
    """run_profile.sbatch asks SLURM for SIGTERM to the batch shell before the time limit; the shell must hand it
    to `lstmnb notebooks run` (which keeps what ran), not die and leave it to be killed mid-cell."""
    script = ROOT / "carc" / "run_profile.sbatch"
    assert "#SBATCH --signal=B:TERM@" in script.read_text()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    flag = tmp_path / "got-term"
    _stub(bin_dir, "lstmnb", f"trap 'touch {flag}; kill $!; exit 143' TERM\necho started\nsleep 60 & wait")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", LSTMNB_ACTIVATE="none", SLURM_SUBMIT_DIR=str(ROOT))
    proc = subprocess.Popen(["bash", str(script), "cpu"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # the job started lstmnb
            if line.strip() == "started":
                break
        proc.terminate()  # what --signal=B:TERM does: the batch shell's own process
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert flag.exists() and proc.returncode == 143
