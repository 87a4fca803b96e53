"""What to extract and where from: the store catalogue, the request, resolving and opening a source, and the
checks a request's times and coordinates pass before any store is asked.

A source is the study's real ERA5 at its two points (``study``, the default for points), the synthetic sample
(``sample``, the default for a box), a catalogue key, a ``gs://`` or ``http(s)://`` URL, or a local Zarr path.
``resolve_source`` turns it into a ``StoreRef`` (location, credentials, a stable id for the block cache) or fails
with one line naming what is wrong. ``open_ref``/``open_store`` open it lazily with xarray on a zarr store
(``stores``); a remote store's metadata comes in one round trip first, so that an unreachable one fails fast.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import ConfigError, DataError
from ..rules import PYTHON, Spelling, cli_text
from ..datasets.sample import sample_store
from ..datasets.study import STUDY, STUDY_POINTS, check_study_request, study_store
from .stores import ReadStore, StoreError, run, zarr_store

CATALOGUE: dict[str, str] = {
    "arco-v3": "gs://gcp-public-data-arco-era5/ar/full_37-1h-0p25deg-chunk-1.zarr-v3",
    "arco-v2": "gs://gcp-public-data-arco-era5/ar/1959-2022-full_37-1h-0p25deg-chunk-1.zarr-v2",
}
SAMPLE = "sample"
DEFAULT_VARIABLE = "2m_temperature"
DEFAULT_POINTS = STUDY_POINTS  # a request asks for the study's two points unless told otherwise
DEFAULT_START = "2020-01-01"
DEFAULT_END = "2021-06-30"  # inclusive: a date means through 23:00 of that day
SOURCE_HINT = ("a source is study (real ERA5 at the study's two points), sample (synthetic), a catalogue name ("
               + ", ".join(CATALOGUE) + "), a gs:// URL or a local Zarr path")


@dataclass(frozen=True)
class Request:
    """What to extract: ``points`` (lat, lon; lon in -180..180 or 0..360) or a ``box`` (lat_min, lat_max, lon_min,
    lon_max), not both (the default points give way to a box: ``Request(box=...)`` is a box request). ``source``
    defaults to the study's real ERA5 for points, the synthetic sample for a box (the study's data has no area)."""

    source: str | None = None
    variables: tuple[str, ...] = (DEFAULT_VARIABLE,)
    points: tuple[tuple[float, float], ...] | None = DEFAULT_POINTS
    box: tuple[float, float, float, float] | None = None
    start: str = DEFAULT_START
    end: str = DEFAULT_END

    def __post_init__(self) -> None:
        if self.source is None:
            object.__setattr__(self, "source", SAMPLE if self.box is not None else STUDY)
        if self.box is not None and self.points is DEFAULT_POINTS:  # the default, not points given
            object.__setattr__(self, "points", None)
        elif self.box is not None and self.points is not None:
            raise ConfigError(f"Request got both points={self.points!r} and box={self.box!r}; give one of the "
                              f"two (a box alone needs no points=None)")

    def as_record(self) -> dict:
        """The request as a run record's ``data`` section states it (plain JSON values), with ``kind``:
        whether its values are real or synthetic."""
        return {"source": self.source, "kind": data_kind(self.source), "variables": list(self.variables),
                "points": [list(p) for p in self.points] if self.points else None,
                "box": list(self.box) if self.box else None, "start": str(self.start), "end": str(self.end)}


@dataclass(frozen=True)
class StoreRef:
    """A resolved source: where it is, how to open it, and a stable id for the cache."""

    source: str
    url: str  # local absolute path or remote URL
    remote: bool
    storage_options: dict = field(default_factory=dict)

    @property
    def store_id(self) -> str:
        """Cache key: a readable name plus a hash of the location (and, locally, of the root metadata file:
        v2's consolidated .zmetadata, else v3's zarr.json, else v2's .zgroup)."""
        name = self.url.rstrip("/").split("/")[-1] or "store"
        name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)[:60]
        key = self.url
        metas = () if self.remote else (Path(self.url) / f for f in (".zmetadata", "zarr.json", ".zgroup"))
        # a rewritten local store must not reuse the old store's blocks
        if (st := next((m.stat() for m in metas if m.exists()), None)) is not None:
            key += f"|{st.st_mtime_ns}|{st.st_size}"
        return f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def data_kind(source: str) -> str:
    """``synthetic`` for the sample store and for a local copy of it (a store whose attributes carry the
    sample's seed, as ``write_sample`` writes them), ``real`` for every other source."""
    if not isinstance(source, str):
        return "real"
    if source.strip() == SAMPLE:
        return "synthetic"
    path = Path(source).expanduser()
    for name, pick in ((".zattrs", lambda d: d), ("zarr.json", lambda d: d.get("attributes") or {})):
        try:
            attrs = pick(json.loads((path / name).read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(attrs, dict) and "lstmnb_sample_seed" in attrs:
            return "synthetic"
    return "real"


def source_text(source, say: Spelling = PYTHON) -> str:
    """The source named by ``source`` (stripped), or a ConfigError naming it as ``say`` spells it: empty, or not
    text (a pathlib.Path too: a request is keyed and recorded by its text)."""
    if not isinstance(source, str):
        raise say.refuse("source", source, f"must be text (str(path) for a local store); {SOURCE_HINT}")
    if not source.strip():
        raise say.refuse("source", source, f"is empty; {SOURCE_HINT}")
    return source.strip()


def resolve_source(source: str = STUDY, storage_options: dict | None = None, say: Spelling = PYTHON) -> StoreRef:
    """Turn a source name into a ``StoreRef`` (building the study's or the sample store on first use); a source
    that names nothing is refused as ``say`` spells it (``--source x``, ``source='x'``)."""
    source = source_text(source, say)
    if source in (SAMPLE, STUDY):
        return StoreRef(source, str(sample_store() if source == SAMPLE else study_store()), False, {})
    url = CATALOGUE.get(source, source)
    if "://" in url:
        _require_cloud_packages(url, say)
        options = dict(storage_options or {})
        if url.startswith(("gs://", "gcs://")):
            options.setdefault("token", "anon")
            _check_token(options["token"], say)
        return StoreRef(source, url, True, options)
    path = Path(url).expanduser()
    if not path.exists():
        close = difflib.get_close_matches(source, [STUDY, SAMPLE, *CATALOGUE], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DataError(f"{say('source', source)} is neither a known name nor an existing path{hint}; {SOURCE_HINT}")
    if not any((path / name).exists() for name in (".zgroup", ".zmetadata", "zarr.json")):
        raise DataError(f"{path} is not a Zarr store (no .zgroup, .zmetadata or zarr.json inside); {SOURCE_HINT}")
    return StoreRef(source, str(path.resolve()), False, dict(storage_options or {}))


def _require_cloud_packages(url: str, say: Spelling) -> None:
    """Remote stores need the `cloud` extra (gcsfs, fsspec, aiohttp, google-auth); say how to get it."""
    needed = ["fsspec", "aiohttp"] + (["gcsfs"] if url.startswith(("gs://", "gcs://")) else [])
    if missing := [m for m in needed if importlib.util.find_spec(m) is None]:
        raise ConfigError(f"reading {url} needs {', '.join(missing)}: pip install 'lstmnb[cloud]' "
                          f"(or use {say('source', SAMPLE)} to work offline)")


def _check_token(token: Any, say: Spelling) -> None:
    """Fail early and clearly when credentials are asked for but absent (``say``: whose words to drop them in)."""
    if token == "google_default":
        try:
            import google.auth

            google.auth.default()
        except Exception as exc:  # google-auth raises its own DefaultCredentialsError
            raise ConfigError(f"credentials 'google_default' asked for but none found ({type(exc).__name__}); run "
                              "`gcloud auth application-default login`, pass a service-account JSON file, or drop "
                              f"{'--credentials' if say.cli else 'the token'} for anonymous access") from None
    check_credentials(token)  # a file: present, JSON, the keys its type needs; the other words pass


TOKEN_WORDS = ("anon", "google_default", "cloud", "browser", "cache")
# the keys google-auth needs in each kind of credentials file
_CREDENTIAL_KEYS = {"service_account": ("client_email", "private_key", "token_uri"),
                    "authorized_user": ("client_id", "client_secret", "refresh_token"),
                    "external_account": ("audience", "subject_token_type", "credential_source")}
_CREDENTIALS_HINT = "pass a Google service-account JSON key file, 'google_default', or nothing for anonymous access"


def check_credentials(token: Any) -> None:
    """A credentials file (``--credentials FILE``) must exist and be a Google credentials JSON with the
    keys its ``type`` needs; the gcsfs words (anon, google_default, ...) and mappings pass as they are."""
    if token is None or isinstance(token, dict) or token in TOKEN_WORDS:
        return
    if not isinstance(token, (str, os.PathLike)) or not str(token).strip():
        raise ConfigError(f"credentials {token!r} is empty; {_CREDENTIALS_HINT}")
    path = Path(token).expanduser()
    if not path.is_file():
        raise ConfigError(f"credentials file {str(token)!r} not found; {_CREDENTIALS_HINT}")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0].split(":")[0][:80]
        raise ConfigError(f"credentials file {path} is not JSON ({reason}); {_CREDENTIALS_HINT}") from None
    kind = info.get("type") if isinstance(info, dict) else None
    if kind not in _CREDENTIAL_KEYS:
        what = f"has type {kind!r}" if isinstance(info, dict) else "is not a JSON object"
        raise ConfigError(f"credentials file {path} {what}; expected one of {', '.join(_CREDENTIAL_KEYS)}; "
                          f"{_CREDENTIALS_HINT}")
    if missing := [k for k in _CREDENTIAL_KEYS[kind] if not info.get(k)]:
        raise ConfigError(f"credentials file {path} ({kind}) lacks {', '.join(missing)}; {_CREDENTIALS_HINT}")


def check_request(request: Request, storage_options: dict | None = None, say: Spelling = PYTHON) -> Request:
    """Every check of ``request`` that needs no store (source, variable names, points or box, times), building
    nothing (not the study's or the sample store); the checks against the store follow in ``make_plan``. A refusal
    names the setting as ``say`` spells it: ``--start x`` (the CLI), ``start='x'`` (Python), ``parameter start='x'``."""
    source = source_text(request.source, say)
    if source not in (SAMPLE, STUDY):
        resolve_source(source, storage_options, say)
    check_selection(request, say)
    return request


def check_selection(request: Request, say: Spelling = PYTHON) -> tuple[pd.Timestamp, pd.Timestamp, tuple[str, ...]]:
    """The request's variable names, points or box and times, each checked on its own (no store), a refusal
    spelled by ``say``; returns the (start, end) times and the variables (a tuple). ``check_request`` and
    ``make_plan`` both rest on it."""
    given = request.variables
    variables = (given,) if isinstance(given, str) else tuple(given) if isinstance(given, (list, tuple)) else (given,)
    if not variables or any(not isinstance(v, str) or not v.strip() for v in variables):
        raise say.refuse("variables", given, "must name at least one variable, e.g. 2m_temperature")
    if (request.points is None) == (request.box is None):
        raise ConfigError(f"give either {say.key('points')} or {say.key('box')} (one of the two, not both)")
    if request.points is not None:
        if isinstance(request.points, (list, tuple)) and len(request.points) == 0:
            raise say.refuse("points", request.points, "is empty; give at least one (lat, lon), e.g. 40,280")
        listed = isinstance(request.points, (list, tuple))
        if not listed or not all(isinstance(pt, (tuple, list)) for pt in request.points):
            raise say.refuse("points", request.points, "must be a list of (lat, lon) pairs, e.g. [(40, 280)]")
        for pt in request.points:
            named = f"{say.prefix}{say.key('points')} {cli_text(tuple(pt))}"
            if len(pt) != 2:
                raise ConfigError(f"{named}: a point must be LAT,LON (two numbers), e.g. 40,280 or -33,151")
            _degrees(pt[0], named, "latitude"), _degrees(pt[1], named, "longitude")
    else:
        if not isinstance(request.box, (list, tuple)):
            raise say.refuse("box", request.box, "must be 4 numbers LAT_MIN,LAT_MAX,LON_MIN,LON_MAX")
        named = f"{say.prefix}{say.key('box')} {cli_text(tuple(request.box))}"
        if len(request.box) != 4:
            raise ConfigError(f"{named}: a box must be 4 numbers LAT_MIN,LAT_MAX,LON_MIN,LON_MAX")
        la0, la1 = _degrees(request.box[0], named, "latitude"), _degrees(request.box[1], named, "latitude")
        check_box_lons(_degrees(request.box[2], named, "longitude"), _degrees(request.box[3], named, "longitude"), named)
        if la0 > la1:
            raise ConfigError(f"{named}: lat_min {la0:g} is above lat_max {la1:g}; give LAT_MIN,LAT_MAX,LON_MIN,LON_MAX")
    start, end = parse_time(request.start, name="start", say=say), parse_time(request.end, end=True, name="end", say=say)
    if end < start:
        raise say.refuse("end", request.end, f"is before {say.key('start')} {request.start}")
    if isinstance(request.source, str) and request.source.strip() == STUDY:  # what the shipped data can serve
        check_study_request(request.points, request.box, start, end, variables, say)
    return start, end, variables


UNCONSOLIDATED = "Failed to open Zarr store with consolidated metadata"  # how xarray's five-line warning begins


def open_ref(ref: StoreRef, store: ReadStore | None = None, say: Spelling = PYTHON) -> xr.Dataset:
    """Open a resolved store lazily (no dask) with xarray, on ``store`` (made here when not given: see
    ``stores.zarr_store``), with one clear error when it cannot be read (its advice spelled by ``say``)."""
    offline = f"or use {say('source', SAMPLE)}"
    store = store if store is not None else zarr_store(ref.url, ref.remote, ref.storage_options)
    if ref.remote:
        try:
            found = run(store.open_metadata())
        except StoreError as exc:
            raise DataError(f"cannot reach {ref.url}: {exc}; check the network, {offline}") from None
        if not found:
            raise DataError(f"no Zarr store at {ref.url} (no .zmetadata, .zgroup or zarr.json); check the URL "
                            f"({SOURCE_HINT})")
    try:
        with warnings.catch_warnings(record=True) as said:
            # zarr v3's consolidated metadata is not in the format's specification yet, as zarr says each time
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
            ds = xr.open_zarr(store, chunks=None)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if ref.remote:
            raise DataError(f"cannot open {ref.url}: {type(exc).__name__}: {reason}; check the network and the URL, "
                            f"{offline}") from None
        raise DataError(f"{ref.url} is not a readable Zarr store ({type(exc).__name__}: {reason})") from None
    missing = [c for c in ("time", "latitude", "longitude") if c not in ds.coords]
    if missing and any(str(w.message).startswith(UNCONSOLIDATED) for w in said) and ref.url.startswith("http"):
        raise DataError(f"{ref.url} has no consolidated metadata (.zmetadata), and a store over plain HTTP cannot "
                        "list its arrays without it; consolidate the store (zarr.consolidate_metadata) or open "
                        "it where it can be listed (gs://, a local path)")
    if missing:
        raise DataError(f"{ref.url} lacks the ERA5 coordinates {missing}; expected time, latitude, longitude")
    # Say again the warnings that opening ``ref`` raised, but xarray's five lines on a store without
    # consolidated metadata as one of ours, and only for a remote store: there opening pays a round trip per
    # array's metadata (a local one costs nothing to speak of), and the store's owner can consolidate it.
    for w in said:
        if not str(w.message).startswith(UNCONSOLIDATED):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif ref.remote:
            warnings.warn(f"{ref.url} has no consolidated metadata, so opening it reads each array's metadata "
                          "separately (slower); zarr.consolidate_metadata on the store writes it once",
                          RuntimeWarning, stacklevel=2)
    return ds


def open_store(source: str = STUDY, storage_options: dict | None = None) -> xr.Dataset:
    """Open a source (sample, catalogue key, gs:// URL or local path) as a lazy ``xr.Dataset``."""
    return open_ref(resolve_source(source, storage_options))


# YYYY-MM-DD, then optionally an hour, minutes, seconds (and fractions) and a UTC offset
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$")


def parse_time(value: str, *, end: bool = False, name: str = "time", say: Spelling = PYTHON) -> pd.Timestamp:
    """An ISO time; a bare date as ``end`` means the last hour of that day. A refusal names the setting ``name``
    as ``say`` spells it. Text in ISO order only: pandas would read 01/02/2020 as 2 January, 13/02/2020 as 13 February."""
    ts = pd.NaT
    if isinstance(value, str) and _ISO_TIME.match(value.strip()):
        try:
            ts = pd.Timestamp(value.strip())
        except (ValueError, OverflowError):
            pass
    if ts is pd.NaT:
        raise say.refuse(name, value, "is not an ISO date or time (text such as 2020-01-01 or 2020-01-01T06)")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    if end and len(str(value).strip()) <= 10:
        ts = ts + pd.Timedelta(hours=23)
    return ts


def point_label(lat: float, lon: float) -> str:
    """Readable cell name, e.g. ``40.00N 280.00E`` (longitude in 0..360)."""
    return f"{abs(lat):.2f}{'N' if lat >= 0 else 'S'} {lon % 360:.2f}E"


_DEGREES = {"latitude": (-90.0, 90.0, "-90..90"), "longitude": (-180.0, 360.0, "-180..180 (or 0..360)")}


def _degrees(value: float, named: str, axis: str) -> float:
    """``value`` as a float in the range of ``axis`` (``_DEGREES``); a ConfigError led by ``named`` (the point or
    the box as the user gave it), naming the axis and the range if not."""
    lo, hi, valid = _DEGREES[axis]
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{named}: {axis} {value!r} is not a number") from None
    if not lo <= value <= hi or np.isnan(value):
        raise ConfigError(f"{named}: {axis} {value:g} is outside {valid}")
    return value


def check_box_lons(west: float, east: float, named: str) -> None:
    """A box runs east from LON_MIN to LON_MAX (across the prime meridian when LON_MAX is the smaller, e.g.
    359,1), so swapped longitudes would silently read as a box round most of the globe: more than 180
    degrees east is refused, the whole circle (e.g. -180,180 or 0,360) aside."""
    span = (float(east) - float(west)) % 360.0
    if span <= 180.0 or float(east) - float(west) == 360.0:
        return
    swapped = west > east and (float(west) - float(east)) % 360.0 <= 180.0  # likely written east first
    raise ConfigError(f"{named}: longitudes {west:g},{east:g} span {span:g} degrees going east from {west:g} (at most 180, "
                      f"or the whole circle -180,180); give LON_MIN,LON_MAX as WEST,EAST with WEST first going east, "
                      f"e.g. {f'{east:g},{west:g}' if swapped else '279,281'}, or across the prime meridian e.g. 359,1")
