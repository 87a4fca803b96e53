"""ERA5 access: the store catalogue, opening a store, request checks, and cached point/box extraction.

A request names a source (the embedded sample, a catalogue key, a ``gs://`` URL or a local Zarr path),
variables, points or a lat/lon box, and a time range. ``extract`` checks it against the store (valid
time range, known variables, latitudes, coverage), then reads the store's one-hour chunks concurrently,
taking every requested cell from each chunk read once, and keeps finished time blocks in a local,
self-verifying cache (``era5_cache``) so that a repeated, overlapping or interrupted request only
fetches what is missing. The store's metadata is cached beside the blocks (``StoreMeta``), so a
request whose blocks are all cached is checked and answered without reaching the store (offline).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from .errors import ConfigError, DataError, LstmnbError

if TYPE_CHECKING:
    from .era5_fetch import ChunkSource, FetchStats, RetryPolicy

CATALOGUE: dict[str, str] = {
    "arco-v3": "gs://gcp-public-data-arco-era5/ar/full_37-1h-0p25deg-chunk-1.zarr-v3",
    "arco-v2": "gs://gcp-public-data-arco-era5/ar/1959-2022-full_37-1h-0p25deg-chunk-1.zarr-v2",
}
SAMPLE = "sample"
DEFAULT_VARIABLE = "2m_temperature"
DEFAULT_POINTS: tuple[tuple[float, float], ...] = ((40.0, 280.0), (20.0, 280.0))
DEFAULT_START = "2020-01-01"
DEFAULT_END = "2021-06-30"  # inclusive: a date means through 23:00 of that day
SOURCE_HINT = "use --source sample, a catalogue name (" + ", ".join(CATALOGUE) + "), a gs:// URL or a local Zarr path"


@dataclass(frozen=True)
class Request:
    """What to extract. ``points`` are (lat, lon) with lon in -180..180 or 0..360;
    ``box`` is (lat_min, lat_max, lon_min, lon_max); give one of the two."""

    source: str = SAMPLE
    variables: tuple[str, ...] = (DEFAULT_VARIABLE,)
    points: tuple[tuple[float, float], ...] | None = DEFAULT_POINTS
    box: tuple[float, float, float, float] | None = None
    start: str = DEFAULT_START
    end: str = DEFAULT_END


# ----------------------------------------------------------------------------------------------- stores

@dataclass(frozen=True)
class StoreRef:
    """A resolved source: where it is, how to open it, and a stable id for the cache."""

    source: str
    url: str  # local absolute path or remote URL
    remote: bool
    storage_options: dict = field(default_factory=dict)

    @property
    def store_id(self) -> str:
        """Cache key: a readable name plus a hash of the location (and, locally, of the metadata file)."""
        name = self.url.rstrip("/").split("/")[-1] or "store"
        name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)[:60]
        key = self.url
        if not self.remote:
            meta = Path(self.url) / ".zmetadata"
            if meta.exists():  # a rewritten local store must not reuse the old store's blocks
                st = meta.stat()
                key += f"|{st.st_mtime_ns}|{st.st_size}"
        return f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def resolve_source(source: str = SAMPLE, storage_options: dict | None = None) -> StoreRef:
    """Turn a source name into a ``StoreRef`` (building the sample store on first use)."""
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"source {source!r} is empty; {SOURCE_HINT}")
    source = source.strip()
    if source == SAMPLE:
        from .sample import sample_store

        return StoreRef(source, str(sample_store()), False, {})
    url = CATALOGUE.get(source, source)
    if "://" in url:
        _require_cloud_packages(url)
        options = dict(storage_options or {})
        if url.startswith(("gs://", "gcs://")):
            options.setdefault("token", "anon")
            _check_token(options["token"])
        return StoreRef(source, url, True, options)
    path = Path(url).expanduser()
    if not path.exists():
        close = difflib.get_close_matches(source, [SAMPLE, *CATALOGUE], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DataError(f"source {source!r} is neither a known name nor an existing path{hint}; {SOURCE_HINT}")
    if not any((path / name).exists() for name in (".zgroup", ".zmetadata", "zarr.json")):
        raise DataError(f"{path} is not a Zarr store (no .zgroup, .zmetadata or zarr.json inside); {SOURCE_HINT}")
    return StoreRef(source, str(path.resolve()), False, dict(storage_options or {}))


def _require_cloud_packages(url: str) -> None:
    """Remote stores need the `cloud` extra (gcsfs, aiohttp, google-auth); say how to get it."""
    import importlib.util

    needed = ["aiohttp"] + (["gcsfs"] if url.startswith(("gs://", "gcs://")) else [])
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"reading {url} needs {', '.join(missing)}: pip install 'lstmnb[cloud]' "
                          f"(or use --source sample to work offline)")


def _check_token(token: Any) -> None:
    """Fail early and clearly when credentials are asked for but absent."""
    if token in (None, "anon", "google_default", "cloud", "browser", "cache") or isinstance(token, dict):
        if token == "google_default":
            try:
                import google.auth

                google.auth.default()
            except Exception as exc:  # google-auth raises its own DefaultCredentialsError
                raise ConfigError(
                    "credentials 'google_default' asked for but none found "
                    f"({type(exc).__name__}); run `gcloud auth application-default login`, "
                    "pass a service-account JSON file, or drop --credentials for anonymous access"
                ) from None
        return
    if isinstance(token, (str, os.PathLike)) and not Path(token).expanduser().is_file():
        raise ConfigError(
            f"credentials file {str(token)!r} not found; pass a service-account JSON file, "
            "'google_default', or nothing for anonymous access"
        )


def open_ref(ref: StoreRef) -> xr.Dataset:
    """Open a resolved store lazily (no dask), with one clear error when it cannot be read."""
    if ref.remote:
        _probe(ref)
    try:
        if ref.remote:
            ds = xr.open_zarr(ref.url, chunks=None, storage_options=ref.storage_options or None)
        else:
            ds = xr.open_zarr(ref.url, chunks=None)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if ref.remote:
            raise DataError(
                f"cannot open {ref.url}: {type(exc).__name__}: {reason}; check the network and the URL, "
                "or use --source sample"
            ) from None
        raise DataError(f"{ref.url} is not a readable Zarr store ({type(exc).__name__}: {reason})") from None
    missing = [c for c in ("time", "latitude", "longitude") if c not in ds.coords]
    if missing:
        raise DataError(f"{ref.url} lacks the ERA5 coordinates {missing}; expected time, latitude, longitude")
    return ds


def _probe_retry() -> "RetryPolicy":
    """Retries for a store's first request: a few quick ones, so an unreachable store fails fast."""
    from .era5_fetch import RetryPolicy

    return RetryPolicy(attempts=3, base_delay=0.2, timeout=20)


