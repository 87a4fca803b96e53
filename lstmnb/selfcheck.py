"""`lstmnb doctor --deep`: short real jobs on every device present, each ``ok``, ``failed`` (one line why) or
``skipped`` (why), with its time, within a budget that grows with the GPUs (``deep_budget``: about two minutes on
one). The first command to run on a new node; ``doctor`` (the quick, import-level report) stays separate.

CPU: training and a 2-rank DDP run over gloo. The first CUDA GPU: eager steps, the same steps captured as a CUDA graph
(losses equal to the eager ones), bfloat16 where native, the CUDA memory cap (a batch past it recorded as ``oom``);
each other GPU: a smoke job (a few eager steps); NCCL with 2 ranks where there are 2 GPUs; each Numba CUDA engine
against NumPy's gradient. Any failure (a sticky CUDA error at the closing synchronisation too) is a ``failed`` row.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
BUDGET_S = 110.0  # the whole deep check on a node with one GPU; jobs that would start after it are skipped, and say so
SMOKE_S = 10.0  # added to the budget per further GPU: its smoke job (model to the GPU, SMOKE_STEPS steps) plus margin
SMOKE_STEPS = 2
CPU_NEEDS = ("train", "ddp gloo x2")
CUDA_NEEDS = ("eager steps", "captured steps", "memory cap", "smoke steps", "nccl x2")
GRAPH_STEPS = 6  # 3 warm-up steps, the captured one, 2 replays
LOSS_RTOL = 1e-3  # capturable vs fused Adam and cuDNN's reductions differ in the last bits, not more


@dataclass(frozen=True)
class Job:
    """One row: where it ran, what, how it ended, its seconds and why. ``unproven``: a skip that leaves the
    check undone here (its device is missing, the time budget ran out), as opposed to one that does not
    apply (one GPU for a 2-rank NCCL job, no native bf16)."""

    device: str
    name: str
    status: str
    seconds: float | None
    detail: str
    unproven: bool = False


class Skip(Exception):
    """A job that cannot run here; ``unproven`` as in ``Job``."""

    def __init__(self, reason: str, unproven: bool = False):
        super().__init__(reason)
        self.unproven = unproven


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}" if text else type(exc).__name__


def tiny_windows():
    """40 days of two synthetic diurnal series, windowed as ``tiny_config`` says (no data store needed)."""
    import pandas as pd

    from .windows import make_windows

    t = pd.date_range("2020-01-01", periods=24 * 40, freq="h")
    h = np.arange(len(t))
    rng = np.random.default_rng(0)
    v = np.stack([285 + 6 * np.sin(2 * np.pi * h / 24 + p) + rng.normal(0, 0.3, len(t)) for p in (0.0, 1.0)], 1)
    return make_windows(v, t, tiny_config().window_config())


def tiny_config(**kw: Any):
    from .training import TrainConfig

    base = dict(window=12, hidden=16, epochs=1, batch_size=64, progress=False, seed=0, patience=None,
                checkpoint=None, experiment="doctor-deep")
    return TrainConfig(**{**base, **kw})


def cpu_train(windows) -> str:
    from .training import train

    rec = train(windows, tiny_config(device="cpu")).record
    if not math.isfinite(rec["metrics"]["test_rmse_k"]):
        raise RuntimeError(f"test RMSE is {rec['metrics']['test_rmse_k']}")
    return f"1 epoch, train loss {rec['epochs'][0]['train_loss']:.4f}, test RMSE {rec['metrics']['test_rmse_k']:.2f} K"


def ddp(windows, device: str) -> str:
    from .training import parallel

    rec = parallel.launch_train(windows, tiny_config(strategy="ddp", device=device), 2, deadline_s=90).record
    p = rec["parallel"]
    if p["world_size"] != 2 or not math.isfinite(rec["metrics"]["test_rmse_k"]):
        raise RuntimeError(f"world_size {p['world_size']}, test RMSE {rec['metrics']['test_rmse_k']}")
    return f"2 ranks over {p['backend']}, train loss {rec['epochs'][0]['train_loss']:.4f}"


def step_losses(windows, device, graph: bool, steps: int = GRAPH_STEPS) -> tuple[list[float], Any]:
    """``steps`` steps on the same fixed batches, eager or through the Trainer's CUDA graph."""
    import torch

    from .training import Trainer
    from .training.step import IndexBatches

    tr = Trainer(windows, tiny_config(device=str(device), cuda_graph=graph), device)
    x, y = tr.feed.train_tensors()
    size = tr.cfg.batch_size
    batches = [torch.arange(k * size, (k + 1) * size, device=device) for k in range(steps)]
    if len(batches[-1]) < size or batches[-1][-1] >= x.shape[0]:
        raise RuntimeError(f"the check's windows hold fewer than {steps} batches of {size}")
    if not graph:
        return [float(tr.step(x[i], y[i])) for i in batches], tr
    if tr.graph is None:
        raise RuntimeError(f"the graph was not planned: {tr.graph_reason}")
    return [float(tr.graph.epoch(IndexBatches(x, y, [i]))[0]) / size for i in batches], tr


