"""lstmnb without what only Linux offers (issue 32): the thread policy, peak memory and records on the
portable paths (psutil), a real run, a record, `doctor` and notebook 01 under ``tests/portable`` (which
takes ``os.sched_getaffinity``, ``os.pread``, psutil's affinity and lstmnb's ``/proc`` reads away in every
process, the notebook kernel too, and starts processes by ``spawn``; fake credentials in their environment, none
of which may be written), and MPS where torch has it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch

import lstmnb
from conftest import fake_secrets, leaks, written
from lstmnb.machine import device
from lstmnb.rules import CLI

SHIM = Path(__file__).parent / "portable"
PACKAGE = Path(lstmnb.__file__).parent


def _without_linux(monkeypatch):
    for name in ("sched_getaffinity", "sched_setaffinity", "pread", "pwrite"):
        monkeypatch.delattr(os, name, raising=False)
    monkeypatch.delattr(psutil.Process, "cpu_affinity", raising=False)


def test_busy_cores_and_thread_policy_without_affinity(monkeypatch):
    _without_linux(monkeypatch)
    assert device.cpu_cores() == os.cpu_count()
    seen = device.busy_cores(window_s=0.05)
    assert seen is not None and 0.0 <= seen["others"] <= os.cpu_count() + 0.5 and seen["own"] >= 0
    policy = device.cpu_threads()
    assert policy["cores"] == os.cpu_count() and policy["busy_cores"] is not None and policy["used"] >= 1


def test_no_cpu_times_at_all_is_a_stated_fallback(monkeypatch):
    """A system whose psutil gives no per-core times: the default threads, and the record says why."""
    _without_linux(monkeypatch)

    def refuse(*args, **kwargs):
        raise psutil.AccessDenied()

    monkeypatch.setattr(psutil, "cpu_times", refuse)
    assert device.busy_cores(window_s=0.01) is None
    policy = device.cpu_threads()
    assert policy["policy"] == "default" and policy["reason"] == "no CPU time counters on this system"
    assert policy["used"] == torch.get_num_threads()


def test_peak_memory_without_a_resettable_mark_says_why():
    from lstmnb.machine.memory import peak_memory_mb

    out = peak_memory_mb(torch.device("cpu"), since_reset=False)
    assert out["peak_mb"] is None and "no per-run peak" in out["note"]
    assert out["process_peak_mb"] > 10  # this process holds torch: tens of MiB at least


def test_records_append_without_pread(monkeypatch, tmp_path):
    from lstmnb import records

    _without_linux(monkeypatch)
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b'{"cut": ')  # a line a crash left without its newline
    rec = {"run_id": "r1", "x": 1}
    assert records.append_record_once(rec, path) == (path, True)
    assert records.append_record_once(rec, path) == (path, False)  # found, not written twice
    assert path.read_text().splitlines()[1] == json.dumps(rec)


POSIX_ONLY = {"fcntl", "resource", "termios", "pwd", "grp"}
LINUX_ONLY_OS = {"sched_getaffinity", "sched_setaffinity", "pread", "pwrite"}


def test_the_package_imports_no_posix_only_module_at_top_level_and_calls_no_linux_only_os_function():
    """Windows cannot import fcntl or resource: they are only imported inside the function that needs
    them (behind a check), and no module calls os's Linux-only functions or opens /proc by itself
    except the stated fallbacks of ``machine/device.py`` (``cpu_model``) and ``machine/memory.py`` (``reset_peak_memory``,
    ``proc_status_kb``)."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            problems += [f"{path.name}: top-level import {n}" for n in names if n.split(".")[0] in POSIX_ONLY]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in LINUX_ONLY_OS and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                problems.append(f"{path.name}:{node.lineno}: os.{node.attr}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/proc/") \
                    and path.relative_to(PACKAGE).as_posix() not in ("machine/device.py", "machine/memory.py"):
                problems.append(f"{path.name}:{node.lineno}: {node.value}")
    assert not problems, problems


def _portable_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SHIM), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LSTMNB_PORTABLE_MARK"] = str(tmp_path / "pids")
    env["LSTMNB_RESULTS"] = str(tmp_path / "results")
    return env


