"""A box of grid cells: its grid, and its data as one series per cell.

``lstmnb.data.extract`` returns a box as (time, latitude, longitude), a box across the prime meridian with its
columns in west-to-east order (longitude 358 ... 359.75, 0 ... 2). ``box_to_points`` turns it into the point layout
(time, point) that ``lstmnb.windows.windows_from_dataset`` windows, so the point model trains on all cells at once as
one global model (``coords_as_inputs``: with each cell's latitude and longitude as inputs, so the shared model can
tell the cells apart). Per-cell scores become (latitude, longitude) maps (``to_map``; ``record_maps`` from a box
run's record; ``maps`` draws them), and cells are placed along the direction the weather moves (``flow_halves``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from ..data import point_label
from ..datasets.weather import KM_PER_DEG
from ..errors import ConfigError, DataError

BASELINES = ("persistence", "climatology")  # the names the per-cell maps give the baselines
COORD_FEATURES = ("cell_latitude", "cell_longitude")  # the inputs box_to_points adds with coords_as_inputs


def unwrap_lon(lon: np.ndarray) -> np.ndarray:
    """Longitudes in degrees east, continuous from the first one on (358, 359.75, 0 -> 358, 359.75, 360): as an
    input feature, or for distances along the row, a box's jump from 359.75 to 0 would look like half the globe."""
    lon = np.asarray(lon, dtype=np.float64)
    return lon if lon.size == 0 else lon[0] + np.mod(lon - lon[0], 360.0)


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

    def band(self, row0: int, row1: int) -> np.ndarray:
        """Cell ids of rows ``row0 .. row1 - 1`` (a contiguous range, row-major)."""
        if not 0 <= row0 <= row1 <= self.lat.size:
            raise ConfigError(f"rows {row0}..{row1} are outside the grid's 0..{self.lat.size}")
        return np.arange(row0 * self.lon.size, row1 * self.lon.size)

    @staticmethod
    def square_limits(lat0: float = 60.0, step: float = 0.25) -> tuple[int, int]:
        """The most rows (from ``lat0`` down to -90) and columns (once round the globe) ``square`` makes."""
        return int(np.floor((lat0 + 90) / step + 1e-9)) + 1, int(np.floor(360 / step + 1e-9))

    @classmethod
    def square(cls, ny: int, nx: int | None = None, *, lat0: float = 60.0, lon0: float = 0.0,
               step: float = 0.25) -> "Grid":
        """A synthetic ``ny`` x ``nx`` grid on the 0.25 degree lattice (latitude descending), for benchmarks."""
        nx = ny if nx is None else nx
        for name, v in (("ny", ny), ("nx", nx)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name}={v!r} must be a whole number of cells >= 1")
        rows, cols = cls.square_limits(lat0, step)
        if ny > rows or lat0 > 90:
            raise ConfigError(f"a grid of {ny} rows from latitude {lat0} leaves -90..90")
        if nx > cols:
            raise ConfigError(f"a grid of {nx} columns of {step} degrees goes round the globe more than once "
                              f"(at most {cols})")
        return cls(lat0 - step * np.arange(ny), (lon0 + step * np.arange(nx)) % 360.0)


def grid_of(ds: xr.Dataset) -> Grid:
    """The grid of a box Dataset from ``lstmnb.data.extract`` (dims time, latitude, longitude)."""
    if not {"time", "latitude", "longitude"} <= set(ds.dims):
        raise DataError(f"a box needs dims time, latitude, longitude; got dims {dict(ds.sizes)}")
    if not ds.data_vars:
        raise DataError("the box holds no variables")
    return Grid(ds["latitude"].values.astype(np.float64), ds["longitude"].values.astype(np.float64))


