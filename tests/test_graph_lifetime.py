"""A finished run frees what it held without Python's cyclic collector (issue 30, defect 1), and a late
CUDA graph capture stays out of the steady timing (defect 6)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from lstmnb.selfcheck import tiny_config, tiny_windows
from lstmnb.training import Trainer
from lstmnb.training.evaluate import summarize_timing
from lstmnb.training.step import STEPS_TO_CAPTURE, GraphStep, capture_epoch


@pytest.fixture(scope="module")
def windows():
    return tiny_windows()


def test_finished_trainer_with_its_graph_step_is_freed_without_the_cyclic_collector(windows):
    tr = Trainer(windows, tiny_config(device="cpu", epochs=2), torch.device("cpu"))
    x, y = tr.feed.train_tensors()
    tr.fit("t", show=False)
    # a CPU run plans no graph; give the finished run the GraphStep a CUDA run keeps, built as __init__ builds it
    tr.graph = GraphStep(tr.step_parts(), tr.device)
    assert tr.finish(None)["status"] == "ok"
    assert tr.graph.parts.opt is tr.opt
    trainer_ref, model_ref, opt_ref = weakref.ref(tr), weakref.ref(tr.core), weakref.ref(tr.opt)
    was = gc.isenabled()
    gc.disable()
    try:
        del tr, x, y
        assert trainer_ref() is None and model_ref() is None and opt_ref() is None
    finally:
        if was:
            gc.enable()


def test_graph_step_eager_path_trains_through_the_parts_alone(windows):
    # the side=False eager path of GraphStep runs the optimiser step from StepParts on any device
    tr = Trainer(windows, tiny_config(device="cpu"), torch.device("cpu"))
    step = GraphStep(tr.step_parts(), tr.device)
    x, y = tr.feed.train_tensors()
    before = [p.detach().clone() for p in tr.core.parameters()]
    loss = step._eager(x, y, torch.arange(10), side=False)
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, tr.core.parameters()))
    assert not hasattr(step, "tr")


def test_graph_module_does_not_import_the_trainer():
    import ast
    import inspect

    import lstmnb.training.step as graphs

    imported = {n.module for n in ast.walk(ast.parse(inspect.getsource(graphs))) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.split(".")[-1] == "trainer" for m in imported)


@pytest.mark.parametrize("per_epoch, expected", [(100, 1), (STEPS_TO_CAPTURE, 1), (3, 2), (2, 2), (1, STEPS_TO_CAPTURE)])
def test_capture_epoch_follows_the_full_batches_per_epoch(per_epoch, expected):
    assert capture_epoch(True, per_epoch) == expected
    assert capture_epoch(False, per_epoch) == 1


def test_steady_median_leaves_out_epochs_up_to_a_late_capture():
    # 2 full batches an epoch: epoch 1 eager warm-up, epoch 2 warm-up + capture + first replay, then replays
    per_epoch = 2
    secs = [5.0, 9.0, 1.0, 1.2, 1.1]
    history = [{"train_s": s, "eval_s": 0.0, "cumulative_s": sum(secs[: i + 1]), "samples_per_s": 100 / s}
               for i, s in enumerate(secs)]
    timing = summarize_timing(history, capture_epoch(True, per_epoch))
    assert timing["warmup_epochs"] == 2 and timing["steady_epochs"] == 3
    assert timing["epoch_s_median"] == pytest.approx(1.1)
    assert timing["warmup_epoch_s"] == 5.0 and timing["warmup_s"] == pytest.approx(14.0)  # capture paid in epoch 2
    assert summarize_timing(history)["epoch_s_median"] == pytest.approx(1.15)  # the old mix with epoch 2


def test_trainer_reports_the_graph_plans_warm_up_epochs(windows):
    tr = Trainer(windows, tiny_config(device="cpu"), torch.device("cpu"))
    assert tr.warmup_epochs() == 1  # no graph on CPU
    tr.use_graph = True
    tr.cfg = tiny_config(device="cpu", batch_size=tr.n_train // 2)
    assert tr.warmup_epochs() == capture_epoch(True, 2) == 2


def _allocated(dev) -> int:
    """Bytes held by live tensors on ``dev``, without cuBLAS's per-stream workspaces (kept by torch on
    purpose; PyTorch's own CUDA leak check clears them before it reads the same figure)."""
    torch.cuda.synchronize(dev)
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    return torch.cuda.memory_allocated(dev)


@pytest.mark.gpu
def test_graph_run_leaves_no_cuda_memory_behind(windows):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from lstmnb.training import train

    dev = torch.device("cuda", 0)
    cfg = tiny_config(device="cuda:0", epochs=2, cuda_graph=True)
    train(windows, cfg)  # CUDA context, kernels and lazily made state, before the baseline
    gc.collect()
    before = _allocated(dev)
    was = gc.isenabled()
    gc.disable()
    try:
        result = train(windows, cfg)
        assert result.record["cuda_graph"]["used"], result.record["cuda_graph"]
        during = torch.cuda.max_memory_allocated(dev)
        del result
        left = _allocated(dev) - before
    finally:
        if was:
            gc.enable()
    assert during > before
    assert left <= 64 * 1024, f"{left} bytes still allocated after a finished graph run (collector off)"


FIRST_RUN = """
import gc, weakref
from lstmnb.selfcheck import tiny_config, tiny_windows
from lstmnb.training import train
w = tiny_windows()
gc.disable()
result = train(w, tiny_config(device="cpu", epochs=1))
ref = weakref.ref(result.model)
del result
print("freed" if ref() is None else "kept")
"""


@pytest.mark.slow  # a fresh interpreter: torch's lazy imports happen inside its first run
def test_the_first_run_of_a_process_is_freed_without_the_cyclic_collector():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FIRST_RUN], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "freed"
