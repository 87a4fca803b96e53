"""Which cells mix with which, and the learned mix itself.

The relation is a matrix A (cells x source cells) per mixing channel, applied to differences from the cell's own input
(``model.mix_source``): cell i sees sum_j A[i, j] (x_j - x_i), zero where the field is flat, so the mix speaks of
gradients and fronts, not the cell's level. Each channel starts as an operator on the neighbours' positions (the mean
difference, the east and north gradients by least squares, then zero); training moves each weight on its own. Sparse: k
weights per cell on its k nearest cells (O(n k) memory); dense: a weight for every cell (O(n^2)), which kept a
10,080-cell area off one 16 GB GPU in the study this project grew from, and which serves as the comparison and the
tests' reference (``dense_from``). The sparse A x is a gather of each cell's k neighbours (``x[index]``), then one
batched product. With exactly k neighbours per cell the list is a regular (n, k) array (ELL layout, no row pointers):
gather, batched matmul and their backward are dense kernels on every device, and the step can be captured as a CUDA
graph. Measured on 2 CPU cores (10,080 cells, k = 8, 288 columns, forward and backward): 0.24 s against 1.7 s for
torch's sparse CSR product, whose backward for the values is a sampled dense-dense product."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError

KINDS = ("sparse", "dense")


def unit_vectors(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Cells as points on the unit sphere (n, 3): chord distance orders cells as great-circle distance does, across
    the prime meridian and near the poles alike."""
    la, lo = np.radians(np.asarray(lat, dtype=np.float64)), np.radians(np.asarray(lon, dtype=np.float64))
    return np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=1)


TIE = 1e-12  # chord distances (unit sphere) this close are one distance: a 0.25 degree step is 4.4e-3


def knn_index(lat: np.ndarray, lon: np.ndarray, k: int) -> np.ndarray:
    """For every cell, its ``k`` nearest other cells (n, k), nearest first (scipy's k-d tree). On a regular lat/lon
    grid equatorward of about 54 degrees, k = 4 is the east, west, north and south neighbours and k = 8 adds the
    diagonals (the 3 x 3 stencil); poleward, the meridians converge and cells two columns away come before the
    diagonals. Cells at equal distance go in the grid's order (the lower cell id first), so a tie at the k-th
    neighbour (common at a box's edges: north and south, or two cells two columns away, are equally far) is settled
    by a rule, not by the tree's internal order."""
    from scipy.spatial import cKDTree

    pts = unit_vectors(lat, lon)
    n = pts.shape[0]
    if not isinstance(k, (int, np.integer)) or not 1 <= k < n:
        raise ConfigError(f"neighbours={k!r} must be a whole number in 1..{n - 1} (the area has {n} cells)")
    tree, m = cKDTree(pts), min(n, k + 9)  # room for a ring of cells tied with the k-th
    while True:
        dist, idx = tree.query(pts, k=m)
        # runs of equal distances in each row, numbered: cells of one run are sorted by id
        group = np.concatenate([np.zeros((n, 1), dtype=np.int64),
                                np.cumsum(np.diff(dist, axis=1) > TIE, axis=1)], axis=1)
        if m == n or (group[:, -1] > group[:, k]).all():  # every run reaching the k-th is complete
            break
        m = min(n, 2 * m)
    idx = np.take_along_axis(idx, np.lexsort((idx, group), axis=1), axis=1).astype(np.int64)
    # drop each cell itself: distance 0, so in each row's first run, which the m queried cover whole
    return idx[idx != np.arange(n)[:, None]].reshape(n, m - 1)[:, :k]


def stencil_weights(lat: np.ndarray, lon: np.ndarray, index: np.ndarray, channels: int) -> np.ndarray:
    """Starting weights (channels, n, k) on the neighbours' positions: channel 0 the mean difference, 1 the east
    gradient and 2 the north gradient per degree (least squares over each cell's neighbours, east distances shrunk by
    cos(latitude)), further channels zero."""
    lat, lon = np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)
    index = np.asarray(index, dtype=np.int64)
    n, k = index.shape
    dx = ((lon[index] - lon[:n, None] + 180.0) % 360.0 - 180.0) * np.cos(np.radians(lat[:n]))[:, None]
    dy = lat[index] - lat[:n, None]
    out = np.zeros((channels, n, k))
    out[0] = 1.0 / k
    for c, d in ((1, dx), (2, dy)):
        if c < channels:
            norm = (d ** 2).sum(axis=1, keepdims=True)
            out[c] = np.divide(d, norm, out=np.zeros_like(d), where=norm > 0)
    return out.astype(np.float32)


