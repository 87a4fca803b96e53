"""A box's data as the point pipeline makes it, keyed, plus whole-area batches.

The samples are the point pipeline's (``windows.make_windows`` on one series per cell, with ``keys=True``): the same
splits, scaling, calendar inputs, targets and baselines as `lstmnb train --box`, in the same order, but each sample is
a (cell, last input hour) key into the scaled series instead of a copy of its window. So the point Trainer trains the
region model on exactly the point model's batches (``model.KeyedForecaster`` gathers the windows, its neighbours'
too), and a 10,080-cell area costs its series once, not once per window. The sharding and memory studies step whole
areas instead: ``RegionData.batch`` gives windows that hold every cell (or a band of cells) at the same hours."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..windows import CALENDAR_FEATURES, CYCLE_FEATURE, WindowConfig, Windows
from .grid import COORD_FEATURES, Grid


@dataclass
class RegionData:
    """A box's keyed windows (one series per cell, row-major) and its grid."""

    windows: Windows
    grid: Grid

    @property
    def config(self) -> WindowConfig:
        return self.windows.config

    @property
    def n_cells(self) -> int:
        return self.grid.n_cells

    @property
    def n_features(self) -> int:
        return self.windows.n_features

    @property
    def n_mixed(self) -> int:
        """The leading inputs that are weather (not calendar, cycle or coordinate inputs): what neighbours mix."""
        fixed = {*CALENDAR_FEATURES, CYCLE_FEATURE, *COORD_FEATURES}
        return next((i for i, f in enumerate(self.windows.features) if f in fixed), len(self.windows.features))

    def sizes(self) -> dict[str, int]:
        """Samples per split and cell: every cell has the same hours."""
        return {s: n // self.n_cells for s, n in self.windows.sizes().items()}

    def last_input(self, split: str) -> np.ndarray:
        """The last input hour of each of ``split``'s samples (cell 0's keys; every cell has the same)."""
        return self.windows.x[split][: self.sizes()[split], 1]

    def batch(self, split: str, ids: np.ndarray | None = None, cells: np.ndarray | slice = slice(None)
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """``area_batch`` of samples ``ids`` of ``split`` (all when None), for ``cells`` (all by default)."""
        last = self.last_input(split) if ids is None else self.last_input(split)[np.asarray(ids)]
        return area_batch(self.windows.series, last, self.config, cells)


def area_batch(series: np.ndarray, last: np.ndarray, config: WindowConfig, columns: np.ndarray | slice = slice(None)
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows ending at hours ``last`` of a (time, cells, features) ``series``, for its ``columns``: inputs
    (batch, window, cells, features) and scaled targets (batch, cells, horizon)."""
    c = config
    x = series[last[:, None] + np.arange(1 - c.window, 1)[None, :]][:, :, columns]  # (b, window, cells, f)
    y = series[last[:, None] + c.lead_hours + np.arange(c.horizon)[None, :]][:, :, columns, 0]
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y.transpose(0, 2, 1)))
