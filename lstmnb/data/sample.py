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
  in the afternoon (frequent in the tropics, in mid-latitudes mostly in summer) that cool within the hour.
Mid-latitude weather is stronger and more frequent than tropical; all of it is deterministic for a seed.

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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..paths import CACHE_ENV, atomic_path, cache_dir, sweep_stale_temps

SAMPLE_NAME = "sample-era5-v2.zarr"  # v2: weather with fronts, cloudy days and showers (issue 14)
GRID = 0.25  # degrees, as in ARCO-ERA5
VARIABLES = ("2m_temperature", "surface_pressure")
DEFAULT_LAT = (41.0, 19.0)   # north, south: a box around 40N and 20N
DEFAULT_LON = (279.0, 281.0)  # west, east, around 280E
_ATTRS = {
    "2m_temperature": {"long_name": "2 metre temperature", "short_name": "t2m", "units": "K"},
    "surface_pressure": {"long_name": "Surface pressure", "short_name": "sp", "units": "Pa"},
}
_DONE = ".lstmnb-sample-complete"
_KM_PER_DEG = 111.2
_TRACK_DT = 0.25  # hours: time step of the air-mass tracks, which each cell reads with its own delay


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


def _smooth_noise(rng: np.random.Generator, n_time: int, shape: tuple[int, ...], tau_hours: float,
                  smooth_hours: float = 0.0) -> np.ndarray:
    """Unit-variance red noise along axis 0 (e-folding ``tau_hours``), low-passed once more over
    ``smooth_hours``: smooth from hour to hour, as temperature is, rather than kinked like a random walk."""
    phi = np.exp(-1.0 / tau_hours)
    psi = np.exp(-1.0 / smooth_hours) if smooth_hours > 0 else 0.0
    shocks = rng.standard_normal((n_time, *shape)) * np.sqrt(1.0 - phi**2)
    out = np.empty((n_time, *shape))
    x = rng.standard_normal(shape)
    y = x.copy()
    for t in range(n_time):  # sequential by nature; vectorised over the series, so fast enough
        x = phi * x + shocks[t]
        y = psi * y + (1.0 - psi) * x
        out[t] = y
    return out / max(float(out.std()), 1e-12)


def _step(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(x))