def _probe(ref: StoreRef) -> None:
    """Fail fast with one line when a remote store is unreachable or absent (a few quick retries)."""
    from .era5_fetch import ChunkError, ChunkSource

    src = ChunkSource(ref.url, True, ref.storage_options, 4, _probe_retry())
    try:
        for key in (".zmetadata", ".zgroup", "zarr.json"):
            # Whether it exists is all that counts: its first byte (ARCO's .zmetadata is megabytes)
            if src.get(key, byte_range=(0, 1)) is not None:
                return
    except ChunkError as exc:
        raise DataError(f"cannot reach {ref.url}: {exc}; check the network, or use --source sample") from None
    finally:
        src.close()
    raise DataError(f"no Zarr store at {ref.url} (no .zmetadata, .zgroup or zarr.json); check the URL, or {SOURCE_HINT}")


def open_store(source: str = SAMPLE, storage_options: dict | None = None) -> xr.Dataset:
    """Open a source (sample, catalogue key, gs:// URL or local path) as a lazy ``xr.Dataset``."""
    return open_ref(resolve_source(source, storage_options))


def _plain(value: Any) -> Any:
    """Attribute values as JSON types (numpy scalars and arrays to Python), so cached and fresh agree."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


@dataclass
class StoreMeta:
    """What checking a request and labelling its result need from a store: the time axis, the grid,
    the store's attributes, and each variable's dims and attributes. Cached as JSON beside the blocks."""

    times: np.ndarray  # datetime64
    lat: np.ndarray  # float64, store order
    lon: np.ndarray  # float64, store order, as stored
    attrs: dict
    variables: dict[str, dict]  # name -> {"dims": [...], "attrs": {...}}

    @classmethod
    def from_dataset(cls, ds: xr.Dataset) -> "StoreMeta":
        variables = {str(name): {"dims": [str(d) for d in var.dims], "attrs": _plain(dict(var.attrs))}
                     for name, var in ds.data_vars.items()}
        return cls(np.asarray(ds["time"].values), ds["latitude"].values.astype(np.float64),
                   ds["longitude"].values.astype(np.float64), _plain(dict(ds.attrs)), variables)

    def to_json(self) -> dict:
        unit = np.datetime_data(self.times.dtype)[0]
        ticks = self.times.astype(np.int64)
        steps = np.diff(ticks)
        if ticks.size > 1 and np.all(steps == steps[0]):
            time = {"unit": unit, "start": int(ticks[0]), "step": int(steps[0]), "count": int(ticks.size)}
        else:
            time = {"unit": unit, "values": ticks.tolist()}
        return {"format": 1, "time": time, "latitude": self.lat.tolist(), "longitude": self.lon.tolist(),
                "attrs": self.attrs, "variables": self.variables}

    @classmethod
    def from_json(cls, d: dict) -> "StoreMeta":
        t = d["time"]
        if "values" in t:
            ticks = np.asarray(t["values"], dtype=np.int64)
        else:
            ticks = t["start"] + t["step"] * np.arange(t["count"], dtype=np.int64)
        return cls(ticks.astype(f"datetime64[{t['unit']}]"), np.asarray(d["latitude"], dtype=np.float64),
                   np.asarray(d["longitude"], dtype=np.float64), dict(d["attrs"]), dict(d["variables"]))


MAX_COORD_CHUNKS = 256  # more chunks than this in a dimension coordinate: let xarray open the store
# ARCO-ERA5 keeps each coordinate in one chunk: its key in zarr v2, and in zarr v3's default encoding
_USUAL_COORD_KEYS = ("time/0", "latitude/0", "longitude/0", "time/c/0", "latitude/c/0", "longitude/c/0")


def open_meta(ref: StoreRef, source: "ChunkSource") -> tuple[StoreMeta, dict | None]:
    """The store's metadata for ``make_plan``, and its consolidated metadata (None when it has none):
    v2's ``.zmetadata`` contents, or v3's root ``zarr.json``.

    A store with consolidated metadata is opened in one round trip through ``source`` (the pool the
    chunk reads use): ``.zmetadata`` and ``zarr.json`` are asked for together with the coordinate
    chunks an ARCO-layout store has, in either format (any other dimension-coordinate chunks follow
    in a second round trip). The bytes go into an in-memory store that xarray opens, so decoding and
    naming are exactly ``open_zarr``'s; opening the store directly costs about ten round trips one
    after another. Other layouts, and stores this cannot open, go through ``open_ref`` (and its
    error messages).
    """
    from .era5_fetch import ChunkError

    try:
        v2, v3, *first = source.get_many([".zmetadata", "zarr.json", *_USUAL_COORD_KEYS],
                                          retry=_probe_retry() if ref.remote else None)
        have = dict(zip(_USUAL_COORD_KEYS, first))
        found = _from_consolidated(v2, source, have) if v2 is not None else None
        if found is None and v3 is not None:
            found = _from_consolidated_v3(v3, source, have)
    except ChunkError as exc:
        raise DataError(f"cannot reach {ref.url}: {exc}; check the network, or use --source sample") from None
    if found is not None:
        return found
    return StoreMeta.from_dataset(open_ref(ref)), None


def _from_consolidated(raw: bytes, source: "ChunkSource", have: dict[str, bytes | None]
                       ) -> tuple[StoreMeta, dict] | None:
    """StoreMeta from a v2 ``.zmetadata`` and the dimension coordinates' chunks (``have``: those
    already fetched); None if the store is not laid out that way."""
    try:
        zmeta = json.loads(raw)
        md = zmeta["metadata"]
        if zmeta.get("zarr_consolidated_format") != 1 or md[".zgroup"].get("zarr_format") != 2:
            return None
        keys: list[str] = []
        for key, zarray in md.items():
            name = key[:-len("/.zarray")]
            if not key.endswith("/.zarray") or "/" in name:
                continue
            if (md.get(f"{name}/.zattrs") or {}).get("_ARRAY_DIMENSIONS") != [name] or len(zarray["shape"]) != 1:
                continue  # only dimension coordinates are read when a store is opened
            n = -(-int(zarray["shape"][0]) // int(zarray["chunks"][0]))
            if n > MAX_COORD_CHUNKS:
                return None
            keys += [f"{name}/{i}" for i in range(n)]
        if not {"time/0", "latitude/0", "longitude/0"} <= set(keys):
            return None  # let open_ref name what is missing
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError):
        return None
    files = {".zmetadata": raw, ".zgroup": json.dumps(md[".zgroup"]).encode(),
             ".zattrs": json.dumps(md.get(".zattrs") or {}).encode()}
    meta = _open_in_memory(files, keys, have, source, zarr_format=2)
    return None if meta is None else (meta, md)


def _open_in_memory(files: dict[str, bytes], keys: list[str], have: dict[str, bytes | None],
                    source: "ChunkSource", zarr_format: int) -> StoreMeta | None:
    """Open a store from its metadata ``files`` and coordinate chunks ``keys`` (those not in ``have``
    are fetched in one round trip) with xarray, in memory; None when xarray cannot."""
    import warnings

    from zarr.core.buffer import cpu
    from zarr.storage import MemoryStore

    rest = [k for k in keys if k not in have]
    chunks = {**{k: have[k] for k in keys if k in have}, **dict(zip(rest, source.get_many(rest)))}
    files = {**files, **{k: b for k, b in chunks.items() if b is not None}}
    store = MemoryStore({k: cpu.Buffer.from_bytes(v) for k, v in files.items()}, read_only=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # v3: consolidated metadata is not in the spec yet
            ds = xr.open_zarr(store, chunks=None, consolidated=True, zarr_format=zarr_format)
        return StoreMeta.from_dataset(ds)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception:  # noqa: BLE001 - open_ref opens it again and reports what is wrong
        return None


def _from_consolidated_v3(raw: bytes, source: "ChunkSource", have: dict[str, bytes | None]
                          ) -> tuple[StoreMeta, dict] | None:
    """As ``_from_consolidated``, for a v3 root ``zarr.json`` with consolidated metadata; None if the
    store is not laid out that way (nested groups, sharded or many-chunk coordinates)."""
    from .era5_fetch import v3_key_layout

    try:
        root = json.loads(raw)
        md = (root.get("consolidated_metadata") or {}).get("metadata") or {}
        if root.get("zarr_format") != 3 or root.get("node_type") != "group" or not md:
            return None
        keys: list[str] = []
        for name, meta in md.items():
            if "/" in name or meta.get("node_type") != "array":
                return None  # nested groups: xarray opens those
            if meta.get("dimension_names") != [name] or len(meta["shape"]) != 1:
                continue  # only dimension coordinates are read when a store is opened
            if any(c.get("name") == "sharding_indexed" for c in meta.get("codecs") or []):
                return None
            layout = v3_key_layout(meta)
            if layout is None:
                return None
            n = -(-int(meta["shape"][0]) // int(meta["chunk_grid"]["configuration"]["chunk_shape"][0]))
            if n > MAX_COORD_CHUNKS:
                return None
            keys += [f"{name}/{layout[0]}{i}" for i in range(n)]
        if not {"time", "latitude", "longitude"} <= {k.split("/")[0] for k in keys}:
            return None  # let open_ref name what is missing
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError):
        return None
    files = {"zarr.json": raw, **{f"{name}/zarr.json": json.dumps(meta).encode() for name, meta in md.items()}}
    meta = _open_in_memory(files, keys, have, source, zarr_format=3)
    return None if meta is None else (meta, root)


def _meta(ds: "xr.Dataset | StoreMeta") -> StoreMeta:
    return ds if isinstance(ds, StoreMeta) else StoreMeta.from_dataset(ds)


def cached_meta(ref: StoreRef, cache_dir: str | os.PathLike | None = None) -> StoreMeta | None:
    """The metadata kept for this store in the block cache, or None."""
    from .era5_cache import read_store_meta

    raw = read_store_meta(cache_dir, ref.store_id)
    if raw is None or raw.get("format") != 1:
        return None
    try:
        return StoreMeta.from_json(raw)
    except (KeyError, TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------------------------- checks

def parse_time(value: str, *, end: bool = False) -> pd.Timestamp:
    """An ISO time; a bare date as ``end`` means the last hour of that day."""
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ConfigError(f"time {value!r} is not an ISO date or time (e.g. 2020-01-01 or 2020-01-01T06)") from None
    if ts is pd.NaT:
        raise ConfigError(f"time {value!r} is not an ISO date or time (e.g. 2020-01-01 or 2020-01-01T06)")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    if end and len(str(value).strip()) <= 10:
        ts = ts + pd.Timedelta(hours=23)
    return ts


def valid_range(ds: "xr.Dataset | StoreMeta") -> tuple[pd.Timestamp, pd.Timestamp]:
    """The store's valid times: its valid_time_start/stop attributes within its time axis."""
    times = ds.times if isinstance(ds, StoreMeta) else ds["time"].values
    lo, hi = pd.Timestamp(times[0]), pd.Timestamp(times[-1])
    if "valid_time_start" in ds.attrs:
        lo = max(lo, parse_time(str(ds.attrs["valid_time_start"])))
    if "valid_time_stop" in ds.attrs:
        hi = min(hi, parse_time(str(ds.attrs["valid_time_stop"]), end=True))
    return lo, hi


