"""The embedded ERA5 sample: a small synthetic Zarr store in the ARCO-ERA5 layout (``arco_layout``), with
``2m_temperature`` (K) and ``surface_pressure`` (Pa), so everything runs offline through the cloud store's code
path. Outputs and records say its data are synthetic. The values are meant to be as hard for persistence as real
mid-latitude hourly 2 m temperature (issue 14: on a real ERA5 month at five British Isles points, 1 h persistence
was about 0.8 K, 24 h 2.0-2.5 K, climatology about 2.4 K), so a model that fails on real data fails here too.
Besides seasonal and diurnal cycles by latitude and local solar time, the weather (``weather``) has
- air masses and fronts: regimes lasting days, changing by cold fronts (several kelvin within an hour or two)
  or slower warm fronts, with a cloud band and a pressure trough, travelling east-south-east so that
  neighbouring cells see them minutes apart and cells 4 degrees south hours later;
- cloud cover by air mass: overcast days have a nearly flat diurnal cycle, clear days the full one;
- travelling synoptic waves with periods of 2-7 days, whose amplitudes wax and wane;
- mesoscale weather coherent over about a degree: local anomalies, passing cloud, and afternoon showers
  (frequent in the tropics, in mid-latitudes mostly in summer) that cool within the hour;
- a sea east of 281.125E (``weather.COAST_LON``; the default store's three easternmost columns; the column next
  to the coast is half land) where the air follows the water: small diurnal cycle, damped and late seasonal
  cycle, air masses arriving slowly and weakened (issue 24: at a real ocean point, 1 h persistence was 0.10 K,
  6 h 0.40 K, 24 h 0.90 K; at 35N 281.75E here 0.08, 0.43 and 0.79 K). There a model trained on all points at
  once can lose to persistence while winning on the pooled figures.
Mid-latitude weather is stronger and more frequent than tropical; all of it is deterministic for a seed, and
the land cells are the same whether or not a store reaches the sea.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from . import weather
from .arco_layout import VARIABLE_ATTRS, built_store, store_problem, write_store  # noqa: F401 (its check re-exported)

SAMPLE_NAME = "sample-era5-v3.zarr"  # v2: fronts, cloudy days and showers (issue 14); v3: a strip of sea (issue 24)
GRID = 0.25  # degrees, as in ARCO-ERA5
VARIABLES = tuple(VARIABLE_ATTRS)  # 2m_temperature, surface_pressure
DEFAULT_LAT = (41.0, 19.0)   # north, south: a box around 40N and 20N
DEFAULT_LON = (279.0, 281.75)  # west, east: land around 280E, sea from 281.25E (weather.COAST_LON)
SEA_POINT = (35.0, 281.75)  # an ocean-like point of the default store (small, smooth hourly changes)
TIMES = ("2020-01-01T00", "2021-06-30T23")  # the default store's first and last hour (its valid range)


def _grid(start: str, end: str, lat: Sequence[float], lon: Sequence[float]
          ) -> tuple[pd.DatetimeIndex, np.ndarray, np.ndarray]:
    """Check the requested extent and snap it onto the 0.25 degree ARCO grid: the hours, the latitudes
    (descending) and the longitudes (ascending in 0..360), float32."""
    try:
        times = pd.date_range(pd.Timestamp(start), pd.Timestamp(end), freq="h")
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"sample time range {start!r}..{end!r} is not a pair of ISO times: {exc}") from None
    if len(times) < 2:
        raise ConfigError(f"sample time range {start!r}..{end!r} must span at least two hours")
    north, south = (float(v) for v in lat)
    west, east = (float(v) % 360.0 for v in lon)
    if not (-90 <= south < north <= 90):
        raise ConfigError(f"sample lat=(north, south) must satisfy -90 <= south < north <= 90, got {tuple(lat)}")
    if not west < east:
        raise ConfigError(f"sample lon=(west, east) must increase within 0..360, got {tuple(lon)}")
    n_lat, n_lon = int(round((north - south) / GRID)) + 1, int(round((east - west) / GRID)) + 1
    north, west = round(north / GRID) * GRID, round(west / GRID) * GRID
    lat_v, lon_v = north - GRID * np.arange(n_lat), west + GRID * np.arange(n_lon)
    return times, lat_v.astype(np.float32), lon_v.astype(np.float32)


def write_sample(path: str | os.PathLike, *, start: str = TIMES[0], end: str = TIMES[1],
                 lat: Sequence[float] = DEFAULT_LAT, lon: Sequence[float] = DEFAULT_LON,
                 variables: Sequence[str] | None = None, seed: int = 0, blocksize: int = 0) -> Path:
    """Write a deterministic synthetic store in the ARCO-ERA5 layout at ``path`` (which must not exist yet; for
    atomicity write through ``paths.atomic_path``) and return it. ``lat`` is (north, south) and ``lon`` (west,
    east) in degrees, snapped to the 0.25 degree grid. ``blocksize``: Blosc's block size in bytes; 0 lets Blosc
    choose, as for the public store (small blocks make a small store's chunks hold many blocks, as the public
    store's 4 MB chunks do)."""
    variables = tuple(variables) if variables is not None else VARIABLES
    if (unknown := [v for v in variables if v not in VARIABLES]) or not variables:
        raise ConfigError(f"sample variables {list(unknown) or '[]'} not available; choose from {list(VARIABLES)}")
    times, lat_v, lon_v = _grid(start, end, lat, lon)
    path = Path(path)
    if path.exists():
        raise ConfigError(f"{path} already exists; write_sample only creates new stores")
    fields = weather.fields(times, lat_v, lon_v, seed)
    attrs = {"title": "lstmnb synthetic ERA5 sample (ARCO-ERA5 layout; NOT real data)", "lstmnb_sample_seed": int(seed)}
    return write_store(path, times, lat_v, lon_v, {name: fields[name] for name in variables}, attrs,
                       blocksize=blocksize, marker={"seed": seed, "variables": list(variables)})


def sample_store() -> Path:
    """Return the embedded sample store, building it into the user cache (atomically) when it is not
    there, unfinished or damaged (``arco_layout.built_store``)."""
    return built_store(SAMPLE_NAME, write_sample, "the sample store (synthetic)")
