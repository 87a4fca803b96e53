"""A region's series as model-ready windows over time: every sample holds all cells at once.

The rules are the point pipeline's (``lstmnb.windows``): chronological train / validation / test parts,
each windowed on its own (a sample belongs to the part of its target hours, and no window crosses a
part boundary), scaling statistics from the training part only (pooled over cells, one mean and std
per variable), metrics in kelvin, persistence and climatology (the training part's hour-of-day x
day-of-year mean, per cell) scored on exactly the same target hours as the model.

Windows are never materialised: a batch gathers its hours from the (time, cells, features) array, so a
10,080-cell area costs its series once, not once per window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import xarray as xr

from ..errors import ConfigError, DataError
from ..windows import SPLITS, Scaler, WindowConfig, climatology_table, scored_ranges, series_array, split_parts
from .grid import Grid, grid_of


@dataclass
class RegionData:
    """Scaled inputs of every cell and hour, the samples of each split, and the per-cell baselines."""

    config: WindowConfig
    grid: Grid
    times: pd.DatetimeIndex
    values: np.ndarray  # (time, cells, features) float32, scaled
    target_k: np.ndarray  # (time, cells) float64, the target in kelvin
    scaler: Scaler
    bounds: dict[str, slice]
    last_input: dict[str, np.ndarray]  # split -> (samples,) time index of each sample's last input hour
    static: np.ndarray  # (cells, n_static) float32, scaled cell coordinates (or (cells, 0))
    features: list[str]

    @property
    def n_cells(self) -> int:
        return int(self.values.shape[1])

    @property
    def n_features(self) -> int:
        return int(self.values.shape[2])

    @property
    def n_static(self) -> int:
        return int(self.static.shape[1])

    def sizes(self) -> dict[str, int]:
        return {s: int(self.last_input[s].size) for s in SPLITS}

    def target_index(self, split: str) -> np.ndarray:
        """(samples, horizon) time index of each sample's target hours."""
        c = self.config
        return self.last_input[split][:, None] + c.lead_hours + np.arange(c.horizon)[None, :]

    def batch(self, split: str, ids: np.ndarray | None = None, cells: np.ndarray | slice = slice(None)
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (batch, window, cells, features) and scaled targets (batch, cells, horizon) of samples
        ``ids`` of ``split`` (all when None), for ``cells`` (all by default)."""
        last = self.last_input[split] if ids is None else self.last_input[split][np.asarray(ids)]
        hours = last[:, None] + np.arange(1 - self.config.window, 1)[None, :]
        x = self.values[hours][:, :, cells]  # (b, window, cells, f)
        y = self.values[last[:, None] + self.config.lead_hours + np.arange(self.config.horizon)][:, :, cells, 0]
        return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y.transpose(0, 2, 1)))

    def to_kelvin(self, y_scaled: np.ndarray) -> np.ndarray:
        return self.scaler.inverse(y_scaled, feature=0)

    def truth(self, split: str) -> np.ndarray:
        """(samples, cells, horizon) target in kelvin."""
        return self.target_k[self.target_index(split)].transpose(0, 2, 1)

    def persistence(self, split: str) -> np.ndarray:
        """(samples, cells, horizon): the last observed value, for every lead."""
        last = self.target_k[self.last_input[split]]  # (samples, cells)
        return np.repeat(last[:, :, None], self.config.horizon, axis=2)

    def climatology(self, split: str) -> np.ndarray:
        """(samples, cells, horizon): each cell's hour-of-day x day-of-year mean of the training part."""
        train = self.bounds["train"]
        t_train = self.times[train]
        tt = self.times[self.target_index(split).reshape(-1)]
        doy, hour = tt.day_of_year.to_numpy() - 1, tt.hour.to_numpy()
        out = np.empty((doy.size, self.n_cells))
        for cell in range(self.n_cells):
            out[:, cell] = climatology_table(self.target_k[train, cell], t_train)[doy, hour]
        return out.reshape(-1, self.config.horizon, self.n_cells).transpose(0, 2, 1)


def _last_inputs(bounds: dict[str, slice], config: WindowConfig) -> dict[str, np.ndarray]:
    """The last input hour of every sample, per split, by the point pipeline's rule (a sample belongs to the
    split holding its target hours; its inputs may reach into the part before: ``windows.scored_ranges``)."""
    ranges = scored_ranges([bounds[name] for name in SPLITS], config)
    return {name: np.arange(lo, hi) - config.lead_hours for name, (lo, hi) in zip(SPLITS, ranges)}


def region_data(values: np.ndarray, times, grid: Grid, config: WindowConfig = WindowConfig(), *,
                features: list[str] | None = None, coords_as_inputs: bool = True) -> RegionData:
    """Split, scale and index a (time, cells) or (time, cells, variables) array in kelvin (variable 0 is
    the target). With ``coords_as_inputs`` each cell's latitude and longitude (scaled over the area) are
    static inputs."""
    config.validate()
    if config.calendar:
        raise ConfigError("calendar inputs are not offered for regions yet; set calendar=False")
    if np.ndim(values) not in (2, 3) or np.shape(values)[1] != grid.n_cells:
        raise DataError(f"values must be (time, {grid.n_cells} cells[, variables]); got shape {np.shape(values)}")
    v, times = series_array(values, times)
    bounds = dict(zip(SPLITS, split_parts(times, config)))
    last = _last_inputs(bounds, config)
    scaler = Scaler.fit(v[bounds["train"]].reshape(-1, v.shape[2]))
    scaled = scaler.transform(v).astype(np.float32)
    if coords_as_inputs:
        coords = np.stack([grid.cell_lat, grid.cell_lon], axis=1)
        spread = coords.std(axis=0)
        static = ((coords - coords.mean(axis=0)) / np.where(spread > 0, spread, 1.0)).astype(np.float32)
    else:
        static = np.zeros((grid.n_cells, 0), dtype=np.float32)
    names = list(features) if features is not None else [config.target] + [f"var{i}" for i in range(1, v.shape[2])]
    return RegionData(config, grid, times, scaled, v[:, :, 0], scaler, bounds, last, static, names)


def region_data_from_box(ds: xr.Dataset, config: WindowConfig = WindowConfig(), *,
                         coords_as_inputs: bool = True) -> RegionData:
    """``region_data`` for a box Dataset from ``lstmnb.data.extract`` (dims time, latitude, longitude)."""
    grid = grid_of(ds)
    if config.target not in ds.data_vars:
        raise ConfigError(f"target variable {config.target!r} is not in the data; it has {sorted(ds.data_vars)}")
    names = [config.target] + [v for v in ds.data_vars if v != config.target]
    nt = ds.sizes["time"]
    if nt == 0:
        raise DataError("the selection is empty: no hours in the requested time range")
    arr = np.stack([ds[n].transpose("time", "latitude", "longitude").values.reshape(nt, grid.n_cells)
                    for n in names], axis=-1)
    return region_data(arr, ds["time"].values, grid, config, features=names, coords_as_inputs=coords_as_inputs)
