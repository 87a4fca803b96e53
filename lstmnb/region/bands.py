"""What a sharded rank holds of the area: the series of the cells it computes on, and no more.

``training.parallel.spawn`` pickles the same arguments for every rank, so rather than the whole-area ``RegionData`` the
parent writes the area's scaled series once as a ``.npy`` file in a temporary folder (``AreaFile.write``; disk the size
of the series, for the study's length), and each rank memory-maps it and copies out its own cells (``AreaFile.load``): a
tiles rank its band's, a windows rank all. Halo rows arrive from their owners each step (``shard.exchange_halo``), never
from the file. A rank also holds each split's input hours (one number per sample, shared by every cell), the grid's
coordinates and the model, built whole and cut to its band (O(cells x k) weights, small beside the series)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..windows import SPLITS, WindowConfig
from .data import RegionData, area_batch
from .grid import Grid


@dataclass(frozen=True)
class AreaFile:
    """An area's scaled series on disk (``path``, (time, cells, features) float32), with what a rank needs to cut
    windows from it: each split's last input hours, the windows' config and the grid."""

    path: str
    last_inputs: dict[str, np.ndarray]
    config: WindowConfig
    grid: Grid

    @classmethod
    def write(cls, data: RegionData, folder: str | Path) -> "AreaFile":
        path = Path(folder) / "area-series.npy"
        np.save(path, data.windows.series)
        return cls(str(path), {s: np.array(data.last_input(s)) for s in SPLITS}, data.config, data.grid)

    def load(self, cells: np.ndarray | None = None) -> "AreaPart":
        """The series of ``cells`` (global ids, ascending; None: every cell), copied into this process."""
        series = np.load(self.path, mmap_mode="r")
        if cells is None:
            held = np.array(series)
        else:
            cells = np.asarray(cells, dtype=np.int64)
            contiguous = cells.size and cells[-1] - cells[0] + 1 == cells.size
            held = np.array(series[:, cells[0]:cells[-1] + 1] if contiguous else series[:, cells])
        del series  # the map is closed once its last view is gone: nothing of it stays mapped
        return AreaPart(held, cells, self)


@dataclass
class AreaPart:
    """One rank's cells of an ``AreaFile``: ``RegionData``'s batches for those cells, asked for by their global ids;
    ``n_cells`` and ``grid`` stay the area's (the loss is a mean over every cell of it)."""

    series: np.ndarray
    cells: np.ndarray | None  # global ids of the columns of ``series``; None: every cell
    area: AreaFile

    @property
    def grid(self) -> Grid:
        return self.area.grid

    @property
    def config(self) -> WindowConfig:
        return self.area.config

    @property
    def n_cells(self) -> int:
        return self.area.grid.n_cells

    @property
    def held_bytes(self) -> int:
        return int(self.series.nbytes)

    def sizes(self) -> dict[str, int]:
        return {s: int(v.size) for s, v in self.area.last_inputs.items()}

    def batch(self, split: str, ids: np.ndarray | None = None, cells: np.ndarray | slice = slice(None)
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """As ``RegionData.batch``; ``cells`` must be cells this part holds."""
        last = self.area.last_inputs[split] if ids is None else self.area.last_inputs[split][np.asarray(ids)]
        columns = cells
        if self.cells is not None and not (isinstance(cells, slice) and self.cells.size == self.n_cells):
            wanted = np.arange(self.n_cells)[cells] if isinstance(cells, slice) else np.asarray(cells)
            columns = np.searchsorted(self.cells, wanted)
            if columns.max(initial=0) >= self.cells.size or not np.array_equal(self.cells[columns], wanted):
                raise ValueError(f"cells asked for that this part of the area does not hold (it holds "
                                 f"{self.cells.size} of {self.n_cells})")
        return area_batch(self.series, last, self.config, columns)