def point_label(lat: float, lon: float) -> str:
    """Readable cell name, e.g. ``40.00N 280.00E`` (longitude in 0..360)."""
    return f"{abs(lat):.2f}{'N' if lat >= 0 else 'S'} {lon % 360:.2f}E"


def _check_variables(meta: StoreMeta, variables: tuple[str, ...]) -> None:
    if not variables:
        raise ConfigError("no variables asked for; give at least one, e.g. 2m_temperature")
    valid = sorted(meta.variables)
    for name in variables:
        if name not in meta.variables:
            close = difflib.get_close_matches(name, valid, n=3)
            listing = ", ".join(valid) if len(valid) <= 12 else f"{len(valid)} variables, e.g. {', '.join(valid[:6])}"
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(f"unknown variable {name!r}{hint} (this store has: {listing})")
        dims = tuple(meta.variables[name]["dims"])
        if dims[:1] != ("time",) or not {"latitude", "longitude"} <= set(dims):
            raise ConfigError(f"variable {name!r} has dims {dims}; only (time, latitude, longitude) fields can be extracted")
        if len(dims) != 3:
            raise ConfigError(f"variable {name!r} has dims {dims}; only single-level (time, latitude, longitude) fields are supported")


def _check_lat(lat: float, what: str) -> float:
    try:
        lat = float(lat)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} latitude {lat!r} is not a number") from None
    if not -90.0 <= lat <= 90.0 or np.isnan(lat):
        raise ConfigError(f"{what} latitude {lat} is outside -90..90")
    return lat