def eager_steps(windows, device, steps: int = GRAPH_STEPS) -> str:
    """Eager steps; on a GPU past the first, ``SMOKE_STEPS`` of them (``smoke steps``: its kernels load and run)."""
    losses, _ = step_losses(windows, device, graph=False, steps=steps)
    if not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"non-finite losses {losses}")
    return f"{len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}"


def captured_steps(windows, device) -> str:
    eager, _ = step_losses(windows, device, graph=False)
    graph, tr = step_losses(windows, device, graph=True)
    if tr.graph.replays != GRAPH_STEPS - 3:
        raise RuntimeError(f"{tr.graph.replays} steps replayed from the graph, expected {GRAPH_STEPS - 3}")
    worst = max(abs(g - e) / max(abs(e), 1e-12) for g, e in zip(graph, eager))
    if worst > LOSS_RTOL:
        raise RuntimeError(f"graph losses {['%.6f' % v for v in graph]} differ from eager "
                           f"{['%.6f' % v for v in eager]} (worst {worst:.1e} relative)")
    return f"{tr.graph.replays} of {GRAPH_STEPS} steps replayed; losses equal eager's to {worst:.1e} (relative)"


def bf16(windows, device) -> str:
    import torch

    from .machine.cuda import bf16_native
    from .training import Trainer

    cap = torch.cuda.get_device_capability(device)
    if not bf16_native(cap):
        raise Skip(f"SM {cap[0]}.{cap[1]} has no native bfloat16 (SM 8.0 and newer); amp='auto' uses fp16 here")
    tr = Trainer(windows, tiny_config(device=str(device), amp="bf16"), device)
    seen: list[torch.dtype] = []
    tr.core.rnn.register_forward_hook(lambda m, i, out: seen.append(out[0].dtype))
    x, y = tr.feed.train_tensors()
    loss = float(tr.step(x[:64], y[:64]))
    if not math.isfinite(loss) or seen != [torch.float32]:
        raise RuntimeError(f"loss {loss}, recurrent layer output {seen} (float32 expected under bf16)")
    return f"a bf16 autocast step, loss {loss:.4f}; the LSTM ran in float32 (cuDNN's RNN autocast would cast to fp16)"


def memory_cap(windows, device) -> str:
    from .experiments import SweepConfig, batch_sweep

    recs = batch_sweep(windows, tiny_config(device=str(device), hidden=256),
                       SweepConfig(start=64, factor=8, memory_cap_mb=4))
    last = recs[-1]
    if last["status"] != "oom":
        raise RuntimeError(f"the sweep ended {last['status']} at batch {last['sweep']['batch_size']} under a 4 MB cap")
    return f"batch {last['sweep']['batch_size']} past a 4 MB cap recorded as oom"


def numba_engine(version: str) -> str:
    """A Numba CUDA engine's loss and gradient against NumPy's (float64, one batch)."""
    from .scratch import LSTMShape, ScratchConfig, init_params, loss_and_grad_numpy
    from .scratch.cuda_check import numba_cuda_reason, simulator_enabled
    from .scratch.fit import make_engine

    reason = numba_cuda_reason()
    if reason is not None:
        raise Skip(reason)
    shape = LSTMShape(n_features=1, hidden=16, n_outputs=1)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(96, 12, 1)), rng.normal(size=(96, 1))
    theta = init_params(shape, seed=1)
    engine = make_engine(version, shape, X, y, theta, ScratchConfig(hidden=16, batch_size=64))
    idx = rng.permutation(96)[:64]
    loss, grad = engine.grad_fn(theta, idx)
    ref_loss, ref_grad = loss_and_grad_numpy(theta, X[idx], y[idx], shape)
    err = float(np.abs(grad - ref_grad).max() / np.abs(ref_grad).max())
    if not (abs(loss - ref_loss) <= 1e-9 * abs(ref_loss) and err <= 1e-9):
        raise RuntimeError(f"loss {loss} vs NumPy {ref_loss}, gradient error {err:.1e}")
    where = " in Numba's CUDA simulator" if simulator_enabled() else ""
    return f"loss and gradient equal NumPy's{where} (float64, relative error {err:.0e})"


@dataclass(frozen=True)
class Planned:
    """A job to run (``run(windows)``), or a row skipped before running (``skip`` says why)."""

    device: str
    name: str
    run: Callable[[Any], str] | None = None
    skip: str | None = None
    unproven: bool = False


FULL_GPU_JOBS = (("eager steps", eager_steps), ("captured steps", captured_steps), ("bf16", bf16),
                 ("memory cap", memory_cap))


