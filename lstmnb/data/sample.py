"""The embedded ERA5 sample: a small synthetic Zarr store in exactly the ARCO-ERA5 layout.

Everything in lstmnb runs offline against this store, through the same ``open_zarr`` -> tidy series
code path as the cloud store. The values are synthetic but are meant to be as hard for persistence as
real mid-latitude hourly 2 m temperature (issue 14: on a real ERA5 month at five British Isles points,
1 h persistence was about 0.8 K, 24 h persistence 2.0-2.5 K, climatology about 2.4 K), so that a model
that fails on real data fails here too. Besides seasonal and diurnal cycles that depend on latitude
and local solar time, the weather has
- air masses and fronts: regimes lasting days whose changes are cold fronts (several kelvin within an
  hour or two) or slower warm fronts, with a cloud band and a pressure trough, travelling east-south-east
  across the area so that neighbouring cells see them minutes apart and cells 4 degrees south hours later;
- cloud cover that comes with the air mass: overcast days have a nearly flat diurnal cycle, clear days
  the full one;
- travelling synoptic waves with periods of 2-7 days, whose amplitudes wax and wane;
- mesoscale weather, coherent over about a degree: smooth local anomalies, passing cloud, and showers
  in the afternoon (frequent in the tropics, in mid-latitudes mostly in summer) that cool within the hour;
- a sea east of 281.125E (``weather.COAST_LON``; the default store's three easternmost columns), where
  the air follows the water: a small diurnal cycle, a damped and late seasonal cycle, and air masses that
  arrive slowly and weakened, so hourly changes are small and smooth (issue 24: at a real ocean point,
  1 h persistence was 0.10 K, 6 h 0.40 K, 24 h 0.90 K; at 35N 281.75E here 0.08, 0.43 and 0.79 K). The
  column next to the coast is half land, half sea. It is where a model trained on all points at once can
  lose to persistence while winning on the pooled figures.
Mid-latitude weather is stronger and more frequent than tropical; all of it is deterministic for a seed.
The land cells are the same whether or not a store reaches the sea.

Layout copied from the public store: variables named ``2m_temperature`` (K) and ``surface_pressure``
(Pa) with dims (time, latitude, longitude); latitude descending and longitude in 0..360 on the
0.25 degree grid (float32); time hourly, encoded as int64 hours since 1900-01-01; one time step per
chunk, Blosc-LZ4 with byte shuffle (zarr format 2), consolidated metadata; ``valid_time_start`` and
``valid_time_stop`` dataset attributes.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..paths import CACHE_ENV, atomic_path, cache_dir, sweep_stale_temps
from . import weather

SAMPLE_NAME = "sample-era5-v3.zarr"  # v2: fronts, cloudy days and showers (issue 14); v3: a strip of sea (issue 24)
GRID = 0.25  # degrees, as in ARCO-ERA5
VARIABLES = ("2m_temperature", "surface_pressure")
DEFAULT_LAT = (41.0, 19.0)   # north, south: a box around 40N and 20N
DEFAULT_LON = (279.0, 281.75)  # west, east: land around 280E, sea from 281.25E (weather.COAST_LON)
SEA_POINT = (35.0, 281.75)  # an ocean-like point of the default store (small, smooth hourly changes)
TIMES = ("2020-01-01T00", "2021-06-30T23")  # the default store's first and last hour (its valid range)
_ATTRS = {
    "2m_temperature": {"long_name": "2 metre temperature", "short_name": "t2m", "units": "K"},
    "surface_pressure": {"long_name": "Surface pressure", "short_name": "sp", "units": "Pa"},
}
_DONE = ".lstmnb-sample-complete"


@dataclass(frozen=True)
class _Grid:
    times: pd.DatetimeIndex
    lat: np.ndarray  # descending, float32
    lon: np.ndarray  # ascending in 0..360, float32


def _grid(start: str, end: str, lat: Sequence[float], lon: Sequence[float]) -> _Grid:
    """Check the requested extent and snap it onto the 0.25 degree ARCO grid."""
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
    n_lat = int(round((north - south) / GRID)) + 1
    n_lon = int(round((east - west) / GRID)) + 1
    north = round(north / GRID) * GRID
    west = round(west / GRID) * GRID
    lat_v = (north - GRID * np.arange(n_lat)).astype(np.float32)
    lon_v = (west + GRID * np.arange(n_lon)).astype(np.float32)
    return _Grid(times, lat_v, lon_v)


def write_sample(
    path: str | os.PathLike,
    *,
    start: str = TIMES[0],
    end: str = TIMES[1],
    lat: Sequence[float] = DEFAULT_LAT,
    lon: Sequence[float] = DEFAULT_LON,
    variables: Sequence[str] | None = None,
    seed: int = 0,
    blocksize: int = 0,
) -> Path:
    """Write a deterministic synthetic store in the ARCO-ERA5 layout at ``path`` and return it.

    ``lat`` is (north, south) and ``lon`` (west, east) in degrees, snapped to the 0.25 degree grid.
    ``blocksize``: Blosc's block size in bytes; 0 lets Blosc choose, as for the public store (small
    blocks make a small store's chunks hold many blocks, as the public store's 4 MB chunks do).
    ``path`` must not exist yet; callers wanting atomicity write through ``paths.atomic_path``.
    """
    import numcodecs
    import xarray as xr
    import zarr

    variables = tuple(variables) if variables is not None else VARIABLES
    unknown = [v for v in variables if v not in VARIABLES]
    if unknown or not variables:
        raise ConfigError(f"sample variables {list(unknown) or '[]'} not available; choose from {list(VARIABLES)}")
    grid = _grid(start, end, lat, lon)
    path = Path(path)
    if path.exists():
        raise ConfigError(f"{path} already exists; write_sample only creates new stores")
    fields = weather.fields(grid, seed)

    coords = xr.Dataset(coords={"time": grid.times, "latitude": grid.lat, "longitude": grid.lon})
    coords["latitude"].attrs.update(long_name="latitude", units="degrees_north")
    coords["longitude"].attrs.update(long_name="longitude", units="degrees_east")
    coords.attrs.update(
        valid_time_start=grid.times[0].strftime("%Y-%m-%d"),
        valid_time_stop=grid.times[-1].strftime("%Y-%m-%d"),
        title="lstmnb synthetic ERA5 sample (ARCO-ERA5 layout; NOT real data)",
        lstmnb_sample_seed=int(seed),
    )
    encoding = {"time": {"units": "hours since 1900-01-01", "calendar": "proleptic_gregorian", "dtype": "int64"}}
    coords.to_zarr(path, zarr_format=2, consolidated=False, encoding=encoding, mode="w-")

    compressor = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=blocksize)
    group = zarr.open_group(path, mode="r+", zarr_format=2)
    nt, ny, nx = len(grid.times), len(grid.lat), len(grid.lon)
    for name in variables:
        arr = group.create_array(
            name, shape=(nt, ny, nx), chunks=(1, ny, nx), dtype="float32", fill_value=np.nan,
            compressors=compressor, chunk_key_encoding={"name": "v2", "separator": "."},
        )
        arr.attrs.update({**_ATTRS[name], "_ARRAY_DIMENSIONS": ["time", "latitude", "longitude"]})
        # Write the chunk files directly: zarr's per-chunk machinery takes ~10 s for 13k chunks,
        # plain file writes take well under one. Keys follow the v2 layout: "<t>.0.0".
        data = np.ascontiguousarray(fields[name])
        var_dir = path / name
        for t in range(nt):
            (var_dir / f"{t}.0.0").write_bytes(compressor.encode(data[t]))
    zarr.consolidate_metadata(path, zarr_format=2)
    # the completion marker, written last, lists every file with its size and CRC32: a store that lost,
    # cut or changed a file since is found out before anything reads it (``store_problem``)
    (path / _DONE).write_text(json.dumps({"seed": seed, "variables": list(variables), "files": _files(path)}))
    return path


def _files(path: Path) -> dict[str, list[int]]:
    """Every file of the store below ``path`` (but the marker) with its [size in bytes, CRC32 of its content].

    Reading all of them costs about twice what their sizes alone do (measured on the default store's
    26,272 files with a warm page cache: 0.7 s against 0.3 s; benchmarks/integrity_cost.py)."""
    out: dict[str, list[int]] = {}
    for root, _, names in os.walk(path):
        rel = os.path.relpath(root, path)
        for name in names:
            key = name if rel == "." else f"{rel}/{name}"
            if key == _DONE:
                continue
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                out[key] = [size, zlib.crc32(os.read(fd, size))]
            finally:
                os.close(fd)
    return out


def store_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with the sample store at ``path`` (None: finished and intact): missing, unfinished,
    or files missing, or of another size or content (CRC32) than when it was written (checked against
    its marker)."""
    path = Path(path)
    if not path.is_dir():
        return "not built yet"
    try:
        marker = json.loads((path / _DONE).read_text())
    except (OSError, ValueError):
        return "unfinished (no completion marker)"
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, list) for v in files.values()):
        return "made by an older lstmnb (no file list with checksums to check it against)"
    have = _files(path)
    missing = sorted(k for k in files if k not in have)
    changed = sorted(k for k, want in files.items() if k in have and have[k] != want)
    if not missing and not changed:
        return None
    parts = [f"{len(missing)} file(s) missing ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})"] \
        if missing else []
    if changed:
        parts.append(f"{len(changed)} file(s) cut or changed, by size or checksum ({', '.join(changed[:3])}"
                     f"{', ...' if len(changed) > 3 else ''})")
    return "; ".join(parts)