def _check_lon(lon: float, what: str) -> float:
    try:
        lon = float(lon)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} longitude {lon!r} is not a number") from None
    if not -180.0 <= lon <= 360.0 or np.isnan(lon):
        raise ConfigError(f"{what} longitude {lon} is outside -180..180 (or 0..360)")
    return lon


@dataclass(frozen=True)
class Target:
    """One unit of the cache: a single grid cell or a box of cells (store row/column indices)."""

    key: str
    rows: tuple[int, ...]
    cols: tuple[int, ...]


@dataclass
class Plan:
    """A request checked against a store: time indices, targets, and the store's grid."""

    ref: StoreRef
    request: Request
    variables: tuple[str, ...]
    i0: int  # first store time index
    i1: int  # one past the last
    times: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    kind: str  # "points" or "box"
    targets: list[Target]
    requested: list[tuple[float, float]] = field(default_factory=list)

    @property
    def rows(self) -> np.ndarray:
        return np.unique(np.concatenate([t.rows for t in self.targets]))

    @property
    def cols(self) -> np.ndarray:
        return np.unique(np.concatenate([t.cols for t in self.targets]))


def _coverage(lat: np.ndarray, lon: np.ndarray) -> str:
    return f"latitude {lat.min():g}..{lat.max():g}, longitude {lon.min():g}..{lon.max():g} (0..360)"


