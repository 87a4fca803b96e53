"""Training and per-cell evaluation of the region forecaster, and its skill map (``grid.plot_skill_map`` draws it).

Every step takes a batch of time windows, each holding all cells, and minimises the mean squared error
over windows, cells and lead hours (scaled units). The weights with the best validation RMSE are kept.
Scores are in kelvin, per cell, beside persistence and climatology on the same target hours.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import torch
import xarray as xr

from ..device import resolve_device
from ..errors import ConfigError
from ..models import count_parameters
from .data import RegionData
from .grid import BASELINES, to_map
from .model import RegionConfig, RegionForecaster, region_model


@dataclass(frozen=True)
class RegionTrainConfig:
    """How the region forecaster is trained."""

    epochs: int = 5
    steps_per_epoch: int | None = None  # None: every training window once per epoch
    batch_size: int = 16  # time windows per step; each holds every cell of the area
    lr: float = 4e-3
    clip: float | None = 1.0  # max global gradient norm (None: no clipping)
    seed: int = 0
    device: str = "cpu"  # 'cpu' or 'cuda'
    eval_batch: int = 64  # windows per forward pass when predicting

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "eval_batch"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name}={v!r} must be a whole number >= 1")
        if self.steps_per_epoch is not None and (not isinstance(self.steps_per_epoch, (int, np.integer))
                                                 or self.steps_per_epoch < 1):
            raise ConfigError(f"steps_per_epoch={self.steps_per_epoch!r} must be a whole number >= 1 or None")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ConfigError(f"lr={self.lr!r} must be a positive number")
        if self.clip is not None and not self.clip > 0:
            raise ConfigError(f"clip={self.clip!r} must be a positive number or None")
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device={self.device!r} is not one of ('cpu', 'cuda')")
        resolve_device(self.device)  # cuda without a usable GPU: the project's one message


@dataclass
class FitResult:
    """A trained model with its per-epoch history."""

    model: RegionForecaster
    history: list[dict] = field(default_factory=list)  # epoch, train_loss, val_rmse_k, seconds
    best_epoch: int = 0
    train_s: float = 0.0


def _epoch_ids(rng: np.random.Generator, n: int, steps: int, batch: int) -> np.ndarray:
    """(steps, batch) sample ids: shuffled passes over the ``n`` training windows, one after another."""
    need = steps * batch
    ids = np.concatenate([rng.permutation(n) for _ in range(-(-need // n))])[:need]
    return ids.reshape(steps, batch)


def fit(data: RegionData, model: RegionForecaster, cfg: RegionTrainConfig = RegionTrainConfig(),
        on_epoch: Callable[[dict], None] | None = None) -> FitResult:
    """Train ``model`` on ``data``'s training windows with Adam; keep the weights of the best validation RMSE.

    ``on_epoch`` is called with each epoch's history entry as it finishes (for progress lines)."""
    cfg.validate()
    dev = torch.device(cfg.device)
    model = model.to(dev)
    static = torch.from_numpy(data.static).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    rng = np.random.default_rng(cfg.seed)
    n_train = data.sizes()["train"]
    batch = min(cfg.batch_size, n_train)
    steps = cfg.steps_per_epoch or math.ceil(n_train / batch)
    result = FitResult(model)
    best, best_state = math.inf, None
    start = time.perf_counter()
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        total = 0.0
        for ids in _epoch_ids(rng, n_train, steps, batch):
            x, y = (t.to(dev) for t in data.batch("train", ids))
            loss = torch.nn.functional.mse_loss(model(x, static), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            total += float(loss.detach())
        val = _rmse(predict(data, model, "val", cfg), data.truth("val"))
        result.history.append({"epoch": epoch, "train_loss": total / steps, "val_rmse_k": val,
                                "seconds": time.perf_counter() - t0})
        if on_epoch is not None:
            on_epoch(result.history[-1])
        if val < best:
            best, best_state, result.best_epoch = val, copy.deepcopy(model.state_dict()), epoch
    result.train_s = time.perf_counter() - start
    if best_state is not None:
        model.load_state_dict(best_state)
    return result


@torch.no_grad()
def predict(data: RegionData, model: RegionForecaster, split: str = "test",
            cfg: RegionTrainConfig = RegionTrainConfig()) -> np.ndarray:
    """(samples, cells, horizon) forecasts of ``split`` in kelvin."""
    dev = next(model.parameters()).device
    static = torch.from_numpy(data.static).to(dev)
    was_training = model.training
    model.eval()
    n = data.sizes()[split]
    out = []
    for lo in range(0, n, cfg.eval_batch):
        x, _ = data.batch(split, np.arange(lo, min(n, lo + cfg.eval_batch)))
        out.append(model(x.to(dev), static).float().cpu().numpy())
    model.train(was_training)
    return data.to_kelvin(np.concatenate(out))


def _rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred, np.float64) - truth) ** 2)))


