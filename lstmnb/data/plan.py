"""A request checked against a store and resolved to store indices: the ``Plan`` the fetch follows.

``make_plan`` checks the variables (known, single-level fields), the time range (within the store's valid range)
and the points or box (inside the grid), and turns them into time indices and targets, the units of the block
cache: one grid cell per point (two points in one cell share it) or one box of cells.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import ConfigError, DataError
from ..rules import PYTHON, Spelling
from .catalogue import SAMPLE, Request, StoreRef, check_selection, open_ref, parse_time, resolve_source
from ..datasets.sample import TIMES as SAMPLE_TIMES
from ..datasets.study import STUDY, STUDY_TIMES
from .cache import StoreMeta, cached_meta


def valid_range(ds: "xr.Dataset | StoreMeta") -> tuple[pd.Timestamp, pd.Timestamp]:
    """The store's valid times: its valid_time_start/stop attributes within its time axis."""
    times = ds.times if isinstance(ds, StoreMeta) else ds["time"].values
    lo, hi = pd.Timestamp(times[0]), pd.Timestamp(times[-1])
    if "valid_time_start" in ds.attrs:
        lo = max(lo, parse_time(str(ds.attrs["valid_time_start"])))
    if "valid_time_stop" in ds.attrs:
        hi = min(hi, parse_time(str(ds.attrs["valid_time_stop"]), end=True))
    return lo, hi


def fit_times(request: Request, *, start_given: bool, end_given: bool, storage_options: dict | None = None,
              say: Spelling = PYTHON) -> tuple[Request, list[str]]:
    """``request`` with its times fitted to its store's valid range, and one line per change for the user (the CLI
    asks this for a local store, and wherever --end is given): a time not given becomes the store's first or last
    valid hour, and an end past the last valid hour is clipped to it. The store's metadata come from the cache where
    kept, else from the store; the sample's and the study's ranges are known without building them. A refusal and
    the notes name settings as ``say`` spells them."""
    if request.source.strip() in (SAMPLE, STUDY):
        lo, hi = (pd.Timestamp(t) for t in (SAMPLE_TIMES if request.source.strip() == SAMPLE else STUDY_TIMES))
    else:
        ref = resolve_source(request.source, storage_options, say)
        meta = cached_meta(ref)
        lo, hi = valid_range(meta if meta is not None else open_ref(ref, say=say))
    first, last = f"{lo:%Y-%m-%dT%H}", f"{hi:%Y-%m-%dT%H}"
    if start_given and parse_time(request.start, name="start", say=say) > hi:
        raise say.refuse("start", request.start, f"is after this store's last valid hour; its valid range is {first}..{last}")
    notes, k = [], say.key
    if not start_given and not end_given:
        return replace(request, start=first, end=last), [
            f"time range {first}..{last}: this store's valid range (no {k('start')}/{k('end')} given)"]
    if not start_given:
        request = replace(request, start=first)
        notes.append(f"start {first}: this store's first valid hour (no {k('start')} given)")
    if not end_given:
        request = replace(request, end=last)
        notes.append(f"end {last}: this store's last valid hour (no {k('end')} given)")
    elif parse_time(request.end, end=True, name="end", say=say) > hi:
        notes.append(f"end {request.end} is past this store's last valid hour; clipped to {last}")
        request = replace(request, end=last)
    return request, notes


def _check_variables(meta: StoreMeta, variables: tuple[str, ...]) -> None:
    valid = sorted(meta.variables)
    for name in variables:
        if name not in meta.variables:
            close = difflib.get_close_matches(name, valid, n=3)
            listing = ", ".join(valid) if len(valid) <= 12 else f"{len(valid)} variables, e.g. {', '.join(valid[:6])}"
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(f"unknown variable {name!r}{hint} (this store has: {listing})")
        dims = tuple(meta.variables[name]["dims"])
        if dims[:1] != ("time",) or sorted(dims[1:]) != ["latitude", "longitude"]:
            raise ConfigError(f"variable {name!r} has dims {dims}; only single-level (time, latitude, longitude) "
                              "fields can be extracted")


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
    cf: dict[str, dict] = field(default_factory=dict)  # variable -> its CF mask and scale (StoreMeta's "cf")