def _spacing(values: np.ndarray) -> float:
    return float(np.median(np.abs(np.diff(values)))) if values.size > 1 else 0.25


def make_plan(ds: "xr.Dataset | StoreMeta", ref: StoreRef, request: Request) -> Plan:
    """Check ``request`` against the opened store (or its cached metadata) and resolve it to indices;
    raise on bad input."""
    meta = _meta(ds)
    variables = tuple(request.variables) if not isinstance(request.variables, str) else (request.variables,)
    _check_variables(meta, variables)
    if (request.points is None) == (request.box is None):
        raise ConfigError("give either points or a box (not both, not neither)")

    start, end = parse_time(request.start), parse_time(request.end, end=True)
    if end < start:
        raise ConfigError(f"end {request.end!r} is before start {request.start!r}")
    lo, hi = valid_range(meta)
    if start < lo or end > hi:
        raise ConfigError(
            f"time range {start:%Y-%m-%dT%H}..{end:%Y-%m-%dT%H} is outside this store's valid range "
            f"{lo:%Y-%m-%dT%H}..{hi:%Y-%m-%dT%H}"
        )
    times = meta.times
    i0 = int(np.searchsorted(times, np.datetime64(start), "left"))
    i1 = int(np.searchsorted(times, np.datetime64(end), "right"))
    if i1 <= i0:
        raise DataError(f"no time steps between {start} and {end} in this store")

    lat = meta.lat.astype(np.float64)
    lon = meta.lon.astype(np.float64) % 360.0
    dlat, dlon = _spacing(lat), _spacing(lon)
    targets: list[Target] = []
    requested: list[tuple[float, float]] = []
    if request.points is not None:
        if len(request.points) == 0:
            raise ConfigError("points is empty; give at least one (lat, lon), e.g. 40,280")
        seen = set()
        for pt in request.points:
            if len(pt) != 2:
                raise ConfigError(f"point {pt!r} must be (lat, lon)")
            plat, plon = _check_lat(pt[0], "point"), _check_lon(pt[1], "point")
            r = int(np.argmin(np.abs(lat - plat)))
            dist = np.abs((lon - plon % 360.0 + 180.0) % 360.0 - 180.0)
            c = int(np.argmin(dist))
            if abs(lat[r] - plat) > dlat / 2 + 1e-6 or dist[c] > dlon / 2 + 1e-6:
                raise DataError(
                    f"point ({plat:g}, {plon:g}) is outside this store's grid ({_coverage(lat, lon)})"
                )
            if (r, c) not in seen:
                seen.add((r, c))
                targets.append(Target(f"cell-r{r}-c{c}", (r,), (c,)))
                requested.append((plat, plon))
        kind = "points"
    else:
        if len(request.box) != 4:
            raise ConfigError(f"box {request.box!r} must be (lat_min, lat_max, lon_min, lon_max)")
        la0, la1 = _check_lat(request.box[0], "box"), _check_lat(request.box[1], "box")
        lo0, lo1 = _check_lon(request.box[2], "box"), _check_lon(request.box[3], "box")
        if la0 > la1:
            raise ConfigError(f"box lat_min {la0} is above lat_max {la1}")
        eps = 1e-6
        rows = np.nonzero((lat >= la0 - eps) & (lat <= la1 + eps))[0]
        a, b = lo0 % 360.0, lo1 % 360.0
        if a == b and lo1 > lo0:  # e.g. -180..180 or 0..360: the whole circle
            cols = np.argsort(lon)
        elif a <= b:
            cols = np.nonzero((lon >= a - eps) & (lon <= b + eps))[0]
        else:  # from lon_min eastwards across the 0 meridian to lon_max
            west = np.nonzero(lon >= a - eps)[0]
            east = np.nonzero(lon <= b + eps)[0]
            cols = np.concatenate([west[np.argsort(lon[west])], east[np.argsort(lon[east])]])
        if rows.size == 0 or cols.size == 0:
            raise DataError(
                f"box {tuple(request.box)} selects no grid cells; this store covers {_coverage(lat, lon)}"
            )
        key = f"box-r{rows[0]}-{rows[-1]}-c{cols[0]}-{cols[-1]}-n{cols.size}"
        targets.append(Target(key, tuple(int(r) for r in rows), tuple(int(c) for c in cols)))
        kind = "box"
    return Plan(ref, request, variables, i0, i1, times[i0:i1], lat, lon, kind, targets, requested)