def mix_gather(x: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(C, n, M): ``out[c, i] = sum_k weight[c, i, k] * x[index[i, k]]`` for x (n_src, M): A x."""
    return torch.einsum("nkm,cnk->cnm", x[index], weight)


def dense_from(index: torch.Tensor, weight: torch.Tensor, n_src: int) -> torch.Tensor:
    """The dense (C, n, n_src) relation holding ``weight`` at the ``index`` positions, zero elsewhere."""
    c, n, k = weight.shape
    return weight.new_zeros(c, n, n_src).scatter(2, index.unsqueeze(0).expand(c, n, k), weight)


class NeighbourMix(nn.Module):
    """The learned relation: ``forward(x_src)`` (n_src, M) -> (channels, n, M), each channel
    ``sum_j A[i, j] (x_j - x_i)``, where the first n sources are the cells themselves. ``index`` (n, k) lists each
    cell's neighbours among the ``n_src`` source cells (the cells themselves, or, in a shard, its own cells followed
    by halo rows). ``weight`` (channels, n, k) gives the starting weights (``stencil_weights``; default: the mean
    difference in every channel). ``kind='dense'`` learns all n x n_src weights, starting from the same values (zero
    off the neighbour lists), so the two variants begin as the same model."""

    def __init__(self, index: np.ndarray, n_src: int, channels: int = 3, kind: str = "sparse",
                 weight: np.ndarray | None = None):
        super().__init__()  # kind and channels: checked by RegionConfig.validate, the one caller's config
        index = np.asarray(index, dtype=np.int64)
        if index.ndim != 2 or index.size == 0 or index.min() < 0 or index.max() >= n_src or index.shape[0] > n_src:
            raise ConfigError(f"neighbour index of shape {index.shape} must be (cells, k) with values in 0..{n_src - 1}")
        self.kind, self.n_src = kind, int(n_src)
        n, k = index.shape
        self.register_buffer("index", torch.from_numpy(index), persistent=False)
        if weight is None:
            start = torch.full((channels, n, k), 1.0 / k)
        else:
            start = torch.as_tensor(np.asarray(weight, dtype=np.float32))
            if tuple(start.shape) != (channels, n, k):
                raise ConfigError(f"starting weights of shape {tuple(start.shape)}; expected {(channels, n, k)}")
        self.weight = nn.Parameter(dense_from(self.index, start, self.n_src) if kind == "dense" else start)

    @property
    def channels(self) -> int:
        return int(self.weight.shape[0])

    def product(self, x_src: torch.Tensor) -> torch.Tensor:
        """A x_src (channels, n, M), by this relation's kind."""
        if x_src.shape[0] != self.n_src:
            raise ConfigError(f"the mix expects {self.n_src} source cells; got {x_src.shape[0]}")
        if self.kind == "dense":
            return torch.matmul(self.weight, x_src)
        return mix_gather(x_src, self.index, self.weight)

    def forward(self, x_src: torch.Tensor) -> torch.Tensor:
        n = self.weight.shape[1]
        return self.product(x_src) - self.weight.sum(dim=2, keepdim=True) * x_src[:n]

    def for_samples(self, src: torch.Tensor, own: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
        """The same mix for samples of single cells: ``src`` (batch, window, S, M) each sample's sources (its k
        neighbours, or every cell for the dense relation), ``own`` (batch, window, M) its own values, ``cells``
        (batch,) its cell -> (batch, window, channels * M), channel-major as in an area batch."""
        w = self.weight[:, cells]  # (channels, batch, S): the sample's row of the relation
        mixed = torch.einsum("bwsm,cbs->bwcm", src, w) - w.sum(dim=2).T[:, None, :, None] * own[:, :, None, :]
        return mixed.reshape(*mixed.shape[:2], -1)

    def extra_repr(self) -> str:
        c, n = self.weight.shape[:2]
        return f"kind={self.kind}, channels={c}, cells={n}, sources={self.n_src}"
