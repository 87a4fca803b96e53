"""The optimiser of a run: Adam built for the device and the step (fused, or capturable for a CUDA graph),
and its state restored from a checkpoint that another device kind or step kind may have written."""

from __future__ import annotations

import functools
import importlib
import threading
from typing import Any

import torch
from torch import nn

from ..machine.device import off_the_gpu
from .config import TrainConfig

# Param-group flags that describe how this process steps, not what was learnt: a resumed run keeps its own.
STEP_FLAGS = ("capturable", "fused", "foreach", "differentiable")


@functools.cache
def _import_dynamo_off_stack() -> None:
    """torch.optim's constructors import ``torch._dynamo`` on their first call (``torch/_compile.py``,
    ``inner``), and that import leaves reference cycles that hold the frames which called it: the first
    run of a process (its Trainer, the device's training set) stayed alive until Python's cyclic collector
    ran. Imported once from a thread of its own, whose stack holds no run; the cost is the same import."""
    worker = threading.Thread(target=importlib.import_module, args=("torch._dynamo",), daemon=True)
    worker.start()
    worker.join()


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device,
                   capturable: bool = False) -> torch.optim.Optimizer:
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
    """``opt.load_state_dict(saved)``, keeping ``opt``'s own step flags and putting each ``step`` count where
    those flags want it.

    ``Optimizer.load_state_dict`` copies the saved groups' flags: a checkpoint of a CUDA-graph run
    (capturable=True) resumed on a CPU would assert "If capturable=True, params and state_steps must be on
    supported devices", and a CPU checkpoint resumed for a graph would be fused and not capturable, which
    a capture refuses. The learnt state (moments, step counts, lr) is what the checkpoint holds; how to step
    is this run's."""
    own = [{k: g[k] for k in STEP_FLAGS if k in g} for g in opt.param_groups]
    opt.load_state_dict(saved)
    for group, flags in zip(opt.param_groups, own):
        group.update(flags)
        on_device = bool(flags.get("capturable") or flags.get("fused"))
        for p in group["params"]:
            state = opt.state.get(p, {})
            step = state.get("step")
            if isinstance(step, torch.Tensor):  # capturable/fused: float32 on the parameter's device; else CPU
                state["step"] = step.to(dtype=torch.float32, device=p.device if on_device else "cpu")
