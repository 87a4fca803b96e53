"""A box of grid cells: its grid, and its data as one series per cell.

``lstmnb.data.extract`` returns a box as (time, latitude, longitude), and a box across the prime meridian
with its columns in west-to-east order (longitude 358 ... 359.75, 0 ... 2). ``box_to_points`` turns such
a box into the point layout (time, point) that ``lstmnb.windows.windows_from_dataset`` windows, so the
point model trains on all cells at once as one global model; with ``coords_as_inputs`` the cell's
latitude and longitude become inputs too, so the shared model can tell the cells apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..data import point_label
from ..errors import ConfigError, DataError


def unwrap_lon(lon: np.ndarray) -> np.ndarray:
    """Longitudes in degrees east, continuous from the first one on (358, 359.75, 0 -> 358, 359.75, 360).

    A box across the prime meridian keeps its west-to-east order but jumps from 359.75 to 0; as an input
    feature, or for distances along the row, the jump would look like half the globe.
    """
    lon = np.asarray(lon, dtype=np.float64)
    if lon.size == 0:
        return lon
    return lon[0] + np.mod(lon - lon[0], 360.0)


@dataclass(frozen=True)
class Grid:
    """The cells of a box: ``lat`` (ny,) and ``lon`` (nx,) as stored; cell ``r * nx + c`` is row r, column c."""

    lat: np.ndarray
    lon: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.lat.size), int(self.lon.size)

    @property
    def n_cells(self) -> int:
        return int(self.lat.size * self.lon.size)

    @property
    def cell_lat(self) -> np.ndarray:
        """Latitude of every cell (n_cells,), row-major."""
        return np.repeat(np.asarray(self.lat, dtype=np.float64), self.lon.size)

    @property
    def cell_lon(self) -> np.ndarray:
        """Longitude of every cell (n_cells,), row-major, unwrapped across the prime meridian."""
        return np.tile(unwrap_lon(self.lon), self.lat.size)

    def cell_rows(self) -> np.ndarray:
        """The grid row of every cell (n_cells,)."""
        return np.repeat(np.arange(self.lat.size), self.lon.size)

    def band(self, row0: int, row1: int) -> np.ndarray:
        """Cell ids of rows ``row0 .. row1 - 1`` (a contiguous range, row-major)."""
        if not 0 <= row0 <= row1 <= self.lat.size:
            raise ConfigError(f"rows {row0}..{row1} are outside the grid's 0..{self.lat.size}")
        nx = self.lon.size
        return np.arange(row0 * nx, row1 * nx)

    @classmethod
    def square(cls, ny: int, nx: int | None = None, *, lat0: float = 60.0, lon0: float = 0.0,
               step: float = 0.25) -> "Grid":
        """A synthetic ``ny`` x ``nx`` grid on the 0.25 degree lattice (latitude descending), for benchmarks."""
        nx = ny if nx is None else nx
        for name, v in (("ny", ny), ("nx", nx)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name}={v!r} must be a whole number of cells >= 1")
        if lat0 - step * (ny - 1) < -90 or lat0 > 90:
            raise ConfigError(f"a grid of {ny} rows from latitude {lat0} leaves -90..90")
        return cls(lat0 - step * np.arange(ny), (lon0 + step * np.arange(nx)) % 360.0)


def _check_box(ds: xr.Dataset) -> None:
    if "latitude" not in ds.dims or "longitude" not in ds.dims or "time" not in ds.dims:
        raise DataError(f"a box needs dims time, latitude, longitude; got dims {dict(ds.sizes)}")
    if not ds.data_vars:
        raise DataError("the box holds no variables")


def grid_of(ds: xr.Dataset) -> Grid:
    """The grid of a box Dataset from ``lstmnb.data.extract`` (dims time, latitude, longitude)."""
    _check_box(ds)
    return Grid(ds["latitude"].values.astype(np.float64), ds["longitude"].values.astype(np.float64))


def box_to_points(ds: xr.Dataset, *, coords_as_inputs: bool = False) -> xr.Dataset:
    """A box (time, latitude, longitude) as one series per cell (time, point), cells in row-major order.

    Coordinates per point: its label (as ``lstmnb.data`` names points), latitude and longitude (as
    stored), and its grid ``row`` and ``col``. With ``coords_as_inputs``, data variables
    ``cell_latitude`` and ``cell_longitude`` (longitude unwrapped across the prime meridian) repeat
    each cell's coordinates at every hour, so windows carry them as inputs.
    """
    _check_box(ds)
    grid = grid_of(ds)
    ny, nx = grid.shape
    data_vars = {}
    for name, var in ds.data_vars.items():
        if set(var.dims) != {"time", "latitude", "longitude"}:
            raise DataError(f"variable {name!r} has dims {var.dims}; a box variable needs (time, latitude, longitude)")
        values = var.transpose("time", "latitude", "longitude").values.reshape(ds.sizes["time"], ny * nx)
        data_vars[name] = (("time", "point"), values, dict(var.attrs))
    if coords_as_inputs:
        nt = ds.sizes["time"]
        for name, v in (("cell_latitude", grid.cell_lat), ("cell_longitude", grid.cell_lon)):
            if name in data_vars:
                raise DataError(f"the box already holds a variable named {name!r}")
            data_vars[name] = (("time", "point"), np.broadcast_to(v.astype(np.float32), (nt, v.size)).copy(),
                               {"units": "degrees"})
    lat, lon = grid.cell_lat, np.tile(grid.lon, ny)
    coords = {
        "time": ds["time"].values,
        "point": ("point", [point_label(a, b) for a, b in zip(lat, lon)]),
        "latitude": ("point", lat.astype(np.float32)),
        "longitude": ("point", lon.astype(np.float32)),
        "row": ("point", grid.cell_rows()),
        "col": ("point", np.tile(np.arange(nx), ny)),
    }
    out = xr.Dataset(data_vars, coords=coords, attrs=dict(ds.attrs))
    out.attrs["selection"] = "points"
    out.attrs["box_shape"] = f"{ny}x{nx}"
    return out


def to_map(values: dict[str, np.ndarray], grid: Grid, *, attrs: dict | None = None) -> xr.Dataset:
    """Per-cell values (each (n_cells,), row-major) as a Dataset of (latitude, longitude) maps."""
    ny, nx = grid.shape
    data_vars = {}
    for name, v in values.items():
        v = np.asarray(v)
        if v.shape != (grid.n_cells,):
            raise DataError(f"{name!r} has shape {v.shape}; a map of this grid needs ({grid.n_cells},)")
        data_vars[name] = (("latitude", "longitude"), v.reshape(ny, nx))
    return xr.Dataset(data_vars, coords={"latitude": grid.lat, "longitude": grid.lon}, attrs=dict(attrs or {}))


def grid_of_points(points: xr.Dataset) -> Grid:
    """The grid of a box turned into points by ``box_to_points`` (from its ``row``/``col`` coordinates)."""
    if "row" not in points.coords or "col" not in points.coords:
        raise DataError("these points carry no grid rows and columns; make them with box_to_points")
    rows, cols = points["row"].values, points["col"].values
    ny, nx = int(rows.max()) + 1, int(cols.max()) + 1
    if rows.size != ny * nx:
        raise DataError(f"{rows.size} points do not fill a {ny} x {nx} grid")
    lat, lon = np.empty(ny), np.empty(nx)
    lat[rows] = points["latitude"].values
    lon[cols] = points["longitude"].values
    return Grid(lat, lon)


def point_skill_map(points: xr.Dataset, windows, pred_scaled: np.ndarray, split: str = "test") -> xr.Dataset:
    """Per-cell RMSE (K) of a point-pipeline forecast for a box turned into points, as (lat, lon) maps.

    ``windows`` is ``lstmnb.windows.windows_from_dataset(points, ...)`` and ``pred_scaled`` the model's
    (samples, horizon) output for ``split`` in scaled units. Persistence (the last input value) and
    climatology (each cell's hour-of-day x day-of-year mean of the training part) are scored on the
    same target hours; ``attrs`` hold each one's RMSE pooled over all cells.
    """
    import pandas as pd

    from ..windows import climatology_table

    grid = grid_of_points(points)
    cfg = windows.config
    pidx = np.asarray(windows.point_index[split], dtype=np.int64)
    truth = windows.to_kelvin(windows.y[split])
    pred = windows.to_kelvin(np.asarray(pred_scaled).reshape(truth.shape))
    persistence = np.repeat(windows.to_kelvin(windows.x[split][:, -1, 0])[:, None], cfg.horizon, axis=1)
    raw = points[cfg.target].transpose("time", "point").values.astype(np.float64)
    times = pd.DatetimeIndex(points["time"].values)
    t0, t1 = (pd.Timestamp(t) for t in windows.split_times["train"])
    train = (times >= t0) & (times <= t1)
    target_times = pd.DatetimeIndex(windows.target_times[split])
    climatology = np.empty_like(truth)
    for p in range(grid.n_cells):
        sel = np.nonzero(pidx == p)[0]
        tt = pd.DatetimeIndex((target_times[sel].values[:, None]
                               + np.arange(cfg.horizon) * np.timedelta64(1, "h")).reshape(-1))
        table = climatology_table(raw[train, p], times[train])
        climatology[sel] = table[tt.day_of_year.to_numpy() - 1, tt.hour.to_numpy()].reshape(sel.size, cfg.horizon)
    counts = np.bincount(pidx, minlength=grid.n_cells) * cfg.horizon
    values, pooled = {}, {}
    for name, p in (("model", pred), ("persistence", persistence), ("climatology", climatology)):
        sq = ((p - truth) ** 2).sum(axis=1)
        values[name] = np.sqrt(np.bincount(pidx, weights=sq, minlength=grid.n_cells) / np.maximum(counts, 1))
        pooled[f"pooled_rmse_{name}"] = float(np.sqrt(sq.sum() / counts.sum()))
    return to_map(values, grid, attrs={**pooled, "split": split, "lead_hours": cfg.lead_hours, "units": "K"})
