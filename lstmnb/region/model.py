"""The region forecaster: one LSTM shared by every cell, fed at each step with its own inputs and a
learned mix of its neighbours' inputs (their differences from its own, see ``relation``).

Input (batch, window, cells, features) -> forecast (batch, cells, horizon). The mix is linear in the
inputs, so it is computed for every hour of the window in one product (no loop over time), and the
LSTM then runs once over batch x cells sequences (one cuDNN / oneDNN call). Variants:

- ``relation='sparse'``: k learned weights per cell and channel on its k nearest cells (O(n k));
- ``relation='dense'``: a learned n x n matrix per channel (O(n^2)), starting from the sparse weights;
- ``neighbours=0``: no mix at all, each cell from its own past: the control, and the same model as the
  point LSTM trained on all cells of the box.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..models import ModelConfig
from . import VARIANTS
from .grid import Grid
from .relation import KERNELS, KINDS, NeighbourMix, knn_index, stencil_weights


@dataclass(frozen=True)
class RegionConfig:
    """The region forecaster's shape. Feature 0 of the inputs is the target."""

    n_features: int = 1  # inputs per cell and hour
    n_static: int = 0  # inputs per cell that do not change with time (e.g. scaled latitude, longitude)
    hidden: int = 32
    layers: int = 1
    horizon: int = 1
    neighbours: int = 8  # k nearest cells mixed into each cell's input; 0: no mix (the per-cell control)
    relation: str = "sparse"  # 'sparse' (k weights per cell) or 'dense' (n weights per cell)
    kernel: str = "gather"  # how the sparse mix is computed: 'gather' or 'csr' (see relation.py)
    channels: int = 3  # independent mixes, each its own relation matrix (see relation.stencil_weights)
    residual: bool = True  # forecast the change from the last observed target value
    cell: str = "lstm"

    def validate(self) -> None:
        ModelConfig(n_features=self.n_features, hidden=self.hidden, layers=self.layers, horizon=self.horizon,
                    cell=self.cell, residual=self.residual).validate()
        if not isinstance(self.n_static, (int, np.integer)) or self.n_static < 0:
            raise ConfigError(f"n_static={self.n_static!r} must be a whole number >= 0")
        if not isinstance(self.neighbours, (int, np.integer)) or self.neighbours < 0:
            raise ConfigError(f"neighbours={self.neighbours!r} must be a whole number >= 0 (0: no mix)")
        if self.relation not in KINDS:
            raise ConfigError(f"relation={self.relation!r} is not one of {KINDS}")
        if self.kernel not in KERNELS:
            raise ConfigError(f"kernel={self.kernel!r} is not one of {KERNELS}")
        if not isinstance(self.channels, (int, np.integer)) or self.channels < 1:
            raise ConfigError(f"channels={self.channels!r} must be a whole number >= 1")

    @property
    def variant(self) -> str:
        """'none', 'sparse' or 'dense': how cells see each other."""
        return "none" if self.neighbours == 0 else self.relation

    @property
    def input_size(self) -> int:
        """Inputs per cell and step of the shared LSTM."""
        mixed = self.channels * self.n_features if self.neighbours else 0
        return self.n_features + mixed + self.n_static


def variant_config(variant: str, **shape) -> RegionConfig:
    """The ``RegionConfig`` of a named variant (``VARIANTS``), with ``shape`` (hidden, neighbours, n_features,
    ...) for the rest: 'sparse' mixes k nearest cells, 'dense' all n, 'none' no cell (neighbours 0)."""
    if variant not in VARIANTS:
        raise ConfigError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    if variant == "none":
        shape["neighbours"] = 0
    return RegionConfig(relation="dense" if variant == "dense" else "sparse", **shape)


class RegionForecaster(nn.Module):
    """Per-cell LSTM with shared weights and a learned neighbour mix (see the module's docstring).

    ``index`` (cells, neighbours) lists each cell's neighbours among ``n_src`` source cells (default:
    the cells themselves; a shard's source is its own rows plus halo rows), and ``weight`` (channels,
    cells, neighbours) the relation's starting weights (see ``NeighbourMix``).
    """

    def __init__(self, config: RegionConfig, index: np.ndarray | None = None, n_src: int | None = None,
                 weight: np.ndarray | None = None):
        super().__init__()
        config.validate()
        self.config = config
        self.mix: NeighbourMix | None = None
        if config.neighbours:
            if index is None or np.shape(index)[1] != config.neighbours:
                raise ConfigError(f"neighbours={config.neighbours} needs a neighbour index of shape (cells, "
                                  f"{config.neighbours}); got {None if index is None else np.shape(index)}")
            n_src = np.shape(index)[0] if n_src is None else n_src
            self.mix = NeighbourMix(index, n_src, config.channels, config.relation, config.kernel, weight)
        rnn = nn.LSTM if config.cell == "lstm" else nn.GRU
        self.rnn = rnn(input_size=config.input_size, hidden_size=config.hidden, num_layers=config.layers,
                       batch_first=True)
        self.head = nn.Linear(config.hidden, config.horizon)

    def forward(self, x: torch.Tensor, static: torch.Tensor | None = None,
                x_src: torch.Tensor | None = None) -> torch.Tensor:
        """x (batch, window, cells, features), static (cells, n_static), x_src (batch, window, sources,
        features) -> (batch, cells, horizon)."""
        b, t, n, f = x.shape
        parts = [x.permute(0, 2, 1, 3)]  # (b, n, t, f)
        if self.mix is not None:
            src = x if x_src is None else x_src
            flat = src.permute(2, 0, 1, 3).reshape(src.shape[2], b * t * f)  # one column per (b, t, f)
            mixed = self.mix(flat)  # (c, n, b*t*f)
            c = mixed.shape[0]
            parts.append(mixed.view(c, n, b, t, f).permute(2, 1, 3, 0, 4).reshape(b, n, t, c * f))
        if self.config.n_static:
            if static is None or tuple(static.shape) != (n, self.config.n_static):
                raise ConfigError(f"the model expects static inputs of shape ({n}, {self.config.n_static}); got "
                                  f"{None if static is None else tuple(static.shape)}")
            parts.append(static[None, :, None, :].expand(b, n, t, self.config.n_static))
        out, _ = self.rnn(torch.cat(parts, dim=-1).reshape(b * n, t, self.config.input_size))
        y = self.head(out[:, -1]).view(b, n, self.config.horizon)
        if self.config.residual:
            y = y + x[:, -1, :, :1]
        return y

    def local_parameters(self) -> list[nn.Parameter]:
        """Parameters that belong to single cells (the relation's rows): a shard keeps its own rows."""
        return [self.mix.weight] if self.mix is not None else []

    def shared_parameters(self) -> list[nn.Parameter]:
        """Parameters every cell uses (LSTM and head): the ones whose gradients ranks all-reduce."""
        local = {id(p) for p in self.local_parameters()}
        return [p for p in self.parameters() if id(p) not in local]


def region_model(config: RegionConfig, grid: Grid, seed: int | None = 0) -> RegionForecaster:
    """The region forecaster for ``grid``: its neighbours the ``config.neighbours`` nearest cells, its
    relation starting from the stencil on their positions (``relation.stencil_weights``).

    ``seed`` fixes the initial weights (None: torch's current random state).
    """
    config.validate()
    index = weight = None
    if config.neighbours:
        index = knn_index(grid.cell_lat, grid.cell_lon, config.neighbours)
        weight = stencil_weights(grid.cell_lat, grid.cell_lon, index, config.channels)
    if seed is None:
        return RegionForecaster(config, index, weight=weight)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return RegionForecaster(config, index, weight=weight)