def is_complete(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a finished, intact sample store (see ``store_problem``)."""
    return store_problem(path) is None


def sample_store(rebuild: bool = False) -> Path:
    """Return the embedded sample store, building it into the user cache (atomically) when it is not
    there, unfinished or damaged; a damaged one is rebuilt with a note on stderr (it is synthetic and
    deterministic, so the rebuilt store is the same). Temporaries of killed builds are removed."""
    root = cache_dir()
    sweep_stale_temps(root, final=SAMPLE_NAME)
    target = root / SAMPLE_NAME
    if not rebuild and _intact(target):
        return target
    with _build_lock(root):
        problem = None if rebuild else store_problem(target)
        if problem is None and not rebuild:  # another process built it while this one waited
            return target
        if problem is not None and target.exists():
            print(f"lstmnb: rebuilding the sample store {target} ({problem}); it is synthetic and "
                  f"deterministic, so the data are the same (10-30 s)", file=sys.stderr)
        try:
            with atomic_path(target) as tmp:
                write_sample(tmp)
        except OSError as exc:
            raise DataError(f"cannot build the sample store in {root}: {exc.strerror or exc}; free some space "
                            f"there or point {CACHE_ENV} at another folder") from None
    return target


def _intact(target: Path) -> bool:
    """``store_problem`` is None, checked once per process for a store whose folders are unchanged (a
    deleted or added file changes its folder's mtime; the check reads ~26,000 files: 0.7 s when they are
    in the page cache)."""
    try:
        key = (str(target), tuple(os.stat(d).st_mtime_ns for d in (target, *(p for p in target.iterdir() if p.is_dir()))))
    except OSError:
        return False
    if key not in _INTACT:
        if store_problem(target) is not None:
            return False
        _INTACT.add(key)
    return True


_INTACT: set[tuple] = set()  # stores found intact in this process (a memo, not a switch)


@contextmanager
def _build_lock(root: Path) -> Iterator[None]:
    """One builder at a time per cache folder (other processes wait, then find it built)."""
    fd = os.open(root / f".{SAMPLE_NAME}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