# ----------------------------------------------------------------------------------------------- extract

def extract(
    request: Request,
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    refresh: bool = False,
    storage_options: dict | None = None,
    concurrency: int | None = None,
    block_hours: int | None = None,
    stats: "FetchStats | None" = None,
    retry: "RetryPolicy | None" = None,
) -> xr.Dataset:
    """Extract ``request`` as float32 series (points: dims time, point; box: time, latitude, longitude).

    Finished time blocks are cached (see ``era5_cache``); the same or an overlapping request later
    reads them instead of the store, and an interrupted one fetches only the missing blocks.
    ``refresh`` ignores and overwrites cached blocks. ``cache_dir`` is the root of the block cache
    (default ``<user cache>/extracts``). Pass an ``era5_fetch.FetchStats`` as ``stats`` to learn how
    many chunks were read and blocks reused.
    """
    from .era5_cache import write_store_meta
    from .era5_fetch import CacheMiss, ChunkSource, RetryPolicy, check_sizes, fetch_plan

    ref = resolve_source(request.source, storage_options)
    workers = check_sizes(block_hours, concurrency)[1]
    fetch = dict(cache_dir=cache_dir, progress=progress, refresh=refresh, concurrency=concurrency,
                 block_hours=block_hours, stats=stats)
    meta = None if refresh else cached_meta(ref, cache_dir)
    offline_error: LstmnbError | None = None
    miss: CacheMiss | None = None
    if meta is not None:
        # Every block cached: check the request against the kept metadata and never touch the store.
        try:
            plan = make_plan(meta, ref, request)
            return _assemble(plan, meta, fetch_plan(plan, **{**fetch, "offline": True}))
        except CacheMiss as exc:
            miss = exc
        except LstmnbError as exc:  # maybe the store has grown since; ask it
            offline_error = exc
    # One connection pool serves the metadata and then the chunk reads.
    source = ChunkSource(ref.url, ref.remote, ref.storage_options, workers, retry or RetryPolicy())
    try:
        try:
            meta, zmetadata = open_meta(ref, source)
        except DataError as exc:
            if offline_error is not None:
                raise offline_error from None
            if miss is not None:
                raise DataError(f"{exc} ({miss.cached} of {miss.total} blocks of this request are cached; "
                                "the rest need the store)") from None
            raise
        plan = make_plan(meta, ref, request)
        try:
            write_store_meta(cache_dir, ref.store_id, meta.to_json())
        except OSError:
            pass  # only an optimisation; a full disk shows up (with its message) when a block is written
        return _assemble(plan, meta, fetch_plan(plan, **fetch, source=source, zmetadata=zmetadata))
    finally:
        source.close()


