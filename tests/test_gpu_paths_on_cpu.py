"""GPU paths of issue 48 shown on a CPU, with torch's own code: the CUDA graph's eager steps and torch's
capturable warning, DataParallel's replicas in their worker threads (autocast, cuDNN's weight flattening).
The GPU itself is tested by the `gpu`-marked tests (tests/test_gpu.py)."""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from torch import nn

from lstmnb.training.graphs import GraphStep
from lstmnb.training.guards import DivergenceGuard
from lstmnb.training.step import StepParts, make_loss


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
        loss=make_loss(False),
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
