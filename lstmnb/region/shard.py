"""The region split over DDP ranks (started, and the runs recorded, by ``lstmnb.experiments.region`` through
``training.parallel.spawn``), in two modes that both give the one-process loss.

``tiles``: rank r owns a band of grid rows (``bands``: its cells' series only), their rows of the relation and the loss
on them. Every step each rank sends the others the rows of its batch their halos (neighbours in other bands) need,
point-to-point and all posted at once, and stacks its cells and the halo received into the mix's source. Reading the
halo from the store would do for a mix of inputs, but the exchange keeps each rank to its own cells, as a mix of hidden
states would need. Only a sparse relation (or none) tiles: a dense row reaches every cell.

``windows``: every rank holds the whole area and model and takes its share of each batch's windows. Either way each rank
divides its squared-error sum by the area's global count, so summing the shared weights' gradients (LSTM, head; in
``windows`` all) over ranks gives exactly the one-process gradient, the relation's rows (each owned by one tiles rank)
need no reduction, and Adam, weight by weight, makes each rank's update the one-process one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from ..machine.device import off_the_gpu
from ..errors import ConfigError
from ..rules import PYTHON, Spelling, check_fields, choice, ruled, whole
from .bands import AreaPart
from .data import RegionData
from .grid import Grid
from .model import RegionConfig, RegionForecaster, region_model

MODES = ("tiles", "windows")


@dataclass(frozen=True)
class Tile:
    """One rank's band: its cells, its mix's source cells (own first, then halo) and the halo traffic."""

    rank: int
    rows: tuple[int, int]  # grid rows row0 .. row1 - 1
    cells: np.ndarray  # global ids of its cells
    sources: np.ndarray  # global ids of the mix's source cells: cells, then halo grouped by owner rank
    index: np.ndarray | None  # (cells, k) neighbour positions in ``sources``
    recv: dict[int, np.ndarray] = field(default_factory=dict)  # owner rank -> halo cells it sends here
    send: dict[int, np.ndarray] = field(default_factory=dict)  # rank -> own cells that rank needs


def plan_tiles(grid: Grid, index: np.ndarray | None, world_size: int) -> list[Tile]:
    """Split ``grid`` into ``world_size`` bands of rows (sizes differ by at most one) and work out each band's halo
    from the global neighbour ``index`` (cells, k), or no halo when it is None."""
    ny, nx = grid.shape
    if not isinstance(world_size, (int, np.integer)) or not 1 <= world_size <= ny:
        raise ConfigError(f"world_size={world_size!r} must be a whole number in 1..{ny} (one band of rows per rank)")
    bands = np.array_split(np.arange(ny), world_size)
    owner = np.repeat(np.arange(world_size), [b.size * nx for b in bands])
    tiles = []
    for rank, rows in enumerate(bands):
        cells = grid.band(int(rows[0]), int(rows[-1]) + 1)
        recv: dict[int, np.ndarray] = {}
        sources, local = cells, None
        if index is not None:
            needed = np.unique(index[cells])
            halo = needed[owner[needed] != rank]
            recv = {int(r): halo[owner[halo] == r] for r in np.unique(owner[halo])}
            sources = np.concatenate([cells, *recv.values()]) if recv else cells
            where = np.full(grid.n_cells, -1, dtype=np.int64)
            where[sources] = np.arange(sources.size)
            local = where[index[cells]]
        tiles.append(Tile(rank, (int(rows[0]), int(rows[-1]) + 1), cells, sources, local, recv))
    for t in tiles:  # what each rank sends is what the others receive from it
        t.send.update({other.rank: other.recv[t.rank] for other in tiles if t.rank in other.recv})
    return tiles


def exchange_halo(x_own: torch.Tensor, tile: Tile) -> torch.Tensor:
    """The mix's source (batch, window, sources, features): this rank's cells, then the halo rows received from their
    owners; this rank's cells that others need are sent at the same time."""
    if not tile.send and not tile.recv:
        return x_own
    ops, bufs = [], []
    for dst, cells in tile.send.items():  # a band's cells are a contiguous range of ids (Grid.band)
        ops.append(dist.P2POp(dist.isend, x_own[:, :, torch.from_numpy(cells - tile.cells[0])].contiguous(), dst))
    for src, cells in tile.recv.items():
        bufs.append(x_own.new_empty(x_own.shape[0], x_own.shape[1], cells.size, x_own.shape[3]))
        ops.append(dist.P2POp(dist.irecv, bufs[-1], src))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return torch.cat([x_own, *bufs], dim=2)


def local_model(full: RegionForecaster, tile: Tile) -> RegionForecaster:
    """The part of ``full`` one band needs: the shared weights and its cells' rows of the relation (sparse, or none:
    ``check_sharded`` refuses to tile a dense one)."""
    part = RegionForecaster(full.config, tile.index, tile.sources.size if full.config.neighbours else None)
    part.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith("mix.")}, strict=False)
    if part.mix is not None:
        with torch.no_grad():
            part.mix.weight.copy_(full.mix.weight[:, torch.from_numpy(tile.cells)])
    return part


