"""What `lstmnb region memory` checks before anything is measured: the budget and the smallest case against the
memory of the device the cases run on (a CUDA GPU's, else this machine's), and the areas against the synthetic grid
they are built on."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..rules import PYTHON, Spelling
from .memory import MemoryCase, floor_case, predict_bytes


def device_memory(device: str) -> tuple[int, str]:
    """The memory a case on ``device`` can use, in bytes, and what holds it: for ``cuda`` the first visible GPU's,
    else this machine's (psutil's total)."""
    import torch

    from ..machine.device import host_memory_bytes

    if device == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).total_memory), "the GPU"
    return host_memory_bytes(), "this machine"


def check_floor(base: MemoryCase) -> None:
    """A ConfigError where even the floor's 3 x 3 case is predicted to need more memory than the device has (its
    batch, window and hidden size alone)."""
    need = predict_bytes(floor_case(base))["total"]
    have, where = device_memory(base.device)
    if need > have:
        raise ConfigError(f"--batch {base.batch}, --window {base.window}, --hidden {base.hidden}: even the 3 x 3 area "
                          f"measured first is predicted to need {need / 2**30:,.1f} GiB; "
                          f"{where} has {have / 2**30:,.1f} GiB; give a smaller --batch, --window or --hidden")


def check_budget(budget_gb: float, device: str, say: Spelling = PYTHON) -> None:
    """A ConfigError where the budget (GiB) is more memory than ``device`` has: cases the memory model lets through
    would then fail to allocate, or drive the machine into swap. ``say`` spells ``budget_gb``."""
    have, where = device_memory(device)
    if budget_gb * 2**30 > have:
        most = float(np.floor(have / 2**30 * 10) / 10)
        raise say.refuse("budget_gb", budget_gb, f": {where} has {have / 2**30:,.1f} GiB of memory; give "
                                                 f"{say('budget_gb', most)} or less")


def check_areas(areas, option: str) -> None:
    """Every (rows, columns) area fits the synthetic grid the cases are built on (``Grid.square``: 0.25 degree cells
    from 60N, at most once round the globe), before any case runs; ``option`` names them in the refusal (--sides:
    square areas)."""
    from .grid import Grid

    rows, cols = Grid.square_limits()
    advice = (f"give sides of at most {min(rows, cols)}" if option.startswith("--sides") else
              f"give at most {rows} rows and {cols} columns")
    for ny, nx in areas:
        if ny > rows:
            raise ConfigError(f"{option}: an area of {ny} rows of the synthetic grid (0.25 degree cells from 60N) "
                              f"leaves -90..90 latitude; {advice}")
        if nx > cols:
            raise ConfigError(f"{option}: an area of {nx} columns of 0.25 degrees goes round the globe more than "
                              f"once; {advice}")
