"""Processes of lstmnb's own (a DDP rank, a region memory case, a capped sweep point) that must not share this
one's threads, heap or CUDA state. Linux: forked from one server process, started with the first of them and kept for
the caller's life (a notebook's kernel, a series of runs), which imported torch and the caller's module once, so such a
process starts in milliseconds, not the seconds of a fresh Python importing torch; CUDA is safe there, since the
server never initialises it (PyTorch's multiprocessing notes). Elsewhere: a fresh Python each (``spawn``)."""

from __future__ import annotations

import multiprocessing
import sys

START_METHOD = "forkserver" if sys.platform == "linux" else "spawn"
# what the server imports besides the caller's module: torch._dynamo, which every torch.optim optimizer imports when
# it is made (torch/_compile.py, _disable_dynamo); that cost each forked DDP rank 1.2-1.6 s of CPU (measured: a 2-rank
# job took 1.5 s, 0.09 s with it preloaded) and each memory case about 2 s
PRELOAD = ("torch._dynamo",)


def preload(module: str) -> None:
    """Where processes start by the forkserver (``START_METHOD``), have its server import ``module`` (the caller's: its
    processes' entry) and ``PRELOAD`` when it starts; Python reads the list then: the first caller's is the server's."""
    if START_METHOD == "forkserver":
        multiprocessing.set_forkserver_preload([module, *PRELOAD])
