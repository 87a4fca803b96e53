"""The machine a run is on, in one room: ``device`` (a device name resolved and checked, clocks, autocast dtype, CPU
cores and threads, the record's machine), ``cuda`` (what this process's CUDA stack can do: cuDNN, bf16, TF32, kernels
for a GPU), ``memory`` (a run's peak memory, the C heap, out-of-memory errors) and ``run`` (``for_run``: what one run
asks of them, once, as the ``RunMachine`` its Trainer keeps). A leaf: it imports torch, psutil, the standard library
and ``lstmnb.errors`` only. This file imports nothing (import the module you need), so reading records or parsing
options pays for no torch."""
