"""The machine a run is on: ``device`` (a device name resolved and checked, clocks, autocast dtype, CPU cores and
threads, the record's machine; and ``for_run``: what one run asks of the machine, once, kept by its Trainer as a
``RunMachine``), ``cuda`` (what this process's CUDA stack can do: cuDNN, bf16, TF32, kernels for a GPU), ``memory``
(peak memory, the C heap, out-of-memory errors) and ``processes`` (how a rank or a measuring process of lstmnb's own
starts). A leaf: it imports torch, psutil, the standard library, ``lstmnb.errors`` and ``lstmnb.rules`` (a leaf too)
only. This file imports nothing, so reading records or parsing options pays for no torch."""