def _regime_track(rng: np.random.Generator, t0: float, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The weather of one air-mass track at its reference point on ``n`` steps of ``_TRACK_DT`` hours
    from hour ``t0``: temperature anomaly (unit variance), cloudiness (a unit-variance index; positive is
    overcast), pressure troughs.

    Regimes last days (gamma distributed, mean 60 h) with independent temperature levels; a change to a
    colder one is a cold front (tanh width about 1 h: most of the drop within two hours), to a warmer one
    a warm front (width 3-8 h). Each regime has its own cloud cover, mostly clear or mostly overcast; the
    clouds arrive a few hours before the front, with a cloud band and a pressure trough at the front.
    (Tracks are blended between latitudes; cloudiness is blended as an index, not as a cover fraction,
    so that averaging two tracks does not turn clear and overcast days into half-cloudy ones.)
    """
    t = t0 + _TRACK_DT * np.arange(n)
    gaps = rng.gamma(2.5, 24.0, size=int(n * _TRACK_DT / 30) + 10)
    t_k = t0 + np.cumsum(gaps)
    t_k = t_k[t_k < t[-1]]
    k = len(t_k)
    level = rng.standard_normal(k + 1)
    cover = rng.standard_normal(k + 1)
    d_level, d_cover = np.diff(level), np.diff(cover)
    width = np.where(d_level < 0, rng.uniform(0.7, 1.5, k), rng.uniform(3.0, 8.0, k))
    anom, cloud = np.full(n, level[0]), np.full(n, cover[0])
    band, trough = np.zeros(n), np.zeros(n)
    half = int(60 / _TRACK_DT)  # each front is shaped within +-60 h; beyond, it is a plain step
    for j in range(k):
        c = int((t_k[j] - t0) / _TRACK_DT)
        lo, hi = max(c - half, 0), min(c + half, n)
        anom[hi:] += d_level[j]
        cloud[hi:] += d_cover[j]
        s = t[lo:hi] - t_k[j]
        anom[lo:hi] += d_level[j] * _step(s / width[j])
        cloud[lo:hi] += d_cover[j] * _step((s + 4.0) / 3.0)
        band[lo:hi] += np.abs(d_level[j]) * np.exp(-0.5 * ((s + 2.0) / 4.0) ** 2)
        trough[lo:hi] -= np.abs(d_level[j]) * np.exp(-0.5 * (s / 14.0) ** 2)
    return anom, cloud + band, trough


def _showers(rng: np.random.Generator, hours: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Rain-cooled air (K, <= 0) at (time, lat, lon) nodes: afternoon showers that cool within the hour
    and recover over about three hours; frequent in the tropics, in mid-latitudes mostly in summer."""
    lat2, lon2 = np.meshgrid(lat, lon, indexing="ij")
    mid = np.clip((lat2 - 19.0) / 21.0, 0.0, 1.0)
    summer = _summer(hours)[:, None, None]
    solar = (hours[:, None, None] % 24.0 + lon2[None] / 15.0) % 24.0
    rate = (0.04 * (1 - mid) + 0.03 * mid * (1 + summer) / 2) * np.exp(-0.5 * ((solar - 15.0) / 2.5) ** 2)
    shape = (hours.size, *lat2.shape)
    drop = np.where(rng.random(shape) < rate, rng.exponential(0.8 + 0.7 * mid, shape), 0.0)
    out = np.empty(shape)
    y = np.zeros(lat2.shape)
    for t in range(hours.size):
        y = 0.7 * y + drop[t]
        out[t] = -y
    return out


def _interp_matrix(nodes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Linear interpolation from ascending ``nodes`` to ``values`` as a (values, nodes) matrix."""
    m = np.zeros((values.size, nodes.size))
    i = np.clip(np.searchsorted(nodes, values) - 1, 0, nodes.size - 2)
    f = (values - nodes[i]) / (nodes[i + 1] - nodes[i])
    m[np.arange(values.size), i] = 1 - f
    m[np.arange(values.size), i + 1] = f
    return m


def _summer(hours: np.ndarray) -> np.ndarray:
    """-1 in late January, +1 in late July (hours since 2000-01-01)."""
    season = 2 * np.pi * ((hours / 24.0) % 365.2425) / 365.2425
    return -np.cos(season - 2 * np.pi * 20 / 365.2425)


def _weather(hours: np.ndarray, lat: np.ndarray, lon: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """(time, cells) float32 weather: fronts, cloudiness, troughs, waves, mesoscale anomalies, showers."""
    lat2, lon2 = np.meshgrid(lat.astype(np.float64), lon.astype(np.float64), indexing="ij")
    lat_f, lon_f = lat2.ravel(), lon2.ravel()
    nt, nc = hours.size, lat_f.size
    rng = np.random.default_rng([seed, 1])
    out = {k: np.zeros((nt, nc), np.float32) for k in ("front", "cloud", "trough")}

    # air-mass tracks every 10 degrees of latitude, blended with Gaussian weights (5 degrees) that keep
    # unit variance; each moves east-south-east to south-east at its own speed, and a cell reads it with
    # its own delay
    centres = np.arange(-80.0, 81.0, 10.0)
    w = np.exp(-0.5 * ((lat_f[None, :] - centres[:, None]) / 5.0) ** 2)
    w /= np.sqrt((w**2).sum(axis=0))
    x_km = (lon_f - lon_f.mean()) * _KM_PER_DEG * np.cos(np.deg2rad(lat_f))
    per_hour = int(round(1 / _TRACK_DT))
    for j, centre in enumerate(centres):
        near = np.flatnonzero(w[j] > 1e-3)  # cells run latitude by latitude, so these are contiguous
        if near.size == 0:
            continue
        cells = slice(near[0], near[-1] + 1)
        r = np.random.default_rng([seed, 2, j])
        heading = np.deg2rad(r.uniform(-45.0, -15.0))
        speed = r.uniform(25.0, 45.0)  # km/h
        delay = (x_km[cells] * np.cos(heading) + (lat_f[cells] - centre) * _KM_PER_DEG * np.sin(heading)) / speed
        shift = np.rint(delay / _TRACK_DT).astype(np.int64)
        lag = shift.max() - shift  # steps from the track's start to what the cell sees at the first hour
        n = (nt - 1) * per_hour + int(lag.max()) + 1
        tracks = _regime_track(r, hours[0] - shift.max() * _TRACK_DT, n)
        for name, track in zip(("front", "cloud", "trough"), tracks):
            # hour t of a cell is the track's step t * per_hour + lag: a strided view, then one gather
            view = np.lib.stride_tricks.as_strided(
                track.astype(np.float32), shape=(nt, int(lag.max()) + 1),
                strides=(per_hour * 4, 4), writeable=False)
            out[name][:, cells] += view[:, lag] * w[j, cells].astype(np.float32)

    # travelling synoptic waves, periods 2-7 days, amplitudes waxing and waning over days
    n_waves = 8
    period = rng.uniform(48.0, 168.0, n_waves)
    wavenumber = 2 * np.pi / rng.uniform(2500.0, 6000.0, n_waves)  # per km
    heading = np.deg2rad(rng.uniform(-30.0, 30.0, n_waves))
    x, y = lon_f * _KM_PER_DEG * np.cos(np.deg2rad(lat_f)), lat_f * _KM_PER_DEG
    theta = wavenumber[:, None] * (np.cos(heading)[:, None] * x + np.sin(heading)[:, None] * y)
    theta += rng.uniform(0, 2 * np.pi, n_waves)[:, None]
    omega_t = 2 * np.pi * hours[:, None] / period[None, :]
    env = _smooth_noise(rng, nt, (n_waves,), 120.0) * np.sqrt(2.0 / n_waves)
    out["waves"] = ((env * np.cos(omega_t)) @ np.cos(theta) + (env * np.sin(omega_t)) @ np.sin(theta)).astype(np.float32)

    # mesoscale weather on 1-degree nodes, interpolated to the cells (coherent over about a degree)
    lat_n = np.arange(np.floor(lat_f.min()) - 1, np.ceil(lat_f.max()) + 2, 1.0)
    lon_n = np.arange(np.floor(lon_f.min()) - 1, np.ceil(lon_f.max()) + 2, 1.0)
    nodes = np.stack([_smooth_noise(rng, nt, (lat_n.size, lon_n.size), 4.0, 2.0),  # local anomalies
                      _smooth_noise(rng, nt, (lat_n.size, lon_n.size), 6.0, 1.5),  # passing cloud
                      _showers(rng, hours, lat_n, lon_n)]).astype(np.float32)  # (3, time, lat_n, lon_n)
    my = _interp_matrix(lat_n, lat.astype(np.float64)).astype(np.float32)
    mx = _interp_matrix(lon_n, lon.astype(np.float64)).astype(np.float32)
    # two plain matrix products (longitude, then latitude), each over one long axis
    along_lon = (nodes.reshape(-1, lon_n.size) @ mx.T).reshape(3 * nt, lat_n.size, lon.size)
    along_lat = my @ along_lon.transpose(1, 0, 2).reshape(lat_n.size, -1)  # (lat, 3 * time * lon)
    meso = along_lat.reshape(lat.size, 3, nt, lon.size).transpose(1, 2, 0, 3).reshape(3, nt, nc)
    for k in range(2):  # interpolation lowers the variance between nodes; each cell back to unit variance
        meso[k] /= meso[k].std(axis=0) + 1e-12
    out["meso"], out["meso_cloud"], out["showers"] = meso
    return out


def _fields(grid: _Grid, seed: int) -> dict[str, np.ndarray]:
    """Synthesize (time, lat, lon) float32 fields of 2 m temperature (K) and surface pressure (Pa)."""
    hours = np.asarray((grid.times - pd.Timestamp("2000-01-01")) / pd.Timedelta(hours=1), dtype=np.float64)
    lat2, lon2 = np.meshgrid(grid.lat.astype(np.float64), grid.lon.astype(np.float64), indexing="ij")
    lat_f, lon_f = lat2.ravel().astype(np.float32), lon2.ravel().astype(np.float32)
    wx = _weather(hours, grid.lat, grid.lon, seed)
    rng = np.random.default_rng([seed, 3])
    mid = np.clip((lat_f - 19.0) / 21.0, 0.0, 1.0)  # 0 in the tropics, 1 at 40N and beyond
    summer = _summer(hours).astype(np.float32)[:, None]
    solar = ((hours[:, None] % 24.0 + lon_f[None, :] / 15.0) % 24.0).astype(np.float32)  # local solar time

    # climate that depends on latitude: warmer, less seasonal and calmer towards the tropics
    t_mean = 302.0 - 0.0112 * lat_f**2
    a_season = 0.6 + 0.0075 * lat_f**2
    a_clear = 2.8 + 3.6 * mid  # diurnal amplitude under a clear sky
    cloud = 1.0 / (1.0 + np.exp(-2.5 * (wx["cloud"] + 0.5 * wx["meso_cloud"])))  # cover, 0..1
    diurnal = np.cos(2 * np.pi / 24 * (solar - 15.0)) + 0.25 * np.cos(4 * np.pi / 24 * (solar - 13.0))
    t2m = a_clear * (1.0 + 0.2 * summer) * (1.0 - 0.8 * cloud) * diurnal  # overcast: a flat day
    t2m += (1.0 - 0.2 * summer) * ((0.6 + 2.0 * mid) * wx["front"] + (0.4 + 1.2 * mid) * wx["waves"])
    t2m += (0.3 + 0.25 * mid) * wx["meso"] + wx["showers"]
    t2m += 0.05 * rng.standard_normal(t2m.shape, dtype=np.float32) + t_mean + a_season * summer
    sp = 101300.0 + 700.0 * np.exp(-(((lat_f - 32.0) / 9.0) ** 2)) + 90.0 * np.cos(4 * np.pi / 24 * (solar - 10.0))
    sp -= (300.0 + 600.0 * mid) * wx["trough"] + (150.0 + 300.0 * mid) * wx["waves"] - 40.0 * wx["meso"]

    shape = (len(grid.times), len(grid.lat), len(grid.lon))
    # ERA5 values come from 16-bit GRIB packing; quantising likewise keeps the chunks compressible.
    return {
        "2m_temperature": (np.round(t2m * 512.0) / 512.0).astype(np.float32).reshape(shape),
        "surface_pressure": (np.round(sp * 8.0) / 8.0).astype(np.float32).reshape(shape),
    }


def write_sample(
    path: str | os.PathLike,
    *,
    start: str = "2020-01-01T00",
    end: str = "2021-06-30T23",
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
    fields = _fields(grid, seed)

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
    # the completion marker, written last, lists every file with its size: a store that lost or cut a
    # file since is found out before anything reads it (``store_problem``)
    (path / _DONE).write_text(json.dumps({"seed": seed, "variables": list(variables), "files": _files(path)}))
    return path


def _files(path: Path) -> dict[str, int]:
    """Every file of the store below ``path`` (but the marker) with its size in bytes."""
    out: dict[str, int] = {}
    for root, _, names in os.walk(path):
        rel = os.path.relpath(root, path)
        for name in names:
            key = name if rel == "." else f"{rel}/{name}"
            if key != _DONE:
                out[key] = os.stat(os.path.join(root, name)).st_size
    return out


def store_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with the sample store at ``path`` (None: finished and intact): missing, unfinished,
    or files missing or of another size than when it was written (checked against its marker)."""
    path = Path(path)
    if not path.is_dir():
        return "not built yet"
    try:
        marker = json.loads((path / _DONE).read_text())
    except (OSError, ValueError):
        return "unfinished (no completion marker)"
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        return "made by an older lstmnb (no file list to check it against)"
    have = _files(path)
    missing = sorted(k for k in marker["files"] if k not in have)
    changed = sorted(k for k, size in marker["files"].items() if k in have and have[k] != size)
    if not missing and not changed:
        return None
    parts = [f"{len(missing)} file(s) missing ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})"] \
        if missing else []
    if changed:
        parts.append(f"{len(changed)} file(s) cut or changed ({', '.join(changed[:3])}"
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
    deleted or added file changes its folder's mtime; the check reads ~26,000 file sizes)."""
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