def _coverage(lat: np.ndarray, lon: np.ndarray) -> str:
    return f"latitude {lat.min():g}..{lat.max():g}, longitude {lon_span(lon)}"


def lon_span(lon: np.ndarray) -> str:
    """The longitudes a grid covers as one eastward range in 0..360, e.g. ``350..2 (0..360, across 0)``:
    the circle minus its largest gap, so a store that wraps the 0 meridian is described as it is."""
    v = np.unique(np.round(np.asarray(lon, dtype=np.float64) % 360.0, 6))
    if v.size < 2:
        return f"{v[0]:g} (0..360)" if v.size else "none"
    gaps = np.diff(np.concatenate([v, [v[0] + 360.0]]))
    i = int(np.argmax(gaps))
    if gaps[i] <= 1.5 * float(np.median(gaps)):  # no gap wider than the spacing: the whole circle
        return f"{v[0]:g}..{v[-1]:g} (0..360, all longitudes)"
    lo, hi = v[(i + 1) % v.size], v[i]
    return f"{lo:g}..{hi:g} (0..360{', across 0' if lo > hi else ''})"


def _spacing(values: np.ndarray) -> float:
    return float(np.median(np.abs(np.diff(values)))) if values.size > 1 else 0.25


def make_plan(ds: "xr.Dataset | StoreMeta", ref: StoreRef, request: Request) -> Plan:
    """Check ``request`` against the opened store (or its cached metadata) and resolve it to indices."""
    meta = ds if isinstance(ds, StoreMeta) else StoreMeta.from_dataset(ds)
    start, end, variables = check_selection(request)
    _check_variables(meta, variables)
    lo, hi = valid_range(meta)
    if start < lo or end > hi:
        raise ConfigError(f"time range {start:%Y-%m-%dT%H}..{end:%Y-%m-%dT%H} is outside this store's valid range "
                          f"{lo:%Y-%m-%dT%H}..{hi:%Y-%m-%dT%H}")
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
        seen = set()
        for pt in request.points:
            plat, plon = float(pt[0]), float(pt[1])
            r = int(np.argmin(np.abs(lat - plat)))
            dist = np.abs((lon - plon % 360.0 + 180.0) % 360.0 - 180.0)
            c = int(np.argmin(dist))
            if abs(lat[r] - plat) > dlat / 2 + 1e-6 or dist[c] > dlon / 2 + 1e-6:
                raise DataError(f"point ({plat:g}, {plon:g}) is outside this store's grid ({_coverage(lat, lon)})")
            if (r, c) not in seen:
                seen.add((r, c))
                targets.append(Target(f"cell-r{r}-c{c}", (r,), (c,)))
                requested.append((plat, plon))
        kind = "points"
    else:
        la0, la1, lo0, lo1 = (float(v) for v in request.box)
        eps = 1e-6
        rows = np.nonzero((lat >= la0 - eps) & (lat <= la1 + eps))[0]
        a, b = lo0 % 360.0, lo1 % 360.0
        if a == b and lo1 > lo0:  # e.g. -180..180 or 0..360: the whole circle
            cols = np.argsort(lon)
        elif a <= b:
            cols = np.nonzero((lon >= a - eps) & (lon <= b + eps))[0]
        else:  # from lon_min eastwards across the 0 meridian to lon_max
            west, east = np.nonzero(lon >= a - eps)[0], np.nonzero(lon <= b + eps)[0]
            cols = np.concatenate([west[np.argsort(lon[west])], east[np.argsort(lon[east])]])
        if rows.size == 0 or cols.size == 0:
            raise DataError(f"box {tuple(request.box)} selects no grid cells; this store covers {_coverage(lat, lon)}")
        key = f"box-r{rows[0]}-{rows[-1]}-c{cols[0]}-{cols[-1]}-n{cols.size}"
        targets.append(Target(key, tuple(int(r) for r in rows), tuple(int(c) for c in cols)))
        kind = "box"
    cf = {v: dict(meta.variables[v].get("cf") or {}) for v in variables}
    return Plan(ref, request, variables, i0, i1, times[i0:i1], lat, lon, kind, targets, requested, cf)
