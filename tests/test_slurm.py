"""The carc/ sbatch scripts under a real SLURM (slurmctld, slurmd, munged started by carc/local_slurm.sh):
DDP over gloo on one node, the multi-node script's c10d rendezvous through srun (on one node and on two
nodes in their own network namespaces), the notebook series with the `ci` profile, and a series that
SLURM's time-limit warning stops, all submitted together to one two-node cluster. Each job's run record is
checked, down to the SLURM job id it carries.
Skipped, with the reason, where SLURM is not installed or cannot run (not root, no network namespaces):
carc/ci_slurm.sh installs it on Debian.

The jobs run this checkout (PYTHONPATH) in the Python environment running the tests (LSTMNB_ACTIVATE:
its activate script), on CPU (LSTMNB_DEVICE=cpu), with tiny sizes so that each job takes a minute or two.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from conftest import waiting_notebook

from lstmnb.machine.device import device_info

ROOT = Path(__file__).resolve().parents[1]
LOCAL_SLURM = ROOT / "carc" / "local_slurm.sh"
NOT_RUNNABLE = 3  # local_slurm.sh's exit status where SLURM cannot run here (missing, not root, ...)
TINY = ["--window", "12", "--hidden", "8", "--epochs", "2"]
DATA = ["--start", "2020-01-01", "--end", "2020-01-21"]
JOB_LIMIT_S = 300


def test_record_names_the_slurm_job(monkeypatch):
    """Inside a SLURM job the record's device section says which job; outside it says nothing of SLURM."""
    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    assert "slurm" not in device_info("cpu")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NAME", "lstmnb-ddp")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert device_info("cpu")["slurm"] == {"job_id": 4242, "job_name": "lstmnb-ddp", "nodelist": "node[1-2]",
                                           "nodes": 2}


@pytest.mark.skipif(sys.platform == "win32" or shutil.which("bash") is None,
                    reason="local_slurm.sh is a bash script for Linux")
