"""The region forecaster: the point model (``models.Forecaster``), shared by every cell, fed at each hour with the
cell's own inputs and a learned mix of its neighbours' weather (``relation``).

The mix reads, per neighbour and hour, its weather variables and their change over the past hour, each as a difference
from the cell's own (``mix_source``): fronts and waves move, so a neighbour upwind that has just cooled says what
reaches this cell next, its recent change most directly. Being linear, the mix is one product over every hour of the
window; the shared LSTM then runs once over all sequences. Variants: ``relation='sparse'``, k learned weights per cell
and channel on its k nearest cells (O(n k)); ``relation='dense'``, an n x n matrix per channel (O(n^2)) starting from
the sparse weights; ``neighbours=0`` (variant ``none``), no mix: exactly the point Forecaster of ``lstmnb train --box``
(same inputs, residual head), hence a fair comparison.

One model, two input layouts: area batches (batch, window, cells, features) -> (batch, cells, horizon) for the memory
and sharding studies, and keyed samples (``KeyedForecaster``: one cell and hour each) for the point Trainer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..models import Forecaster, ModelConfig
from ..rules import PYTHON, Spelling, check_fields, choice, ruled, whole
from . import VARIANTS
from .grid import Grid
from .relation import KINDS, NeighbourMix, knn_index, stencil_weights


def check_channels(channels: int, neighbours: int, say: Spelling = PYTHON) -> None:
    """At most max(3, k) channels for k neighbours: k mixes of k neighbours span every other (3 are always allowed:
    the mean and the two gradients that ``relation.stencil_weights`` starts from); named as ``say`` spells them."""
    top = max(3, neighbours)
    if neighbours and channels > top:
        raise say.refuse("channels", channels, f"must be 1..{top}: each channel mixes the {neighbours} neighbours, and "
                         "more mixes than neighbours are combinations of the others")


@dataclass(frozen=True)
class RegionConfig:
    """The region forecaster's shape. Input 0 is the target; the first ``n_mixed`` inputs are the weather variables
    the mix reads (calendar and coordinate inputs come after them and are not mixed)."""

    n_features: int = ruled(1, whole(1))  # inputs per cell and hour
    n_mixed: int = ruled(1, whole(1))  # the leading inputs that neighbours contribute (weather variables)
    hidden: int = ruled(64, whole(1))
    layers: int = ruled(1, whole(1))
    horizon: int = ruled(1, whole(1))
    # k nearest cells mixed into each cell's input; 0: no mix (the point model)
    neighbours: int = ruled(8, whole(0, note="0: no mix"))
    relation: str = ruled("sparse", choice(KINDS))  # 'sparse' (k weights per cell) or 'dense' (n weights per cell)
    # independent mixes, each its own relation matrix (see relation.stencil_weights)
    channels: int = ruled(3, whole(1))
    residual: bool = True  # forecast the change from the last observed target value
    cell: str = "lstm"

    def validate(self) -> None:
        check_fields(self, PYTHON)
        if self.n_mixed > self.n_features:
            raise ConfigError(f"n_mixed={self.n_mixed!r} must be a whole number in 1..{self.n_features} (n_features)")
        check_channels(self.channels, self.neighbours)
        self.core_config().validate()

    @property
    def variant(self) -> str:
        """'none', 'sparse' or 'dense': how cells see each other."""
        return "none" if self.neighbours == 0 else self.relation

    @property
    def input_size(self) -> int:
        """Inputs per cell and step of the shared LSTM: its own, then per channel the mixed values and changes."""
        return self.n_features + (self.channels * 2 * self.n_mixed if self.neighbours else 0)

    def core_config(self) -> ModelConfig:
        """The point model that every cell runs on its inputs (and the mix)."""
        return ModelConfig(n_features=int(self.input_size), hidden=self.hidden, layers=self.layers,
                           horizon=self.horizon, cell=self.cell, residual=self.residual)


def variant_config(variant: str, **shape) -> RegionConfig:
    """The ``RegionConfig`` of a named variant (``VARIANTS``), with ``shape`` (hidden, neighbours, n_features, ...)
    for the rest: 'sparse' mixes k nearest cells, 'dense' all n, 'none' no cell (neighbours 0)."""
    if variant not in VARIANTS:
        raise ConfigError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    if variant == "none":
        shape["neighbours"] = 0
    return RegionConfig(relation="dense" if variant == "dense" else "sparse", **shape)


def mix_source(x: torch.Tensor, n_mixed: int) -> torch.Tensor:
    """What the mix reads from (..., window, sources, features) inputs: the first ``n_mixed`` features and their
    change since the hour before (0 at the window's first hour), (..., window, sources, 2 n_mixed)."""
    m = x[..., :n_mixed]
    change = torch.cat([torch.zeros_like(m[:, :1]), m[:, 1:] - m[:, :-1]], dim=1)
    return torch.cat([m, change], dim=-1)


class RegionForecaster(nn.Module):
    """The point model per cell with a learned neighbour mix (see the module's docstring), on area batches; ``index``,
    ``n_src`` (default: the index's cells) and ``weight`` as ``NeighbourMix`` takes them."""

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
            self.mix = NeighbourMix(index, n_src, config.channels, config.relation, weight)
        # built after the mix, whose weights draw nothing from the random state: with the same seed the core starts
        # with the weights the point Trainer gives its Forecaster
        self.core = Forecaster(config.core_config())

    def forward(self, x: torch.Tensor, x_src: torch.Tensor | None = None) -> torch.Tensor:
        """x (batch, window, cells, features), x_src (batch, window, sources, features), the mix's source cells
        (default ``x``) -> (batch, cells, horizon)."""
        b, t, n, f = x.shape
        parts = [x.permute(0, 2, 1, 3)]  # (b, n, t, f)
        if self.mix is not None:
            src = mix_source(x if x_src is None else x_src, self.config.n_mixed)
            m = src.shape[3]
            mixed = self.mix(src.permute(2, 0, 1, 3).reshape(src.shape[2], b * t * m))  # (c, n, b*t*m)
            c = mixed.shape[0]
            parts.append(mixed.view(c, n, b, t, m).permute(2, 1, 3, 0, 4).reshape(b, n, t, c * m))
        y = self.core(torch.cat(parts, dim=-1).reshape(b * n, t, self.config.input_size))
        return y.view(b, n, self.config.horizon)

    def local_parameters(self) -> list[nn.Parameter]:
        """Parameters that belong to single cells (the relation's rows): a shard keeps its own rows."""
        return [self.mix.weight] if self.mix is not None else []

    def shared_parameters(self) -> list[nn.Parameter]:
        """Parameters every cell uses (LSTM and head): the ones whose gradients ranks all-reduce."""
        local = {id(p) for p in self.local_parameters()}
        return [p for p in self.parameters() if id(p) not in local]


class KeyedForecaster(nn.Module):
    """The region model on keyed windows (``windows.make_windows(keys=True)``): (batch, 2) keys, each a sample's
    (cell, last input hour), -> (batch, horizon). Each sample's window and its neighbours' are gathered from
    ``series`` (time, cells, features). The point Trainer trains it on the point pipeline's samples, batches and
    loss; without a mix it is the point Forecaster on the cell's own window."""

    def __init__(self, region: RegionForecaster, series: np.ndarray | torch.Tensor, window: int):
        super().__init__()
        self.region = region
        self.register_buffer("series", torch.as_tensor(series), persistent=False)
        self.register_buffer("offsets", torch.arange(1 - window, 1), persistent=False)

    @property
    def config(self) -> ModelConfig:
        """The shared LSTM's config (the record's FLOPs count it; the mix adds a few per neighbour)."""
        return self.region.core.config

    def forward(self, keys: torch.Tensor) -> torch.Tensor:
        cells, hours = keys[:, 0], keys[:, 1:2] + self.offsets  # (B,), (B, window)
        own = self.series[hours, cells[:, None]]  # (B, window, features)
        mix = self.region.mix
        if mix is None:
            return self.region.core(own)
        m = self.region.config.n_mixed
        src = (self.series[hours, :, :m] if mix.kind == "dense"  # (B, window, cells, m)
               else self.series[hours[:, :, None], mix.index[cells][:, None, :], :m])  # (B, window, k, m)
        mixed = mix.for_samples(mix_source(src, m), mix_source(own[:, :, None, :m], m)[:, :, 0], cells)
        return self.region.core(torch.cat([own, mixed], dim=-1))


def region_model(config: RegionConfig, grid: Grid, seed: int | None = 0) -> RegionForecaster:
    """The region forecaster for ``grid``: its neighbours the ``config.neighbours`` nearest cells, its relation
    starting from the stencil on their positions (``relation.stencil_weights``); ``seed`` fixes the initial weights
    (None: torch's current random state)."""
    config.validate()
    index = weight = None
    if config.neighbours:
        index = knn_index(grid.cell_lat, grid.cell_lon, config.neighbours)
        weight = stencil_weights(grid.cell_lat, grid.cell_lon, index, config.channels)
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        return RegionForecaster(config, index, weight=weight)