def _lstmnb(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lstmnb", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=540)


@pytest.mark.slow
def test_train_record_doctor_and_notebook_01_without_linux_only_apis_and_leaking_no_secret(tmp_path):
    """Under the shim, with fake credentials in the environment (conftest.fake_secrets): no canary reaches a record,
    a checkpoint, the notebook, its page or what the commands said (the whole series: test_secrets.py)."""
    env = _portable_env(tmp_path)
    secrets, canaries = fake_secrets(tmp_path)
    env.update(secrets)
    check = subprocess.run([sys.executable, "-c", "import os, psutil; print(hasattr(os, 'sched_getaffinity'), "
                            "hasattr(psutil.Process, 'cpu_affinity'))"], env=env, capture_output=True, text=True)
    assert check.stdout.split() == ["False", "False"], check.stderr  # the shim is in force

    # DataLoader workers as macOS and Windows start them (spawn, the shim's): the dataset and everything a worker
    # needs must pickle, and the workers import lstmnb afresh
    train = _lstmnb(["train", "--device", "cpu", "--start", "2020-01-01", "--end", "2020-02-15", "--hidden", "8",
                     "--epochs", "1", "--input-path", "dataloader", "--num-workers", "2", "--results",
                     str(tmp_path / "results"), "--checkpoint", str(tmp_path / "c" / "c.pt")], env, tmp_path)
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
    assert "Traceback" not in train.stderr
    (rec,) = [json.loads(line) for line in (tmp_path / "results" / "runs.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok" and rec["device"]["kind"] == "cpu"
    assert rec["threads"]["busy_cores"] is not None and rec["threads"]["cores"] == os.cpu_count()
    assert rec["memory"]["peak_mb"] is None and "no per-run peak" in rec["memory"]["note"]
    assert rec["config"]["input_path"] == "dataloader"  # the record says how its workers started (kept: the default)
    assert rec["workers"] == {"count": 2, "start_method": "spawn", "started": "once"}

    doctor = _lstmnb(["doctor"], env, tmp_path)
    assert doctor.returncode == 0, doctor.stdout[-2000:] + doctor.stderr[-2000:]
    assert "Traceback" not in doctor.stdout + doctor.stderr

    nb = _lstmnb(["notebooks", "run", "--profile", "ci", "--only", "01", "--runs-dir", str(tmp_path / "runs")],
                 env, tmp_path)
    assert nb.returncode == 0, nb.stdout[-3000:] + nb.stderr[-3000:]
    # the kernel's sockets are encrypted (runner.kernel_config), so ipykernel has no transport warning to log
    assert "without encryption" not in nb.stdout + nb.stderr
    (html,) = (tmp_path / "runs").rglob("site/01_data_access.html")  # the rendered report's page
    assert "Traceback" not in html.read_text()
    pids = set((tmp_path / "pids").read_text().split())
    assert len(pids) >= 7  # the check, train and its 2 workers, doctor, the runner and its kernel: under the shim

    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["c.pt", "c.pt.sha256"]
    said = {name: (done.stdout + done.stderr).encode() for name, done in (("train", train), ("doctor", doctor),
                                                                          ("notebooks", nb))}
    files = written(*(tmp_path / folder for folder in ("results", "c", "runs")))
    assert leaks({**files, **said}, canaries) == []


WORKERS_SECTION = """
import json, multiprocessing
from lstmnb.training import TrainConfig
from lstmnb.training.evaluate import workers_section
out = {}
for method in ("default", "spawn", "forkserver"):  # the default first: nothing has fixed the start method yet
    if method != "default":
        multiprocessing.set_start_method(method, force=True)
    sections = [workers_section(TrainConfig(input_path=p, num_workers=n, persistent_workers=k)) for p, n, k in
                (("dataloader", 2, False), ("dataloader", 2, True), ("dataloader", 0, False), ("fast", 2, False))]
    out[method] = [sections, multiprocessing.get_start_method(allow_none=True)]
print(json.dumps(out))
"""


def test_the_record_says_how_dataloader_workers_start():
    """macOS and Windows spawn DataLoader workers: with the published setting (workers started afresh every
    epoch) each epoch then pays two fresh interpreters' start-up, which a Linux run's forked workers do not
    (measured: 4.4 s against 1.7 s per epoch on 2 cores). The record's ``workers`` says which, read without
    fixing the process's start method (the system's default, then each method set)."""
    out = subprocess.run([sys.executable, "-c", WORKERS_SECTION], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(seen) == ["default", "spawn", "forkserver"]
    for method, ((every, kept, none, fast), fixed) in seen.items():
        expected = {"spawn": "spawn", "forkserver": "forkserver"}.get(method, mp_default())
        assert every["start_method"] == kept["start_method"] == expected and every["count"] == 2, method
        assert (every["started"], kept["started"]) == ("every epoch", "once")
        assert ("note" in every) == (expected != "fork") and "note" not in kept
        assert none is None and fast is None
        assert fixed == (None if method == "default" else method)  # asking did not fix the start method


def mp_default() -> str:
    import multiprocessing

    return multiprocessing.get_all_start_methods()[0]


MPS = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


@pytest.mark.skipif(not MPS, reason=f"torch {torch.__version__} has no usable MPS device here (Apple GPUs only)")
def test_mps_run_records_its_device(tmp_path):
    from lstmnb import training

    cfg = training.TrainConfig(hidden=8, epochs=1, device="mps", progress=False)
    from lstmnb import data

    training.run(data.Request(start="2020-01-01", end="2020-02-15"), cfg, results=tmp_path / "runs.jsonl")
    (rec,) = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok" and rec["device"]["kind"] == "mps"


def test_mps_asked_for_where_there_is_none_is_one_line():
    if MPS:
        pytest.skip("MPS is available here")
    from lstmnb.errors import DeviceError

    with pytest.raises(DeviceError, match=r"^device='mps' asked for, but MPS is not available here; use device='cpu'$"):
        device.resolve_device("mps")
    with pytest.raises(DeviceError, match=r"^--device mps asked for, but MPS is not available here; use --device cpu$"):
        device.resolve_device("mps", CLI)  # as the command line spells it


def test_ddp_on_a_torch_without_torch_distributed_is_one_line(monkeypatch, capsys):
    """A torch built without torch.distributed (USE_DISTRIBUTED=0, the default of a macOS source build) keeps
    only ``is_available`` in that module: DDP asked for there is one line before any work, not an
    AttributeError from ``dist.is_initialized``."""
    import torch.distributed as dist

    from lstmnb import cli
    from lstmnb.errors import DeviceError
    from lstmnb.training import TrainConfig, parallel

    monkeypatch.setattr(dist, "is_available", lambda: False)
    for name in ("is_initialized", "init_process_group", "get_rank"):
        monkeypatch.delattr(dist, name)
    code = cli.main(["train", "--strategy", "ddp", "--nproc", "2", "--device", "cpu", "--epochs", "1",
                     "--no-record"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "needs torch.distributed" in err, err
    with pytest.raises(DeviceError, match="needs torch.distributed"):
        parallel.train_parallel(None, TrainConfig(strategy="ddp", nproc=2, device="cpu"))
