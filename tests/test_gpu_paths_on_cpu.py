"""GPU paths of issue 48 shown on a CPU, with torch's own code: the CUDA graph's eager steps and torch's
capturable warning, DataParallel's replicas in their worker threads (autocast, cuDNN's weight flattening).
The GPU itself is tested by the `gpu`-marked tests (tests/test_gpu.py)."""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lstmnb.models import Forecaster, ModelConfig
from lstmnb.training.guards import DivergenceGuard
from lstmnb.training.parallel import ReplicaDataParallel
from lstmnb.training.step import GraphStep, StepParts


@pytest.fixture
def cuda_accelerator(monkeypatch):
    """``torch.accelerator`` as on a CUDA machine outside any capture, as torch's optimizers ask it."""
    not_capturing = types.SimpleNamespace(is_capturing=lambda: False)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda device=None: not_capturing)


def test_a_graph_runs_its_eager_steps_without_torchs_capturable_warning(cuda_accelerator):
    """torch warns once per optimizer whose capturable step runs uncaptured and advises capturable=False,
    wrong for a graph run, whose warm-up and final smaller batch run so by design. ``GraphStep`` silences that
    one warning where it arises (the smaller-batch step here: it needs no CUDA stream). torch 2.13's
    constructor marks the warning as given (``Optimizer.__init__``), so it comes from an optimizer that went
    through pickle or deepcopy (``__getstate__`` leaves the mark out): the test removes the mark."""
    model = nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), capturable=True)
    del opt._warned_capturable_if_run_uncaptured
    parts = StepParts(
        model=model,
        core=model,
        opt=opt,
        loss=F.mse_loss,
        guard=DivergenceGuard(torch.device("cpu")),
        adtype=None,
        grad_clip=None,
        batch_size=4,
    )
    x, y = torch.randn(5, 3), torch.randn(5, 1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            GraphStep(parts, torch.device("cpu"))._eager(x, y, torch.arange(3), side=False)
        except (AssertionError, RuntimeError):
            pass  # capturable Adam refuses CPU parameters, after the check that warns
    assert opt._warned_capturable_if_run_uncaptured  # torch's check ran: the warning arose here
    assert not [w for w in seen if "capturable=True" in str(w.message)]


@pytest.fixture
def two_cpu_replicas(monkeypatch):
    """DataParallel over two "devices" that are this CPU: torch's own ``parallel_apply`` (a thread per replica,
    autocast re-entered in each) runs with ``torch.accelerator`` answering as an accelerator whose device type
    is cpu, and ``replicate`` (CUDA broadcasts) made by deep copies; ``torch.is_autocast_enabled()``, which asks
    about CUDA, asks about the CPU."""
    import contextlib
    import copy
    import importlib

    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")  # the module, not the function
    enabled = torch.is_autocast_enabled
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cpu"))
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda device=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.accelerator, "device_index", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *device: enabled(*(device or ("cpu",))))
    monkeypatch.setattr(
        data_parallel, "replicate", lambda net, devices, detach=False: [copy.deepcopy(net) for _ in devices]
    )

    def make(core, adtype):
        dp = ReplicaDataParallel(core, [0, 1], adtype)
        dp.device_ids = [0, 1]  # no GPU: DataParallel kept none
        return dp

    return make


def forward_in_threads(dp, x):
    """DataParallel's forward after its scatter: each half of ``x`` through a replica in a thread of its own."""
    return dp.parallel_apply(dp.replicate(dp.module, dp.device_ids), [(x[:2],), (x[2:],)], [{}, {}])


def test_dataparallel_replicas_run_in_the_runs_autocast_dtype_in_their_own_threads(two_cpu_replicas):
    """torch's workers re-enter autocast without a dtype, and autocast's dtype is per thread (CUDA's default
    float16): a bf16 run's replicas ran in float16 without a loss scaler. Here the CPU's default, bfloat16,
    stands for CUDA's float16 and a float16 run for the bf16 one."""
    dp = two_cpu_replicas(nn.Sequential(nn.Flatten(), nn.Linear(6, 1)), torch.float16)  # oneDNN has no fp16 LSTM
    with torch.autocast("cpu", dtype=torch.float16):
        outs = forward_in_threads(dp, torch.randn(4, 6, 1))
    assert [o.dtype for o in outs] == [torch.float16, torch.float16]


def test_only_dataparallels_replicas_flatten_their_weights(two_cpu_replicas, monkeypatch):
    """Flattening copies every time: the original model, used by evaluation, the one-GPU path and any later
    use of the run's model, is never hooked; each replica is flattened once, when made."""
    core = Forecaster(ModelConfig(n_features=1, hidden=4))
    dp = two_cpu_replicas(core, None)
    flattened = []
    monkeypatch.setattr(nn.LSTM, "flatten_parameters", lambda self: flattened.append(self))
    forward_in_threads(dp, torch.randn(4, 6, 1))
    assert len(flattened) == 2 and core.rnn not in flattened
    flattened.clear()
    core(torch.randn(3, 6, 1))  # evaluation, on the run's model
    assert flattened == [] and not any(m._forward_pre_hooks for m in core.modules())
