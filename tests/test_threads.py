"""The CPU thread policy under load: a pure function of cores, load and what was asked, and its choice
in every CPU run's record."""

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.device import cpu_threads, thread_policy
from lstmnb.training import TrainConfig, train
from lstmnb.windows import make_windows


@pytest.mark.parametrize("cores, load, default, own, used, policy", [
    (2, 0.1, 2, 0.1, 2, "default"),            # idle machine: all cores
    (2, 1.2, 2, 0.15, 1, "reduced for load"),  # one other busy process on 2 cores: one thread
    (2, 6.8, 2, 0.2, 1, "reduced for load"),   # heavily loaded: never below one
    (16, 4.3, 16, 0.3, 12, "reduced for load"),  # 4 cores' worth busy elsewhere: the 12 left
    (16, 0.4, 8, 0.0, 8, "default"),           # torch's default below the cores is kept when idle
    (16, 9.0, 8, 1.0, 8, "default"),           # 8 busy of 16 leaves torch's 8
    (4, 2.0, 4, 2.0, 4, "default"),            # the load is this process's own (a previous run)
    (2, None, 2, 0.0, 2, "default"),           # no load average on this system
])
def test_thread_policy_takes_the_cores_other_processes_leave(cores, load, default, own, used, policy):
    choice = thread_policy(cores, load, default, own_load=own)
    assert (choice["used"], choice["policy"]) == (used, policy)
    assert choice["cores"] == cores and choice["reason"]


def test_explicit_threads_and_omp_num_threads_win():
    assert thread_policy(2, 7.0, 2, requested=2)["used"] == 2
    assert thread_policy(2, 7.0, 2, requested=2)["policy"] == "explicit"
    env = thread_policy(2, 7.0, 2, env_threads=2)
    assert (env["used"], env["policy"]) == (2, "environment")


def test_cpu_threads_reads_this_machine():
    choice = cpu_threads()
    assert 1 <= choice["used"] <= torch.get_num_threads() and choice["load"] is not None
    assert 0 <= choice["own_load"]


def _windows():
    t = pd.date_range("2020-03-01", periods=24 * 20, freq="h")
    v = 285 + np.sin(2 * np.pi * t.hour.to_numpy() / 24)[:, None] + np.random.default_rng(0).normal(0, .3, (len(t), 1))
    return make_windows(v, t, TrainConfig(window=12).window_config())


def test_a_cpu_run_records_its_threads_and_leaves_torch_as_it_was():
    w, before = _windows(), torch.get_num_threads()
    cfg = dict(window=12, hidden=4, epochs=1, batch_size=64, progress=False, device="cpu")
    chosen = train(w, TrainConfig(**cfg)).record["threads"]
    assert chosen["policy"] in ("default", "reduced for load") and 1 <= chosen["used"] <= before
    assert chosen["load"] is not None and chosen["cores"] >= 1
    explicit = train(w, TrainConfig(**cfg, threads=1)).record
    assert explicit["threads"]["used"] == 1 and explicit["threads"]["policy"] == "explicit"
    assert explicit["device"]["torch_threads"] == 1  # the run itself ran with the chosen count
    assert torch.get_num_threads() == before