def deep_budget(gpus: int) -> float:
    """Seconds for ``gpus`` visible GPUs: ``BUDGET_S`` for the CPU jobs, the full checks on the first GPU, NCCL and
    the Numba engines, plus ``SMOKE_S`` per further GPU (its smoke job), so an 8-GPU node does not spend the budget
    before its last GPUs and NCCL. Pure."""
    return BUDGET_S + SMOKE_S * max(0, gpus - 1)


def gpu_rows(count: int) -> list[Planned]:
    """The GPU rows for ``count`` visible GPUs: the full checks on cuda:0, a smoke job on each other one,
    NCCL with 2 ranks where there are 2. Pure (the jobs run later)."""
    import torch

    rows: list[Planned] = []
    for i in range(count):
        dev = torch.device("cuda", i)
        jobs = FULL_GPU_JOBS if i == 0 else (("smoke steps", lambda w, d: eager_steps(w, d, SMOKE_STEPS)),)
        rows += [Planned(str(dev), name, lambda w, f=fn, d=dev: f(w, d)) for name, fn in jobs]
    rows.append(Planned("cuda", "nccl x2", lambda w: ddp(w, "cuda")) if count >= 2 else
                Planned("cuda", "nccl x2", skip="1 CUDA GPU visible; NCCL with 2 ranks needs 2"))
    return rows


def plan() -> list[Planned]:
    """This machine's jobs: CPU, the GPUs' (or one skipped row per job without a GPU), Numba engines."""
    import torch

    from .machine.device import no_cuda_reason

    rows = [Planned("cpu", "train", cpu_train), Planned("cpu", "ddp gloo x2", lambda w: ddp(w, "cpu"))]
    if not torch.cuda.is_available():
        rows += [Planned("cuda", name, skip=no_cuda_reason(), unproven=True)
                 for name in [n for n, _ in FULL_GPU_JOBS] + ["nccl x2"]]
    else:
        rows += gpu_rows(torch.cuda.device_count())
    rows += [Planned("numba.cuda", v, lambda w, v=v: numba_engine(v)) for v in ("numba-cuda", "numba-cuda-block")]
    return rows


def _settle(device: str) -> None:
    """Wait for a CUDA job's queued work, where an asynchronous error (a sticky one included) surfaces."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():  # cuda:N: that GPU; "cuda" (a job over all of them): the current one
            torch.cuda.synchronize(torch.device(device) if ":" in device else None)


def run_job(p: Planned, windows: Any, over_budget: str | None = None) -> Job:
    """One planned job as a row: ``ok``, ``skipped`` (``Skip``, a skip planned, or ``over_budget``: why it did not
    start) or ``failed`` with the one-line reason (any exception, the closing synchronisation's included)."""
    if p.run is None:
        return Job(p.device, p.name, SKIPPED, None, p.skip or "", p.unproven)
    if over_budget is not None:
        return Job(p.device, p.name, SKIPPED, None, over_budget, True)
    t0 = time.perf_counter()
    try:
        detail, status, unproven = p.run(windows), OK, False
        _settle(p.device)
    except Skip as exc:
        detail, status, unproven = str(exc), SKIPPED, exc.unproven
    except Exception as exc:  # noqa: BLE001 - every failure is a row, never a traceback
        detail, status, unproven = one_line(exc), FAILED, False
    if status != OK:
        try:  # work a failed job left queued; a sticky error here is that job's, already a failed row
            _settle(p.device)
        except Exception as exc:  # noqa: BLE001
            if status == SKIPPED:
                detail, status, unproven = one_line(exc), FAILED, False
    return Job(p.device, p.name, status, time.perf_counter() - t0, detail, unproven)


def deep_check(budget_s: float | None = None, on_job: Callable[[Job], None] | None = None) -> list[Job]:
    """Every job of ``plan()``, in order, as a ``Job`` row, within ``budget_s`` s (default: ``deep_budget``)."""
    import torch

    start = time.perf_counter()
    if budget_s is None:
        budget_s = deep_budget(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    windows = tiny_windows()
    jobs = []
    for p in plan():
        spent = time.perf_counter() - start > budget_s
        job = run_job(p, windows, f"the deep check's {budget_s:g} s budget was spent" if spent else None)
        jobs.append(job)
        if on_job is not None:
            on_job(job)
    return jobs


def needed(job: Job, profile_device: str) -> bool:
    """Whether a profile whose notebooks run on ``profile_device`` ('cpu' or 'cuda') needs this job."""
    if job.device == "cpu":
        return job.name in CPU_NEEDS
    return profile_device.startswith("cuda") and job.device.startswith("cuda") and job.name in CUDA_NEEDS


def deep_ready(jobs: list[Job], profile_device: str) -> tuple[bool, list[Job]]:
    """(ready, the jobs that block it): a needed job that failed, or was skipped leaving it unproven (its device
    missing here, or the budget spent). Pure."""
    blocking = [j for j in jobs if needed(j, profile_device)
                and (j.status == FAILED or (j.status == SKIPPED and j.unproven))]
    return not blocking, blocking
