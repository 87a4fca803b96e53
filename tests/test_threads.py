"""The CPU thread policy under load: a pure function of cores, the cores other processes keep busy and what
was asked; its choice beside real busy processes and just after they end; and its choice in every CPU run's
record."""

import multiprocessing as mp
import os
import time

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.machine.device import cpu_threads, thread_policy
from lstmnb.training import TrainConfig, train
from lstmnb.windows import make_windows


@pytest.mark.parametrize("cores, busy, default, used, policy", [
    (2, 0.1, 2, 2, "default"),             # idle machine: all cores
    (2, 1.0, 2, 1, "reduced for load"),    # one other busy process on 2 cores: one thread
    (2, 2.0, 2, 1, "reduced for load"),    # both cores busy: never below one
    (16, 4.3, 16, 12, "reduced for load"),  # 4 cores' worth busy elsewhere: the 12 left
    (16, 0.4, 8, 8, "default"),            # torch's default below the cores is kept when idle
    (16, 8.0, 8, 8, "default"),            # 8 busy of 16 leaves torch's 8
    (2, 0.49, 2, 2, "default"),            # rounded: half a core busy still leaves two
    (2, None, 2, 2, "default"),            # no CPU time counters on this system
])
def test_thread_policy_takes_the_cores_other_processes_leave(cores, busy, default, used, policy):
    choice = thread_policy(cores, busy, default, window_s=0.2)
    assert (choice["used"], choice["policy"]) == (used, policy)
    assert choice["cores"] == cores and choice["reason"] and choice["busy_cores"] == busy


def test_explicit_threads_and_omp_num_threads_win():
    assert thread_policy(2, 2.0, 2, requested=2)["used"] == 2
    assert thread_policy(2, 2.0, 2, requested=2)["policy"] == "explicit"
    env = thread_policy(2, 2.0, 2, env_threads=2)
    assert (env["used"], env["policy"]) == (2, "environment")


def test_cpu_threads_reads_this_machine():
    choice = cpu_threads()
    assert 1 <= choice["used"] <= torch.get_num_threads() and choice["busy_cores"] is not None
    assert 0 <= choice["own_busy"] and 0.15 < choice["window_s"] < 5 and choice["load_1min"] is not None
    assert cpu_threads(1)["window_s"] is None  # an explicit count is not measured for


def _windows():
    t = pd.date_range("2020-03-01", periods=24 * 20, freq="h")
    v = 285 + np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + np.random.default_rng(0).normal(0, .3, (len(t), 1))
    return make_windows(v, t, TrainConfig(window=12).window_config())


def test_a_cpu_run_records_its_threads_and_leaves_torch_as_it_was():
    w, before = _windows(), torch.get_num_threads()
    cfg = dict(window=12, hidden=4, epochs=1, batch_size=64, progress=False, device="cpu")
    chosen = train(w, TrainConfig(**cfg)).record["threads"]
    assert chosen["policy"] in ("default", "reduced for load") and 1 <= chosen["used"] <= before
    assert chosen["busy_cores"] is not None and chosen["cores"] >= 1
    explicit = train(w, TrainConfig(**cfg, threads=1)).record
    assert explicit["threads"]["used"] == 1 and explicit["threads"]["policy"] == "explicit"
    assert explicit["device"]["torch_threads"] == 1  # the run itself ran with the chosen count
    assert torch.get_num_threads() == before


# --- the policy sees the present: real busy processes, measured over the window ------------------------------

def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _spinners(n: int, seconds: float, cpus: list[int]) -> list:
    """``n`` busy child processes, each pinned to one of ``cpus`` (a real load, not a figure)."""
    import psutil

    procs = [mp.get_context("fork").Process(target=_spin, args=(seconds,), daemon=True) for _ in range(n)]
    for i, proc in enumerate(procs):
        proc.start()
        os.sched_setaffinity(proc.pid, {cpus[i % len(cpus)]})
    deadline = time.monotonic() + 20
    for proc in procs:  # running: each has spun for a tenth of a second of CPU time
        while psutil.Process(proc.pid).cpu_times().user < 0.1 and time.monotonic() < deadline:
            time.sleep(0.02)
    return procs


def _stop(procs) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins busy child processes to cores: Linux only")
def test_beside_busy_processes_the_run_backs_off():
    """Every core but one kept busy by a spinning child: whatever else runs here, those cores are busy for
    the whole window, so the policy leaves them and takes one thread."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or torch.get_num_threads() < 2:
        pytest.skip("one core (or one torch thread): there is nothing to back off from")
    procs = _spinners(len(cpus) - 1, 30, cpus[1:])
    try:
        choice = cpu_threads()
    finally:
        _stop(procs)
    assert choice["busy_cores"] >= len(cpus) - 1 - 0.15
    assert (choice["used"], choice["policy"]) == (1, "reduced for load")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins busy child processes to cores: Linux only")
def test_after_a_job_ends_the_run_takes_the_cores_it_left():
    """A job that kept every core busy has just ended: the policy's choice is one the machine gets without
    it (other processes' load measured just before the job and again after the choice, give or take 0.3 of a
    core for their own changes), not the one beside it. On a quiet machine that is every core; the 1-minute load average
    still counts the job then, which is what the policy used to read."""
    from lstmnb.machine.device import busy_cores

    cpus = sorted(os.sched_getaffinity(0))
    cores, default = len(cpus), torch.get_num_threads()
    before = [busy_cores()["others"] for _ in range(3)]
    procs = _spinners(cores, 30, cpus)
    during = cpu_threads()
    _stop(procs)
    after = cpu_threads()
    later = [busy_cores()["others"] for _ in range(2)]  # the machine without the job, once more: others' load drifts
    spread = max(before + later) - min(before + later)
    if spread > 1.0:  # e.g. many test workers on many cores: the choice cannot be told from their own changes
        pytest.skip(f"other processes' load moved by {spread:.1f} cores around the job: not a quiet enough machine")
    low, high = max(0.0, min(before + later) - 0.3), max(before + later) + 0.3
    without_job = {thread_policy(cores, b, default, window_s=0.2)["used"] for b in (low, (low + high) / 2, high)}
    assert during["busy_cores"] >= cores - 0.15 and during["used"] == 1  # beside it: backed off
    # after it: as if it had not run. One-sided: what the ended job left behind would read as more load and
    # fewer threads; less load than measured around it is other processes' own change (a test worker beside
    # this one pausing), which the policy rightly follows
    assert after["used"] >= min(without_job), (before, after)
    assert after["busy_cores"] <= high, (before, after)
