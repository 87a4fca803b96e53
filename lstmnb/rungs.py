"""The rungs of the ladder (``training/ladder.py`` places a run on them; the report draws them): the study's
workload timed from the study's own code (rung 0) to lstmnb's fastest step, each rung one change on the one
before, and on which device kind that change is one. Plain data: anything may import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOTH, CPU, GPU = ("cpu", "cuda"), ("cpu",), ("cuda",)


@dataclass(frozen=True)
class Rung:
    rung: int
    name: str
    change: str  # what this rung changes on the one before, in a few words
    overrides: dict[str, Any]  # the change, as training options on top of the rungs before it
    devices: tuple[str, ...]  # where the change is one (elsewhere it is no change: not a rung there)


RUNGS: tuple[Rung, ...] = (
    Rung(0, "the study's code", "a tensor per sample in __getitem__, 2 DataLoader workers started afresh each "
         "epoch, pageable memory, glibc's default heap, the loss read back every step", {}, BOTH),
    Rung(1, "windows built once", "float32 windows built once; a sample is a view, no tensor made per sample",
         {"sample_tensors": "once"}, BOTH),
    Rung(2, "freed heap kept", "glibc keeps the freed C heap for the next step instead of faulting it in again",
         {"heap": "kept"}, CPU),
    Rung(3, "loss read every 100 steps", "the loss read back every 100 steps, not every step (no host sync per "
         "step)", {"loss_every": None}, GPU),
    Rung(4, "in-memory batches", "the training set in the device's memory, shuffled index batches, no DataLoader",
         {"input_path": "fast"}, BOTH),
    Rung(5, "CUDA graph", "the step captured once as a CUDA graph and replayed", {"cuda_graph": True}, GPU),
    Rung(6, "recommended setting", "another model and optimiser (lstmnb's recommended: 1 layer with a residual "
         "head, calendar and cycle inputs, batch 256, fused Adam 4e-3), the same data and epochs", {}, BOTH),
)
