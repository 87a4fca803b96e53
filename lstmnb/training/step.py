"""The step and what feeds it: ``Feed`` (an epoch's batches and the weighted loss), ``optimizer_step`` on a
``StepParts`` (never the Trainer: no reference cycles), Adam and its checkpointed state, the schedule, and the step
as a CUDA graph (``graph_plan``, ``GraphStep``, ``graph_record``) as PyTorch's whole-network recipe captures it:
eager warm-up on a side stream, gradients None before the capture, static inputs refilled (docs/gpu.md)."""

from __future__ import annotations

import functools
import importlib
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..machine.device import indexed, off_the_gpu

# ``cfg`` below is a ``config.TrainConfig``, not imported: config imports ``POINT_WEIGHTS`` from here

POINT_WEIGHTS = {
    "none": "every sample counts the same (plain MSE)",
    "persistence": "each point's samples weigh 1 / that point's persistence MSE on the training part (mean 1)",
}

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def weighted_mse(pred: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    """MSE weighted per sample by the last column of ``yb`` (point weights)."""
    return torch.mean(yb[:, -1:] * (pred - yb[:, :-1]) ** 2)


def sample_weights(windows, how: str) -> np.ndarray | None:
    """Per training sample its loss weight (float32, mean 1), or None for a plain MSE (``how`` = none). A plain MSE
    over many points is ruled by those whose weather changes most (a smooth ocean point's persistence error is a tenth
    of a land point's, so its samples weigh a hundredth as much, and the network may lose to persistence there unseen);
    weights of 1 / the point's persistence MSE make the loss the mean over points of (1 - MSE skill vs persistence)."""
    if how == "none":
        return None
    pid = windows.point_index["train"]
    err = windows.predictions["train"]["persistence"] - windows.to_kelvin(windows.y["train"])
    per_point = np.bincount(pid, weights=np.mean(err.astype(np.float64) ** 2, axis=1), minlength=len(windows.points))
    counts = np.bincount(pid, minlength=len(windows.points))
    mse = per_point / np.maximum(counts, 1)
    inverse = 1.0 / np.maximum(mse, 1e-6 * max(float(mse.max()), 1e-12))  # a point persistence gets exactly: capped
    weights = inverse[pid]
    return (weights / weights.mean()).astype(np.float32)


class WindowDataset(torch.utils.data.Dataset):
    """Per-sample access to windows (the DataLoader path): a view of the float32 windows built once, or with
    ``per_sample`` each sample's tensors made from float64 values, as the study's Dataset made them."""

    def __init__(self, x: np.ndarray, y: np.ndarray, per_sample: bool = False):
        self.per_sample = per_sample
        self.x, self.y = (x.astype(np.float64), y.astype(np.float64)) if per_sample else (x, y)

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.per_sample:
            return torch.tensor(self.x[i], dtype=torch.float32), torch.tensor(self.y[i], dtype=torch.float32)
        return torch.from_numpy(self.x[i]), torch.from_numpy(self.y[i])


@dataclass
class IndexBatches:
    """One epoch of the fast path as index batches into the training set on the device: a graph gathers
    its batch itself, so a replay needs one copy of indices instead of a gather and two copies."""

    x: torch.Tensor
    y: torch.Tensor
    indices: Iterable[torch.Tensor]


class Feed:
    """The training set of one run as its epochs take it: ``x`` and ``y`` (the targets, with point weights a
    last column of loss weights), shuffled by the run's generator ``gen``. It holds no Trainer."""

    def __init__(self, windows, cfg, device: torch.device, gen: torch.Generator):
        self.cfg, self.device, self.gen = cfg, device, gen
        self.x = windows.x["train"]
        weights = sample_weights(windows, cfg.point_weights)
        # the training loss: a plain function (nothing that uses it holds the Trainer or the Feed)
        self.loss: LossFn = F.mse_loss if weights is None else weighted_mse
        self.y = windows.y["train"] if weights is None else np.concatenate([windows.y["train"], weights[:, None]], 1)
        self.n = self.x.shape[0]

    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole training set on the device (the fast path's input)."""
        return torch.from_numpy(self.x).to(self.device), torch.from_numpy(self.y).to(self.device)

    def batch_indices(self, device: torch.device, batch_size: int, shard: tuple[int, int] | None = None):
        """Shuffled index batches on ``device``; ``shard=(rank, world)`` takes every world-th sample (every rank
        draws the same permutation from the run's generator and takes its own interleaved share of it)."""
        perm = torch.randperm(self.n, generator=self.gen).to(device)
        if shard is not None:
            rank, world = shard
            perm = perm[: (self.n // world) * world][rank::world]
        for i in range(0, perm.numel(), batch_size):
            yield perm[i : i + batch_size]

    def fast_batches(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, shard: tuple[int, int] | None = None):
        """``batch_indices`` gathered from device tensors ``x`` and ``y``."""
        for idx in self.batch_indices(x.device, batch_size, shard):
            yield x.index_select(0, idx), y.index_select(0, idx)

    def make_loader(self, sampler: torch.utils.data.Sampler | None = None) -> torch.utils.data.DataLoader:
        """The per-sample Dataset + DataLoader input path (the published one); shuffled by the run's
        generator, or by ``sampler`` (DDP's DistributedSampler)."""
        cfg = self.cfg
        return torch.utils.data.DataLoader(
            WindowDataset(self.x, self.y, cfg.sample_tensors == "per_sample"), batch_size=cfg.batch_size,
            shuffle=sampler is None, sampler=sampler, generator=self.gen if sampler is None else None,
            num_workers=cfg.num_workers, pin_memory=cfg.pin_memory and self.device.type == "cuda",
            persistent_workers=cfg.persistent_workers and cfg.num_workers > 0,
        )

    def loader_batches(self, loader):
        for xb, yb in loader:
            yield xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)

    def whole_set_batches(self, graph: bool) -> Callable[[int], Iterable]:
        """A function giving each epoch's batches over the whole training set in this process: the fast path
        (the set moved to the device once, shuffled batches; ``IndexBatches`` for a ``graph``) or the DataLoader."""
        if self.cfg.input_path == "fast":
            x, y = self.train_tensors()
            if graph:
                return lambda epoch: IndexBatches(x, y, self.batch_indices(x.device, self.cfg.batch_size))
            return lambda epoch: self.fast_batches(x, y, self.cfg.batch_size)
        loader = self.make_loader()
        return lambda epoch: self.loader_batches(loader)


@dataclass
class StepParts:
    """What a training step touches, and nothing that holds the Trainer."""

    model: nn.Module  # what runs the forward pass, perhaps compiled or wrapped
    core: nn.Module  # its parameters, clipped
    opt: torch.optim.Optimizer
    loss: LossFn
    guard: object  # the divergence guard, which sees gradient norms and losses
    adtype: torch.dtype | None
    grad_clip: float | None
    batch_size: int


def optimizer_step(p: StepParts, xb: torch.Tensor, yb: torch.Tensor, *, scaler=None, sched=None) -> torch.Tensor:
    """One optimiser step (optionally float16-scaled and scheduled); returns the detached loss (no host sync)."""
    with torch.autocast(device_type=xb.device.type, dtype=p.adtype, enabled=p.adtype is not None):
        loss = p.loss(p.model(xb).float(), yb)
    p.opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(p.opt)
    else:
        loss.backward()
    if p.grad_clip:
        p.guard.norm(nn.utils.clip_grad_norm_(p.core.parameters(), p.grad_clip))
    if scaler is not None:
        scaler.step(p.opt)
        scaler.update()
    else:
        p.opt.step()
    if sched is not None:
        sched.step()
    return loss.detach()


# Param-group flags that describe how this process steps, not what was learnt: a resumed run keeps its own.
STEP_FLAGS = ("capturable", "fused", "foreach", "differentiable")


@functools.cache
def _import_dynamo_off_stack() -> None:
    """torch.optim's constructors import ``torch._dynamo`` on first call (``torch/_compile.py``, ``inner``), leaving
    reference cycles that hold the calling frames: a process's first run (its Trainer, the device's training set)
    stayed alive until the cyclic collector ran. Imported once from a thread whose stack holds no run instead."""
    worker = threading.Thread(target=importlib.import_module, args=("torch._dynamo",), daemon=True)
    worker.start()
    worker.join()


def make_optimizer(model: nn.Module, cfg, device: torch.device, capturable: bool = False) -> torch.optim.Optimizer:
    """Adam; fused into one kernel per step where torch supports it on the device, and capturable
    (state on the device, no host sync) when the step is captured as a CUDA graph."""
    _import_dynamo_off_stack()
    kw: dict[str, Any] = {"lr": cfg.learning_rate, "weight_decay": cfg.weight_decay}
    if capturable:
        kw["capturable"] = True
    elif cfg.fused_adam and device.type in ("cpu", "cuda", "mps"):
        kw["fused"] = True
    return off_the_gpu(torch.optim.Adam(model.parameters(), **kw), device)


def restore_optimizer(opt: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """``opt.load_state_dict(saved)``, keeping ``opt``'s own step flags (the learnt state is the checkpoint's, how to
    step is this run's) and putting each ``step`` count where those flags want it. ``load_state_dict`` copies the
    saved flags: a CUDA-graph run's checkpoint (capturable=True) resumed on a CPU would assert "If capturable=True,
    params and state_steps must be on supported devices", and a CPU one resumed for a graph would be fused and not
    capturable, which a capture refuses."""
    own = [{k: g[k] for k in STEP_FLAGS if k in g} for g in opt.param_groups]
    opt.load_state_dict(saved)
    for group, flags in zip(opt.param_groups, own):
        group.update(flags)
        on_device = bool(flags.get("capturable") or flags.get("fused"))
        for p in group["params"]:
            state = opt.state.get(p, {})  # a tensor step: float32, on the parameter's device if capturable/fused
            if isinstance(step := state.get("step"), torch.Tensor):
                state["step"] = step.to(dtype=torch.float32, device=p.device if on_device else "cpu")


def make_scheduler(opt: torch.optim.Optimizer, cfg, steps_per_epoch: int):
    """The learning-rate schedule of ``cfg`` over the run's steps (None: constant)."""
    total = cfg.epochs * steps_per_epoch
    if cfg.lr_schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.learning_rate, total_steps=total, pct_start=0.25)
    if cfg.lr_schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    return None


GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before the capture (PyTorch's whole-network recipe)
STEPS_TO_CAPTURE = GRAPH_WARMUP_STEPS + 1  # full batches a run needs before a graph replays anything
CAPTURE_NEEDS = f"a capture needs {STEPS_TO_CAPTURE} ({GRAPH_WARMUP_STEPS} eager warm-up steps, then the captured one)"
# torch warns when a side-stream backward meets gradients made on the default stream; harmless here
STREAM_WARNING = ".*AccumulateGrad.*stream"
# torch/optim/optimizer.py, _accelerator_graph_capture_health_check: once per optimizer whose capturable step
# runs uncaptured, advising capturable=False; wrong here, where warm-up and smaller batches run so by design
CAPTURABLE_WARNING = "This instance was constructed with capturable=True"


def graph_plan(cfg, device: torch.device, adtype: torch.dtype | None,
               full_batches: int | None = None) -> tuple[bool, str]:
    """Whether the training step is to be captured as a CUDA graph, and why or why not (for the record; each
    reason says what a graph, fixed kernels on fixed memory, needs). ``full_batches``: full batches per epoch x
    epochs (None when not known)."""
    for refused, why in (
            (not cfg.cuda_graph, "turned off (cuda_graph=False)"),
            (device.type != "cuda", f"runs on {device.type}; CUDA graphs need a CUDA GPU"),
            (cfg.strategy != "single", f"strategy={cfg.strategy}; a graph captures one device's step"),
            (cfg.input_path != "fast", "input_path=dataloader; batches come from host workers, not fixed device memory"),
            (cfg.lr_schedule != "constant", f"lr_schedule={cfg.lr_schedule}; a captured step cannot change its learning rate"),
            (adtype == torch.float16, "amp in float16; its loss scaler changes between steps"),
            (cfg.compile, "compile=True; torch.compile manages its own graphs"),
            (full_batches is not None and full_batches < STEPS_TO_CAPTURE,
             f"the run has {full_batches} full batch(es) of {cfg.batch_size}; {CAPTURE_NEEDS}")):
        if refused:  # the first that applies
            return False, why
    where = f" on {device}" if device.index is not None else ""
    return True, (f"captured{where} after {GRAPH_WARMUP_STEPS} eager warm-up steps, replayed for every full "
                  f"batch (the batch gather and the loss sum inside the graph)")


def capture_epoch(planned: bool, full_batches_per_epoch: int) -> int:
    """The epoch (1-based) whose training time includes the eager warm-up and the capture: 1 for an eager run, or a
    graph run with at least ``STEPS_TO_CAPTURE`` full batches an epoch; later with fewer (2 per epoch: epoch 2).
    Epochs up to it are warm-up, so the steady median (``evaluate.summarize_timing``) never mixes eager, capture
    and replay epochs. Pure."""
    if not planned or full_batches_per_epoch < 1:
        return 1
    return max(1, math.ceil(STEPS_TO_CAPTURE / full_batches_per_epoch))


def graph_record(planned: bool, reason: str, *, replays: int = 0, full_batches: int = 0,
                 steps: int = 0, batch_size: int | None = None) -> dict[str, Any]:
    """The record's ``cuda_graph``: ``planned`` (the plan), ``used`` (a graph was captured and replayed),
    ``captured_steps`` (steps replayed from it) and, for a planned run, ``steps`` (all its optimiser
    steps). Pure."""
    out: dict[str, Any] = {"planned": planned, "used": planned and replays > 0, "reason": reason,
                           "captured_steps": replays}
    if planned:
        out["steps"] = steps
        if replays == 0:
            out["reason"] = (f"planned, but nothing was captured: the run reached {full_batches} full batch(es) of "
                             f"{batch_size}; {CAPTURE_NEEDS}")
    return out


class GraphStep:
    """The Trainer's step, captured once and replayed. Every batch trains once, as in an eager run: the first full
    batches eagerly on a side stream (warm-up), the next is captured then replayed (capture alone runs nothing),
    later ones refill the static indices and replay; a final smaller batch runs eagerly. All inside
    ``torch.cuda.device(cuda:N)`` with streams made on that device: ``torch.cuda.graph``'s default capture stream
    is made once per process on whatever device is current then."""

    def __init__(self, parts: StepParts, device: torch.device):
        # not the Trainer: that cycle would hold the training set, Adam's state and the graph's memory pool until
        # the cyclic collector ran (torch does not collect when a capture starts)
        self.parts = parts
        self.device = indexed(device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: dict[str, torch.Tensor] = {}
        self.warm = self.replays = self.full_batches = self.steps = 0

    def _eager(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, side: bool) -> torch.Tensor:
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=CAPTURABLE_WARNING)
            if not side:
                return self.parts.guard.see(optimizer_step(self.parts, xb, yb))
            stream = torch.cuda.Stream(device=self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                warnings.filterwarnings("ignore", message=STREAM_WARNING)
                loss = optimizer_step(self.parts, xb, yb)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return self.parts.guard.see(loss)

    def _capture(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> None:
        p = self.parts
        s = self.static = {"x": x, "y": y, "idx": idx.clone(), "acc": torch.zeros((), device=self.device)}
        graph = torch.cuda.CUDAGraph()
        p.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device=self.device)), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=STREAM_WARNING)
            xb, yb = s["x"].index_select(0, s["idx"]), s["y"].index_select(0, s["idx"])
            with torch.autocast("cuda", dtype=p.adtype, enabled=p.adtype is not None):
                loss = p.loss(p.model(xb).float(), yb)
            loss.backward()
            if p.grad_clip:  # the guard keeps the captured norm and reads it after each replay
                p.guard.norm(nn.utils.clip_grad_norm_(p.core.parameters(), p.grad_clip))
            p.opt.step()
            s["acc"].add_(loss.detach(), alpha=idx.numel())  # the epoch's loss sum, accumulated by the replays
            s["loss"] = loss.detach()  # this replay's loss, for the divergence guard
        # only detached buffers are kept: a captured loss that kept its autograd graph would make later
        # eager steps warn that an AccumulateGrad node's stream does not match
        self.graph = graph

    def epoch(self, batches: IndexBatches) -> tuple[torch.Tensor, int]:
        """Train one epoch; returns (summed loss on the device, samples seen)."""
        size = self.parts.batch_size
        with torch.cuda.device(self.device):
            if self.graph is not None and not (batches.x is self.static["x"] and batches.y is self.static["y"]):
                self.graph, self.static = None, {}  # new training tensors: capture again (no new warm-up)
            if self.graph is not None:
                self.static["acc"].zero_()
            eager, seen = torch.zeros((), device=self.device), 0
            for idx in batches.indices:
                n = idx.numel()
                seen += n
                self.steps += 1
                if n != size:  # the final smaller batch
                    eager += self._eager(batches.x, batches.y, idx, side=False) * n
                    continue
                self.full_batches += 1
                if self.graph is None and self.warm < GRAPH_WARMUP_STEPS:
                    self.warm += 1
                    eager += self._eager(batches.x, batches.y, idx, side=True) * n
                    continue
                if self.graph is None:
                    self._capture(batches.x, batches.y, idx)
                else:
                    self.static["idx"].copy_(idx, non_blocking=True)
                self.graph.replay()
                self.replays += 1
                # a copy of this replay's loss (one small kernel): the guard names the first bad step
                self.parts.guard.see(self.static["loss"].clone())
            return (eager + self.static["acc"]) if self.graph is not None else eager, seen

    def record(self, reason: str) -> dict[str, Any]:
        return graph_record(True, reason, replays=self.replays, full_batches=self.full_batches, steps=self.steps,
                            batch_size=self.parts.batch_size)