def box_to_points(ds: xr.Dataset, *, coords_as_inputs: bool = False) -> xr.Dataset:
    """A box (time, latitude, longitude) as one series per cell (time, point), cells in row-major order. Coordinates
    per point: its label (as ``lstmnb.data`` names points), latitude and longitude (as stored), and its grid ``row``
    and ``col``. With ``coords_as_inputs``, data variables ``cell_latitude`` and ``cell_longitude`` (longitude
    unwrapped across the prime meridian) repeat each cell's coordinates at every hour, so windows carry them."""
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
        for name, v in zip(COORD_FEATURES, (grid.cell_lat, grid.cell_lon)):
            if name in data_vars:
                raise DataError(f"the box already holds a variable named {name!r}")
            data_vars[name] = (("time", "point"), np.broadcast_to(v.astype(np.float32), (nt, v.size)).copy(),
                               {"units": "degrees"})
    lat, lon = grid.cell_lat, np.tile(grid.lon, ny)
    coords = {"time": ds["time"].values, "point": ("point", [point_label(a, b) for a, b in zip(lat, lon)]),
              "latitude": ("point", lat.astype(np.float32)), "longitude": ("point", lon.astype(np.float32)),
              "row": ("point", np.repeat(np.arange(ny), nx)), "col": ("point", np.tile(np.arange(nx), ny))}
    return xr.Dataset(data_vars, coords=coords, attrs={**ds.attrs, "selection": "points", "box_shape": f"{ny}x{nx}"})


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


def record_maps(record: dict) -> xr.Dataset:
    """Per-cell test RMSE (K) of the model, persistence and climatology of a box run's record, as (lat, lon) maps:
    the record's ``skill`` rows (one per cell, row-major) on its ``data.grid``. ``attrs`` hold each one's RMSE pooled
    over all cells (weighted by each cell's targets), the lead and the test period (first .. last target day)."""
    data = record.get("data") or {}
    grid_info, rows = data.get("grid"), (record.get("skill") or {}).get("per_point")
    if not grid_info or not rows:
        raise DataError(f"run {record.get('run_id')} holds no per-cell scores: only a box run "
                        "(`lstmnb train --box ...`, `lstmnb region skill`) has a map")
    grid = Grid(*(np.asarray(grid_info[key], dtype=np.float64) for key in ("latitude", "longitude")))
    targets = np.array([r["targets"] for r in rows], dtype=np.float64)
    values, pooled = {}, {}
    for name in ("model", *BASELINES):
        values[name] = rmse = np.array([r[f"{name}_rmse_k"] for r in rows], dtype=np.float64)
        pooled[f"pooled_rmse_{name}"] = float(np.sqrt(np.sum(rmse ** 2 * targets) / targets.sum()))
    scored = (data.get("scored") or {}).get("test") or {}
    period = f"{str(scored['first'])[:10]} .. {str(scored['last'])[:10]}" if scored.get("first") else "test part"
    kind = data.get("kind") or ("synthetic" if data.get("source") == "sample" else None)
    return to_map(values, grid, attrs={**pooled, "split": "test", "units": "K", "period": period,
                                       "lead_hours": record["skill"].get("lead_hours"), "data_kind": kind})


def flow_position(grid: Grid, heading_deg: float) -> np.ndarray:
    """Each cell's distance (km, row-major) along the direction the weather moves (``heading_deg``, counter-clockwise
    from east), from the box's centre: low where the weather arrives first."""
    lat, lon = grid.cell_lat, grid.cell_lon
    east = (lon - lon.mean()) * KM_PER_DEG * np.cos(np.radians(lat))
    north = (lat - lat.mean()) * KM_PER_DEG
    h = np.radians(heading_deg)
    return east * np.cos(h) + north * np.sin(h)


def flow_halves(grid: Grid, heading_deg: float) -> np.ndarray:
    """'upstream' for the half of the cells the weather reaches first, 'downstream' for the half it reaches last
    (row-major; with an odd count the middle cell goes downstream). Upstream cells have few neighbours upwind inside
    the box: what their neighbours show has mostly passed them already."""
    order = np.argsort(flow_position(grid, heading_deg), kind="stable")
    out = np.full(grid.n_cells, "downstream", dtype=object)
    out[order[: grid.n_cells // 2]] = "upstream"
    return out