def cell_rmse(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(cells,) RMSE over samples and lead hours of (samples, cells, horizon) arrays."""
    return np.sqrt(np.mean((np.asarray(pred, np.float64) - truth) ** 2, axis=(0, 2)))


def skill_map(data: RegionData, forecasts: dict[str, np.ndarray], split: str = "test") -> xr.Dataset:
    """Per-cell RMSE (kelvin) of each forecast and of persistence and climatology, as (lat, lon) maps.

    ``forecasts`` maps a name to (samples, cells, horizon) kelvin forecasts of ``split``. The Dataset's
    variables are the names (baselines included); ``attrs`` hold each one's RMSE pooled over all cells.
    """
    truth = data.truth(split)
    preds = {**forecasts, "persistence": data.persistence(split), "climatology": data.climatology(split)}
    for name, p in preds.items():
        if np.shape(p) != truth.shape:
            raise ConfigError(f"forecast {name!r} has shape {np.shape(p)}; {split} needs {truth.shape}")
    maps = to_map({name: cell_rmse(p, truth) for name, p in preds.items()}, data.grid,
                  attrs={f"pooled_rmse_{name}": _rmse(p, truth) for name, p in preds.items()})
    maps.attrs.update(split=split, lead_hours=data.config.lead_hours, units="K")
    return maps


def skill_table(maps: xr.Dataset, reference: str = "persistence") -> pd.DataFrame:
    """One row per forecast: mean over cells of the per-cell RMSE, pooled RMSE, and the share of cells
    where it beats ``reference``."""
    ref = maps[reference].values
    rows = []
    for name in maps.data_vars:
        v = maps[name].values
        rows.append({"forecast": name, "mean_cell_rmse_k": float(v.mean()),
                     "pooled_rmse_k": float(maps.attrs.get(f"pooled_rmse_{name}", np.nan)),
                     f"cells_better_than_{reference}": float((v < ref).mean())})
    return pd.DataFrame(rows).set_index("forecast")


def compare(data: RegionData, variants: dict[str, RegionConfig], cfg: RegionTrainConfig = RegionTrainConfig(),
            split: str = "test", on_epoch: Callable[[str, dict], None] | None = None
            ) -> tuple[pd.DataFrame, xr.Dataset, dict[str, FitResult]]:
    """Train each named ``RegionConfig`` on ``data`` (same seed, same batches) and score them per cell.
    ``on_epoch(name, entry)`` reports each finished epoch.

    Returns the table (``skill_table`` plus parameters, training seconds and best epoch per model), the
    maps (``skill_map``) and the fits.
    """
    fits, forecasts = {}, {}
    for name, mcfg in variants.items():
        if name in BASELINES:
            raise ConfigError(f"model name {name!r} is taken by a baseline; choose another")
        report = None if on_epoch is None else (lambda entry, name=name: on_epoch(name, entry))
        fits[name] = fit(data, region_model(mcfg, data.grid, seed=cfg.seed), cfg, report)
        forecasts[name] = predict(data, fits[name].model, split, cfg)
    maps = skill_map(data, forecasts, split)
    table = skill_table(maps)
    for name, f in fits.items():
        table.loc[name, "parameters"] = count_parameters(f.model)
        table.loc[name, "train_s"] = round(f.train_s, 2)
        table.loc[name, "best_epoch"] = f.best_epoch
    return table, maps, fits
