"""When a training step can be captured as a CUDA graph, and why not: the rule the Trainer applies and the
record reports (lstmnb's GPU default; see docs/architecture.md)."""

from __future__ import annotations

import torch

from .config import TrainConfig

GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before the capture (PyTorch's whole-network recipe)
# torch warns when a side-stream backward meets gradients made on the default stream; harmless here
STREAM_WARNING = ".*AccumulateGrad.*stream"


def graph_plan(cfg: TrainConfig, device: torch.device, adtype: torch.dtype | None) -> tuple[bool, str]:
    """Whether the training step is captured as a CUDA graph, and why or why not (for the record).

    A graph replays fixed kernels on fixed memory: it needs one CUDA device, batches already on the
    device (fast path) and a step that does not change between steps (constant lr, no fp16 loss scaler,
    no torch.compile graphs of its own)."""
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
    return True, f"captured after {GRAPH_WARMUP_STEPS} eager warm-up steps, replayed for every full batch"
