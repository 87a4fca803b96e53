"""One optimiser step and the training loss, as plain functions of the pieces they use (model,
optimiser, guard, ...): the Trainer's eager step and the CUDA graph's step (``graphs.GraphStep``) both
call them, and neither keeps the other alive (docs/architecture.md, "Rules": no reference cycles
through the Trainer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def weighted_mse(pred: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    """MSE weighted per sample by the last column of ``yb`` (point weights)."""
    return torch.mean(yb[:, -1:] * (pred - yb[:, :-1]) ** 2)


def make_loss(weighted: bool) -> LossFn:
    """The training loss: plain MSE, or ``weighted_mse`` when the targets carry a weight column."""
    return weighted_mse if weighted else F.mse_loss


@dataclass
class StepParts:
    """What a training step touches, and nothing that holds the Trainer: ``model`` (what runs the
    forward pass, perhaps compiled or wrapped), ``core`` (its parameters, clipped), ``opt``, ``loss``,
    ``guard`` (the divergence guard, which sees gradient norms and losses), the autocast dtype and the
    clipping norm."""

    model: nn.Module
    core: nn.Module
    opt: torch.optim.Optimizer
    loss: LossFn
    guard: object
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