def _assemble(plan: Plan, ds: "xr.Dataset | StoreMeta", arrays: dict[tuple[str, str], np.ndarray]) -> xr.Dataset:
    """Turn per-(variable, target) arrays into the result Dataset with coordinates and attrs."""
    meta = _meta(ds)
    time = xr.DataArray(plan.times, dims="time", name="time")
    data_vars = {}
    if plan.kind == "points":
        rows = [t.rows[0] for t in plan.targets]
        cols = [t.cols[0] for t in plan.targets]
        lat = plan.lat[rows].astype(np.float32)
        lon = plan.lon[cols].astype(np.float32)
        labels = [point_label(a, b) for a, b in zip(lat, lon)]
        for v in plan.variables:
            values = np.stack([arrays[(v, t.key)] for t in plan.targets], axis=1).astype(np.float32)
            data_vars[v] = (("time", "point"), values, dict(meta.variables[v]["attrs"]))
        coords = {
            "time": time, "point": ("point", labels),
            "latitude": ("point", lat), "longitude": ("point", lon),
            "requested_latitude": ("point", np.array([p[0] for p in plan.requested], dtype=np.float32)),
            "requested_longitude": ("point", np.array([p[1] for p in plan.requested], dtype=np.float32)),
        }
    else:
        target = plan.targets[0]
        lat = plan.lat[list(target.rows)].astype(np.float32)
        lon = plan.lon[list(target.cols)].astype(np.float32)
        for v in plan.variables:
            data_vars[v] = (("time", "latitude", "longitude"), arrays[(v, target.key)].astype(np.float32),
                           dict(meta.variables[v]["attrs"]))
        coords = {"time": time, "latitude": lat, "longitude": lon}
    out = xr.Dataset(data_vars, coords=coords)
    req = asdict(plan.request)
    out.attrs.update(
        source=plan.ref.source,
        source_url=plan.ref.url,
        store_id=plan.ref.store_id,
        variables=",".join(plan.variables),
        start=str(pd.Timestamp(plan.times[0])),
        end=str(pd.Timestamp(plan.times[-1])),
        selection=plan.kind,
        request=json.dumps(req),
    )
    return out


