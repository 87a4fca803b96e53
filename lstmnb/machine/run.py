"""What one run asks of the machine, asked once when its Trainer is made and kept with it (``RunMachine``): the
device made ready (cuDNN off where torch's cuDNN refuses the GPU), the autocast dtype, a CPU run's C heap; then
the run's peak memory from its start, and the record's ``memory`` and ``backends`` sections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .cuda import backends_record, prepare_cuda
from .device import amp_choice, indexed
from .memory import heap_for_run, page_faults, peak_memory_mb, reset_peak_memory


@dataclass
class RunMachine:
    device: torch.device
    adtype: torch.dtype | None  # the autocast dtype; None: float32
    heap: dict[str, Any] | None  # a CPU run's C heap (the record's ``memory.heap``); None elsewhere
    peak_since_reset: bool = False  # set by ``start_peak``: the memory figure is this run's own
    faults_at_start: int | None = None  # set by ``start_peak`` on a CPU

    def start_peak(self) -> None:
        """Reset the peak memory (and on a CPU count page faults from here) once model and data are placed."""
        self.peak_since_reset = reset_peak_memory(self.device)
        self.faults_at_start = page_faults() if self.device.type == "cpu" else None

    def sections(self) -> dict[str, Any]:
        """The record's ``memory`` (peak, heap, page faults) and ``backends`` (cuDNN, TF32, the LSTM's math)."""
        memory = peak_memory_mb(self.device, self.peak_since_reset)
        if self.heap is not None:
            memory["heap"] = self.heap
        if self.faults_at_start is not None and (now := page_faults()) is not None:
            memory["page_faults"] = now - self.faults_at_start
        return {"memory": memory, "backends": backends_record(self.device, self.adtype)}


def for_run(device: torch.device, amp: str, heap: str) -> RunMachine:
    """Ask the machine once what a run on ``device`` needs (``amp`` and ``heap`` as the config names them)."""
    if device.type == "cuda":
        prepare_cuda()  # before the model reaches the GPU: cuDNN off where torch's cuDNN refuses it
    kept = heap_for_run(heap == "kept") if device.type == "cpu" else None
    # the autocast dtype by the run's own GPU's capability (cuda:N, not the current device)
    capability = (tuple(torch.cuda.get_device_capability(indexed(device)))
                  if device.type == "cuda" and amp in ("auto", "bf16") else None)
    return RunMachine(device, amp_choice(amp, device.type, capability), kept)
