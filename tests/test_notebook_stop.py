"""A notebook series stopped by SIGTERM (what SLURM sends at a job's time limit, and `scancel`): the real
`lstmnb notebooks run` in its own process, a real kernel, a real signal. What ran is kept under its final
name, the index says where it stopped, and the command ends with one line saying so, exit status 143, its kernel stopped (the kernel, shut
down mid-cell, may print a traceback of its own before that line)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import waiting_notebook

ROOT = Path(__file__).resolve().parents[1]


def _first_output(path: Path) -> str:
    """The printing cell's outputs as saved so far (its source says "first cell done" too); "" while the
    file is being written."""
    try:
        return str(nbformat.read(path, as_version=4).cells[2].outputs)
    except (OSError, ValueError, IndexError, AttributeError):
        return ""


def _processes_of(marker: str) -> list[str]:
    """The command lines of the running processes whose environment holds ``marker`` (a test's own path)."""
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if marker in p.environ().get("LSTMNB_RESULTS", "") and p.status() != psutil.STATUS_ZOMBIE:
                found.append(" ".join(p.cmdline()))
        except psutil.Error:
            continue
    return found


def _waiting_series(folder: Path) -> None:
    """01_quick, which ends at once, then 02_wait, which sleeps longer than the test waits; their profile."""
    folder.mkdir()
    waiting_notebook(folder / "01_quick.ipynb", 0)
    waiting_notebook(folder / "02_wait.ipynb", 600)
    (folder / "wait.yaml").write_text("label: wait\nkernel: python3\ncell_timeout_s: 900\nparameters: {}\n")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM cannot be sent to a child process on Windows")
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_sigterm_keeps_the_running_notebook_and_prints_the_summary(tmp_path, how):
    """``sigterm``: SLURM's signal, to lstmnb alone; ``ctrl-c``: a terminal's, SIGINT to the whole process group,
    so the kernel's cell is interrupted too and its error may arrive as lstmnb stops."""
    _waiting_series(tmp_path / "nbs")
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "LSTMNB_RESULTS": str(tmp_path / "results")}
    child = subprocess.Popen(
        [sys.executable, "-m", "lstmnb", "notebooks", "run", "--profile", str(tmp_path / "nbs" / "wait.yaml"), "--notebooks", str(tmp_path / "nbs"),
         "--runs-dir", str(runs), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        partial = None
        while time.monotonic() < deadline and child.poll() is None:  # the first cell's output, saved
            found = list(runs.glob("wait/*/.02_wait.running.ipynb"))
            if found and "first cell done" in _first_output(found[0]):
                partial = found[0]
                break
            time.sleep(0.5)
        assert partial is not None, f"the notebook never got past its first cell: {child.poll()=}"
        time.sleep(1)  # into the sleeping cell
        if how == "sigterm":
            child.send_signal(signal.SIGTERM)
        else:
            os.killpg(child.pid, signal.SIGINT)
        child.wait(timeout=60)  # its output is a few lines: the pipes hold them until read
        left = _processes_of(env["LSTMNB_RESULTS"])  # the kernel and what it started: stopped before the command ends
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == (143 if how == "sigterm" else 130), (out, err)
    assert not left, f"still running after the command ended: {left}"
    last = err.strip().splitlines()[-1]
    said = "stopped by SIGTERM" if how == "sigterm" else "interrupted"
    assert last.startswith(f"lstmnb notebooks run: {said}") and "kept" in last, err
    assert "never retrieved" not in err, err  # the aborted cell's task, settled before the line
    run_dir = partial.parent
    assert not partial.exists()  # moved onto its name, not left hidden
    kept = nbformat.read(run_dir / "02_wait.ipynb", as_version=4)
    assert "first cell done" in str(kept.cells[2].outputs)
    # the summary, printed before the one line: the signal is ours in the second notebook too (the first one's
    # kernel client left no handler of its own); no site is built with seconds left
    assert re.search(r"^01_quick\s+ok\b", out, re.M) and re.search(r"^02_wait\s+interrupted\b", out, re.M), out
    assert "report      no site: the series was interrupted" in out and not (run_dir / "site").exists()


def test_after_an_interruption_a_task_the_dead_kernel_ended_is_not_reported_at_exit(caplog):
    """What the aborted cell leaves: a task already ended by DeadKernelError or by the interrupted cell's
    CellExecutionError (never reported to anyone) and a task still waiting. Settled, the first says nothing when collected and the second is cancelled; another
    task's unseen error is still reported."""
    import asyncio
    import gc
    import logging

    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    from lstmnb.notebooks.kernel_loop import settle_kernel_client

    async def dies():
        raise DeadKernelError("Kernel died")

    async def interrupted():  # the cell's own error: the kernel was interrupted too (Ctrl-C to the process group)
        raise CellExecutionError("cell", "KeyboardInterrupt", "")

    async def fails():
        raise ValueError("a real bug")

    loop = ensure_event_loop()
    dead, cell, bug = loop.create_task(dies()), loop.create_task(interrupted()), loop.create_task(fails())
    waiting = loop.create_task(asyncio.sleep(3600))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert dead.done() and cell.done() and bug.done() and not waiting.done()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            settle_kernel_client()
            assert waiting.cancelled()
            del dead, cell, bug, waiting
            gc.collect()
        reported = [f"{r.getMessage()} {r.exc_info}" for r in caplog.records]
        assert not any("DeadKernelError" in text or "CellExecutionError" in text for text in reported), reported
        assert any("never retrieved" in text and "ValueError" in text for text in reported), reported
    finally:
        loop.set_exception_handler(None)


def test_stopping_kernels_takes_what_they_started_and_leaves_other_children():
    """After an interruption the runner stops the kernels it started, with their own children (a DDP rank, a
    DataLoader worker), and nothing else it started."""
    import psutil

    from lstmnb.notebooks.kernel_loop import stop_kernels

    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    kernel = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"subprocess.Popen({sleeper!r}); time.sleep(120)", "ipykernel_launcher"])
    other = subprocess.Popen(sleeper)
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(kernel.pid).children() and time.monotonic() < deadline:
            time.sleep(0.1)
        (grandchild,) = psutil.Process(kernel.pid).children()
        stop_kernels(timeout_s=5)
        assert kernel.wait(timeout=10) is not None and not grandchild.is_running()
        assert other.poll() is None  # not a kernel: left alone
    finally:
        for p in (kernel, other):
            if p.poll() is None:
                p.kill()
                p.wait()
