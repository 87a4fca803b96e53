"""The machine a run is on, in one room: ``device`` (a device name resolved and checked, clocks, autocast dtype,
CPU cores and threads, what the record says of the machine), ``cuda`` (what this process's CUDA stack can do:
cuDNN, bf16, TF32, kernels for a GPU), ``memory`` (a run's peak memory, the C heap, out-of-memory errors) and
``run`` (what one run asks of them, once: ``for_run`` gives the ``RunMachine`` its Trainer keeps).

A leaf: it imports torch, psutil, the standard library and ``lstmnb.errors`` only; anything may use it.
Import the module you need (``from lstmnb.machine.device import resolve_device``): this file imports nothing,
so reading records or parsing options pays for no torch."""
