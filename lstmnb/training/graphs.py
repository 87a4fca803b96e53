"""The training step as a CUDA graph: whether a run captures it and why not (``graph_plan``), the capture
and its replays (``GraphStep``), and what the record says happened (``graph_record``).

The recipe is PyTorch's whole-network capture (CUDA semantics notes, "Whole-network capture"): eager
warm-up steps on a side stream, gradients set to None before the capture so the graph's backward
allocates them from its private pool, static inputs refilled before every replay. docs/gpu.md gives the
sources. lstmnb's GPU default; see docs/architecture.md.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import nn

from ..machine.device import indexed
from .config import TrainConfig
from .step import StepParts, optimizer_step

GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before the capture (PyTorch's whole-network recipe)
STEPS_TO_CAPTURE = GRAPH_WARMUP_STEPS + 1  # full batches a run needs before a graph replays anything
# torch warns when a side-stream backward meets gradients made on the default stream; harmless here
STREAM_WARNING = ".*AccumulateGrad.*stream"
# torch/optim/optimizer.py, _accelerator_graph_capture_health_check: once per optimizer whose capturable step
# runs uncaptured, advising capturable=False; wrong here, where warm-up and smaller batches run so by design
CAPTURABLE_WARNING = "This instance was constructed with capturable=True"


def graph_plan(cfg: TrainConfig, device: torch.device, adtype: torch.dtype | None,
               full_batches: int | None = None) -> tuple[bool, str]:
    """Whether the training step is to be captured as a CUDA graph, and why or why not (for the record).

    A graph replays fixed kernels on fixed memory: it needs one CUDA device, batches already on the
    device (fast path), a step that does not change between steps (constant lr, no fp16 loss scaler,
    no torch.compile graphs of its own), and at least ``STEPS_TO_CAPTURE`` full batches in the run
    (``full_batches``: full batches per epoch x epochs; None when not known)."""
    if not cfg.cuda_graph:
        return False, "turned off (cuda_graph=False)"
    if device.type != "cuda":
        return False, f"runs on {device.type}; CUDA graphs need a CUDA GPU"
    if cfg.strategy != "single":
        return False, f"strategy={cfg.strategy}; a graph captures one device's step"
    if cfg.input_path != "fast":
        return False, "input_path=dataloader; batches come from host workers, not fixed device memory"
    if cfg.lr_schedule != "constant":
        return False, f"lr_schedule={cfg.lr_schedule}; a captured step cannot change its learning rate"
    if adtype == torch.float16:
        return False, "amp in float16; its loss scaler changes between steps"
    if cfg.compile:
        return False, "compile=True; torch.compile manages its own graphs"
    if full_batches is not None and full_batches < STEPS_TO_CAPTURE:
        return False, (f"the run has {full_batches} full batch(es) of {cfg.batch_size}; a capture needs "
                       f"{STEPS_TO_CAPTURE} ({GRAPH_WARMUP_STEPS} eager warm-up steps, then the captured one)")
    where = f" on {device}" if device.index is not None else ""
    return True, (f"captured{where} after {GRAPH_WARMUP_STEPS} eager warm-up steps, replayed for every full "
                  f"batch (the batch gather and the loss sum inside the graph)")


def capture_epoch(planned: bool, full_batches_per_epoch: int) -> int:
    """The epoch (1-based) whose training time includes the eager warm-up and the capture: 1 for an eager
    run, or for a graph run with at least ``STEPS_TO_CAPTURE`` full batches an epoch; later when each epoch
    has fewer (with 2 full batches per epoch the capture comes in epoch 2). Epochs up to it are warm-up;
    the steady median (``summary.summarize_timing``) is taken over the epochs after it, so it never mixes
    eager, capture and replay epochs. Pure."""
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
    if not planned:
        return out
    out["steps"] = steps
    if replays == 0:
        out["reason"] = (f"planned, but nothing was captured: the run reached {full_batches} full batch(es) of "
                         f"{batch_size}; a capture needs {STEPS_TO_CAPTURE} ({GRAPH_WARMUP_STEPS} eager warm-up "
                         f"steps, then the captured one)")
    return out


@dataclass
class IndexBatches:
    """One epoch of the fast path as index batches into the training set on the device: a graph gathers
    its batch itself, so a replay needs one copy of indices instead of a gather and two copies."""

    x: torch.Tensor
    y: torch.Tensor
    indices: Iterable[torch.Tensor]


class GraphStep:
    """The Trainer's step, captured once and replayed (see the module's docstring).

    Every batch is trained once, as in an eager run: the first full batches train eagerly on a side
    stream (warm-up), the next one is captured and then replayed (capture alone runs nothing), later
    ones refill the static indices and replay. A final smaller batch runs eagerly. Everything happens
    inside ``torch.cuda.device(cuda:N)`` with streams made on that device: ``torch.cuda.graph``'s default
    capture stream is made once per process on whatever device is current then."""

    def __init__(self, parts: StepParts, device: torch.device):
        # the step's pieces, not the Trainer: a Trainer that kept a GraphStep that kept the Trainer would
        # be a reference cycle, holding the device's training set, Adam's state and the graph's memory
        # pool until Python's cyclic collector ran (torch does not collect when a capture starts)
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
        n = idx.numel()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device=self.device)), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=STREAM_WARNING)
            xb, yb = s["x"].index_select(0, s["idx"]), s["y"].index_select(0, s["idx"])
            with torch.autocast("cuda", dtype=p.adtype, enabled=p.adtype is not None):
                loss = p.loss(p.model(xb).float(), yb)
            loss.backward()
            if p.grad_clip:  # the guard keeps the captured norm and reads it after each replay
                p.guard.norm(nn.utils.clip_grad_norm_(p.core.parameters(), p.grad_clip))
            p.opt.step()
            s["acc"].add_(loss.detach(), alpha=n)  # the epoch's loss sum, accumulated by the replays
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
            eager = torch.zeros((), device=self.device)
            seen = 0
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