@dataclass(frozen=True)
class ShardConfig:
    """A sharded training run: ``steps`` Adam steps on batches of ``batch_size`` windows."""

    mode: str = ruled("tiles", choice(MODES))
    world_size: int = ruled(2, whole(1))
    steps: int = ruled(3, whole(1))
    batch_size: int = ruled(8, whole(1))
    lr: float = 4e-3
    clip: float | None = 1.0
    seed: int = 0
    timeout_s: float = 120.0  # a collective waiting longer fails instead of hanging

    def validate(self, say: Spelling = PYTHON) -> None:
        check_fields(self, say)
        if self.mode == "windows" and self.batch_size < self.world_size:
            raise say.refuse("batch_size", self.batch_size, f"gives some of {say('world_size', self.world_size)} "
                             "ranks no window")


def train_steps(data: RegionData | AreaPart, model_cfg: RegionConfig, cfg: ShardConfig, rank: int = 0,
                world: int = 1) -> dict:
    """This rank's part of ``cfg.steps`` training steps (the whole run when ``world`` is 1), on the whole area's
    ``RegionData`` or on the ``AreaPart`` a rank holds (its band's cells for tiles). Every rank draws the same
    batches. Returns the area's loss after each step (identical on all ranks), the median seconds per step (the
    first, warm-up step left out when there are more) and the bytes this rank sent per step."""
    full = region_model(model_cfg, data.grid, seed=cfg.seed)
    index = full.mix.index.numpy() if full.mix is not None else None
    tile = plan_tiles(data.grid, index, world)[rank] if cfg.mode == "tiles" else None
    model = local_model(full, tile) if tile is not None and world > 1 else full
    local = model.local_parameters() if cfg.mode == "tiles" else []
    shared = model.shared_parameters() if local else list(model.parameters())
    opt = off_the_gpu(torch.optim.Adam(model.parameters(), lr=cfg.lr), next(model.parameters()).device)
    rng = np.random.default_rng(cfg.seed)
    batch = min(cfg.batch_size, data.sizes()["train"])
    count = batch * data.n_cells * model_cfg.horizon  # the global number of squared errors
    losses, times, sent = [], [], 0
    for _ in range(cfg.steps):
        ids = rng.choice(data.sizes()["train"], size=batch, replace=False)
        t0 = time.perf_counter()
        if cfg.mode == "windows":
            x, y = data.batch("train", ids[rank::world])
            pred = model(x)
        else:
            x, y = data.batch("train", ids, cells=tile.cells)
            weather = x[..., :model_cfg.n_mixed]  # all the mix reads: halos carry no calendar inputs
            x_src = exchange_halo(weather.contiguous(), tile) if world > 1 else None
            sent = sum(c.size for c in tile.send.values()) * weather[:, :, :1].numel() * x.element_size()
            pred = model(x, x_src)
        loss = ((pred - y) ** 2).sum() / count
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in shared])
            dist.all_reduce(flat)
            for p, summed in zip(shared, flat.split([p.numel() for p in shared])):
                p.grad.copy_(summed.view_as(p))
        if cfg.clip is not None:  # the global gradient norm, as clip_grad_norm_ on one process sees it
            local_sq = sum(((p.grad ** 2).sum() for p in local), torch.zeros(()))
            if local and world > 1:
                dist.all_reduce(local_sq)
            norm = torch.sqrt(local_sq + sum((p.grad ** 2).sum() for p in shared))
            scale = torch.clamp(cfg.clip / (norm + 1e-6), max=1.0)
            for p in model.parameters():
                p.grad.mul_(scale)
        opt.step()
        total = loss.detach().clone()
        if world > 1:
            dist.all_reduce(total)
        losses.append(float(total))
        times.append(time.perf_counter() - t0)
    return {"losses": losses, "step_s": float(np.median(times[1:] if len(times) > 1 else times)),
            "bytes_sent_per_step": int(sent), "cells": int(tile.cells.size) if tile is not None else data.n_cells}


def check_sharded(data: RegionData, model_cfg: RegionConfig, cfg: ShardConfig, say: Spelling = PYTHON) -> None:
    """What a sharded run needs, checked before any rank starts: the configs, and for tiles a sparse relation (or
    none) and one band of rows per rank; a refusal names the settings as ``say`` spells them."""
    cfg.validate(say)
    model_cfg.validate()
    if cfg.mode == "tiles":
        if model_cfg.neighbours and model_cfg.relation != "sparse":
            raise ConfigError("tiles need relation='sparse' (or neighbours=0): a dense row reaches every cell")
        plan_tiles(data.grid, None, cfg.world_size)
    elif min(cfg.batch_size, data.sizes()["train"]) < cfg.world_size:
        raise ConfigError(f"{say('world_size', cfg.world_size)}: the training part holds {data.sizes()['train']} "
                          "window(s), so some ranks would get none; use fewer ranks or a longer time range")