@pytest.mark.parametrize("cpus", ["0", "two", "1.5"])
def test_a_bad_cpu_count_is_refused_before_anything_starts(tmp_path, cpus):
    state = tmp_path / "state"
    env = dict(os.environ, LSTMNB_SLURM_DIR=str(state), LSTMNB_SLURM_CPUS=cpus)
    done = subprocess.run(["bash", str(LOCAL_SLURM), "start"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"local_slurm: LSTMNB_SLURM_CPUS={cpus} is not a whole number of CPUs from 1 to 9999"
    assert not state.exists()  # nothing made


# --- the real cluster ----------------------------------------------------------------------------

def _free_port_pair() -> int:
    """A port p with p and p + 1 free a moment ago (slurmctld and slurmd)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        if port + 1 < 65536:
            return port
    raise RuntimeError("no two adjacent free ports")


def _job_env(cluster_env: dict[str, str]) -> dict[str, str]:
    """The environment sbatch passes on to the jobs: this checkout in this Python's environment, on CPU."""
    env = dict(os.environ, **cluster_env)
    activate = Path(sys.executable).parent / "activate"
    if sys.prefix != sys.base_prefix and activate.is_file():
        env["LSTMNB_ACTIVATE"] = str(activate)          # a virtual environment: activated by the job
    else:
        env["LSTMNB_ACTIVATE"] = "none"                 # e.g. conda's Python already on PATH
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env["LSTMNB_DEVICE"] = "cpu"
    for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
        if var != "SLURM_CONF":
            del env[var]                                # never inherit an outer job's settings
    return env


def _logs(state: Path) -> str:
    """The last lines of the cluster's daemon logs (for a failure's message)."""
    return "".join(f"--- {log.name}\n" + "".join(log.read_text().splitlines(keepends=True)[-15:])
                   for log in sorted((state / "log").glob("*.log")))


@pytest.fixture
def cluster(request, tmp_path):
    """A local SLURM cluster of ``request.param`` = (nodes, CPUs each node declares or None for the machine's),
    stopped afterwards; skips where none can run."""
    nodes, cpus = request.param
    # its own folder with a short path: munged's socket lives there (a socket path holds 107 bytes)
    state = Path(tempfile.mkdtemp(prefix="lnb-slurm-"))
    env = dict(os.environ, LSTMNB_SLURM_DIR=str(state), LSTMNB_SLURM_NODES=str(nodes),
               LSTMNB_SLURM_PORT=str(_free_port_pair()))
    env.pop("LSTMNB_SLURM_CPUS", None)
    if cpus is not None:
        env["LSTMNB_SLURM_CPUS"] = str(cpus)
    started = subprocess.run(["bash", str(LOCAL_SLURM), "start"], env=env, capture_output=True, text=True,
                             timeout=180)
    try:
        if started.returncode == NOT_RUNNABLE:
            pytest.skip(f"no local SLURM here: {started.stderr.strip()}")
        assert started.returncode == 0, f"local_slurm.sh start failed:\n{started.stdout}{started.stderr}{_logs(state)}"
        yield {"env": _job_env({"SLURM_CONF": str(state / "slurm.conf")}), "out": tmp_path, "state": state}
    finally:
        subprocess.run(["bash", str(LOCAL_SLURM), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def _submit(cluster, name: str, script: str, sbatch_args: list[str], script_args: list[str],
            limit_min: int = JOB_LIMIT_S // 60, **extra_env: str) -> subprocess.Popen:
    """``sbatch --wait`` of a carc/ script from the repository root, CPU options on the command line, a time
    limit of ``limit_min`` minutes; the job log is ``<name>-<job id>.out`` in the test's folder."""
    env = dict(cluster["env"], **extra_env)
    log = cluster["out"] / f"{name}-%j.out"
    cmd = ["sbatch", "--wait", "--partition=local", "--gres=none", "--mem=2G", f"--time={limit_min}",
           f"--output={log}", *sbatch_args, f"carc/{script}", *script_args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(cluster, name: str, proc: subprocess.Popen, status: int = 0) -> tuple[int, str]:
    """The job id and log of a submitted job, once it ended with ``status`` (its log in the message otherwise)."""
    out, _ = proc.communicate(timeout=JOB_LIMIT_S + 120)
    found = re.search(r"Submitted batch job (\d+)", out)
    assert found, f"sbatch did not submit {name}: {out}"
    job_id = int(found.group(1))
    log = cluster["out"] / f"{name}-{job_id}.out"
    text = log.read_text() if log.exists() else "(no job log)"
    assert proc.returncode == status, f"job {name} ({job_id}) ended with {proc.returncode}:\n{out}\n{text[-4000:]}"
    return job_id, text


def _records(folder: Path) -> list[dict]:
    files = sorted(folder.rglob("runs.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def _check_ddp_record(rec: dict, job_id: int, name: str, world_size: int, nodes: int) -> None:
    assert rec["status"] == "ok", rec["reason"]
    assert rec["world_size"] == world_size and rec["parallel"]["world_size"] == world_size
    assert rec["parallel"]["backend"] == "gloo" and rec["parallel"]["nodes"] == nodes
    assert rec["device"]["kind"] == "cpu"
    slurm = rec["device"]["slurm"]
    assert slurm["job_id"] == job_id and slurm["job_name"] == name and slurm["nodes"] == nodes
    assert slurm["partition"] == "local" and slurm["cluster"] == "lstmnb-local"
    assert rec["metrics"]["test_rmse_k"] > 0 and rec["metrics"]["epochs_run"] == len(rec["epochs"]) == 2


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("cluster", [(2, 5)], indirect=True, ids=["two-nodes"])
def test_carc_scripts_run_under_slurm_and_a_series_stops_itself_before_the_time_limit(cluster):
    """The three carc/ scripts and a series that must stop itself, submitted together to one cluster of two nodes
    (two slurmd, each in its own network namespace with its own hostname and address), each declaring 5 CPUs (the
    waiting series computes nothing, so it runs beside the others on this machine's cores): DDP on one node, the
    multi-node script on one node and on both (one gloo rank each: srun starts a torchrun per node, they meet on
    the first), the `ci` profile's 02, and the waiting series.

    run_profile.sbatch's promise: SLURM's warning signal (--signal=B:TERM@sig_time) reaches lstmnb, which keeps
    the notebook it was running, writes the index and ends the job itself (exit 143) before the time limit would
    kill it. A 1-minute limit with the warning 10 s before it, and a notebook that waits for 10 minutes.
    slurmctld checks time limits every 30 s and signals at the first check within sig_time + 30 s of the end
    (send_job_warn_signal): here between the 20th and the 50th second, the kernel long started; the limit itself
    is enforced at the first check past the 60th second, at least 30 s after the signal."""
    out = cluster["out"]
    nbs = out / "nbs"
    nbs.mkdir()
    waiting_notebook(nbs / "01_wait.ipynb", 600, busy=False)  # 20 to 50 s of waiting for the signal
    profile = nbs / "wait.yaml"
    profile.write_text("label: wait\nkernel: python3\ncell_timeout_s: 900\nparameters: {}\n")
    waiting = _submit(cluster, "lstmnb-wait", "run_profile.sbatch", ["--cpus-per-task=1", "--signal=B:TERM@10"],
                      [str(profile), "--notebooks", str(nbs), "--runs-dir", str(out / "waited"), "--no-html"],
                      limit_min=1)
    single = _submit(cluster, "lstmnb-ddp", "ddp_single_node.sbatch", ["--cpus-per-task=2"],
                     ["2", *DATA, *TINY], RESULTS=str(out / "single"))
    multi = _submit(cluster, "lstmnb-ddp-mn", "ddp_multi_node.sbatch", ["--nodes=1", "--cpus-per-task=1"],
                    TINY, RESULTS=str(out / "multi"), DATA_ARGS=" ".join(DATA))
    both = _submit(cluster, "lstmnb-ddp-mn2", "ddp_multi_node.sbatch", ["--nodes=2", "--cpus-per-task=1"], TINY,
                   RESULTS=str(out / "multi2"), DATA_ARGS=" ".join(DATA))
    series = _submit(cluster, "lstmnb-series", "run_profile.sbatch", ["--cpus-per-task=1"],
                     ["ci", "--only", "02", "--runs-dir", str(out / "runs"), "--no-html"])
    single_id, _ = _finish(cluster, "lstmnb-ddp", single)
    multi_id, _ = _finish(cluster, "lstmnb-ddp-mn", multi)
    both_id, _ = _finish(cluster, "lstmnb-ddp-mn2", both)
    series_id, _ = _finish(cluster, "lstmnb-series", series)
    waiting_id, text = _finish(cluster, "lstmnb-wait", waiting, status=143)

    [rec] = _records(out / "single")
    _check_ddp_record(rec, single_id, "lstmnb-ddp", world_size=2, nodes=1)
    [rec] = _records(out / "multi")
    _check_ddp_record(rec, multi_id, "lstmnb-ddp-mn", world_size=1, nodes=1)
    [rec] = _records(out / "multi2")
    _check_ddp_record(rec, both_id, "lstmnb-ddp-mn", world_size=2, nodes=2)  # the script's job name
    assert rec["device"]["hostname"] == "node1"             # rank 0 writes, on the first node
    assert rec["device"]["slurm"]["nodelist"] == "node[1-2]"
    recs = _records(out / "runs")
    assert {r["experiment"] for r in recs} >= {"fit"}, [r["experiment"] for r in recs]
    for rec in recs:
        assert rec["status"] == "ok" and rec["profile"] == "ci" and rec["device"]["kind"] == "cpu"
        assert rec["device"]["slurm"]["job_id"] == series_id

    ctld = (cluster["state"] / "log" / "slurmctld.log").read_text()
    assert "DUE TO TIME LIMIT" not in text and f"Time limit exhausted for JobId={waiting_id}" not in ctld, text
    assert re.search(rf"JobId={waiting_id} WEXITSTATUS 143", ctld), ctld[-3000:]
    assert re.search(r"^lstmnb notebooks run: stopped by SIGTERM.*kept", text, re.M), text[-3000:]
    [run_dir] = (out / "waited" / "wait").iterdir()
    kept = nbformat.read(run_dir / "01_wait.ipynb", as_version=4)
    assert "first cell done" in str(kept.cells[2].outputs)
    assert re.search(r"^01_wait\s+interrupted\b", text, re.M), text[-3000:]  # the summary, in the job's log