def to_frame(ds: xr.Dataset) -> pd.DataFrame:
    """A tidy table of an extraction: columns time, point, latitude, longitude, variable, value."""
    variables = [v for v in ds.data_vars]
    if "point" in ds.dims:
        flat = ds
    else:
        flat = ds.stack(point=("latitude", "longitude"))
        labels = [point_label(a, b) for a, b in zip(flat["latitude"].values, flat["longitude"].values)]
        lat, lon = flat["latitude"].values, flat["longitude"].values
        flat = flat.drop_vars(["point", "latitude", "longitude"]).assign_coords(
            point=("point", labels), latitude=("point", lat), longitude=("point", lon))
    frames = []
    times = flat["time"].values
    points = flat["point"].values
    lat = flat["latitude"].values
    lon = flat["longitude"].values
    nt, npnt = len(times), len(points)
    for v in variables:
        values = flat[v].transpose("time", "point").values
        frames.append(pd.DataFrame({
            "time": np.repeat(times, npnt),
            "point": np.tile(points.astype(str), nt),
            "latitude": np.tile(lat, nt),
            "longitude": np.tile(lon, nt),
            "variable": v,
            "value": values.reshape(-1),
        }))
    if not frames:
        return pd.DataFrame(columns=["time", "point", "latitude", "longitude", "variable", "value"])
    return pd.concat(frames, ignore_index=True)


def summary(ds: xr.Dataset) -> str:
    """A few lines describing an extraction, for the CLI and notebooks."""
    times = pd.DatetimeIndex(ds["time"].values)
    if "point" in ds.dims:
        cells = ", ".join(str(p) for p in ds["point"].values)
        n_cells = ds.sizes["point"]
    else:
        n_cells = ds.sizes["latitude"] * ds.sizes["longitude"]
        cells = (f"{ds.sizes['latitude']} x {ds.sizes['longitude']} box, latitude "
                 f"{float(ds.latitude.min()):g}..{float(ds.latitude.max()):g}, longitude "
                 f"{float(ds.longitude.min()):g}..{float(ds.longitude.max()):g}")
    rows = len(times) * n_cells * len(ds.data_vars)
    return "\n".join([
        f"source     {ds.attrs.get('source')} ({ds.attrs.get('source_url')})",
        f"variables  {', '.join(ds.data_vars)}",
        f"time       {times[0]:%Y-%m-%dT%H:%M} .. {times[-1]:%Y-%m-%dT%H:%M} ({len(times)} hours)",
        f"cells      {cells}",
        f"rows       {rows} (tidy: time x cell x variable)",
    ])

