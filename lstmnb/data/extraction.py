"""The front door of data access: ``extract`` a request as float32 series, and show the result.

``extract`` resolves the source, checks the request against the store (or, when every block is cached, against the
store metadata kept in the cache, without reaching the store), fetches what the cache lacks (``fetch``) and assembles
one Dataset (its dims: ``extract``); ``to_frame`` makes it a tidy table, ``summary`` a few lines for people.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DataError, LstmnbError
from ..rules import PYTHON, Spelling
from .cache import StoreMeta, cached_meta, write_store_meta
from .catalogue import Request, check_selection, data_kind, open_ref, point_label, resolve_source
from .fetch import CacheMiss, FetchStats, check_sizes, fetch_plan
from .plan import Plan, make_plan
from .stores import RetryPolicy, zarr_store


def extract(request: Request, *, cache_dir: str | os.PathLike | None = None, progress: bool = True,
            refresh: bool = False, storage_options: dict | None = None, concurrency: int | None = None,
            block_hours: int | None = None, stats: FetchStats | None = None, retry: RetryPolicy | None = None,
            partial_reads: bool = True, say: Spelling = PYTHON) -> xr.Dataset:
    """Extract ``request`` as float32 series (points: dims time, point; box: time, latitude, longitude).
    Finished time blocks are cached (``cache``): the same or an overlapping request later reads them instead of the
    store, and an interrupted one fetches only the missing blocks. ``refresh`` ignores and overwrites cached blocks.
    ``cache_dir``: the block cache's root (default ``<user cache>/extracts``). ``stats``: a ``FetchStats`` to learn
    how many chunks were read and blocks reused. ``partial_reads=False`` reads whole chunks even where reading only
    the Blosc blocks that hold the cells would do (to measure what that saves). ``say``: how refusals and advice
    name settings (``source='sample'``; the CLI's ``--source sample``)."""
    check_selection(request, say)  # what needs no store, before the study's or the sample store is built
    ref = resolve_source(request.source, storage_options, say)
    hours, workers = check_sizes(block_hours, concurrency, say)
    fetch = dict(cache_dir=cache_dir, progress=progress, refresh=refresh, concurrency=workers, block_hours=hours,
                 stats=stats)
    meta = None if refresh else cached_meta(ref, cache_dir)
    offline_error: LstmnbError | None = None
    miss: CacheMiss | None = None
    if meta is not None:
        # Every block cached: check the request against the kept metadata and never touch the store.
        try:
            plan = make_plan(meta, ref, request)
            return assemble(plan, meta, fetch_plan(plan, **{**fetch, "offline": True}))
        except CacheMiss as exc:
            miss = exc
        except LstmnbError as exc:  # maybe the store has grown since; ask it
            offline_error = exc
    # One store (and, remotely, one connection pool) serves the metadata and then the chunk reads.
    store = zarr_store(ref.url, ref.remote, ref.storage_options, connections=workers, retry=retry)
    try:
        try:
            meta = StoreMeta.from_dataset(open_ref(ref, store, say))
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
        return assemble(plan, meta, fetch_plan(plan, **fetch, store=store, partial_reads=partial_reads))
    finally:
        store.close()


def assemble(plan: Plan, meta: StoreMeta, arrays: dict[tuple[str, str], np.ndarray]) -> xr.Dataset:
    """Turn per-(variable, target) arrays into the result Dataset with coordinates and attrs."""
    if plan.kind == "points":
        lat = plan.lat[[t.rows[0] for t in plan.targets]].astype(np.float32)
        lon = plan.lon[[t.cols[0] for t in plan.targets]].astype(np.float32)
        requested = np.array(plan.requested, dtype=np.float32).reshape(-1, 2)
        dims = ("time", "point")
        coords = {"point": ("point", [point_label(a, b) for a, b in zip(lat, lon)]),
                  "latitude": ("point", lat), "longitude": ("point", lon),
                  "requested_latitude": ("point", requested[:, 0]), "requested_longitude": ("point", requested[:, 1])}
        values = {v: np.stack([arrays[(v, t.key)] for t in plan.targets], axis=1) for v in plan.variables}
    else:
        target = plan.targets[0]
        dims = ("time", "latitude", "longitude")
        coords = {"latitude": plan.lat[list(target.rows)].astype(np.float32),
                  "longitude": plan.lon[list(target.cols)].astype(np.float32)}
        values = {v: arrays[(v, target.key)] for v in plan.variables}
    data_vars = {v: (dims, values[v].astype(np.float32), dict(meta.variables[v]["attrs"])) for v in plan.variables}
    out = xr.Dataset(data_vars, coords={"time": xr.DataArray(plan.times, dims="time", name="time"), **coords})
    out.attrs.update(source=plan.ref.source, source_url=plan.ref.url, store_id=plan.ref.store_id,
                     variables=",".join(plan.variables), start=str(pd.Timestamp(plan.times[0])),
                     end=str(pd.Timestamp(plan.times[-1])), selection=plan.kind,
                     request=json.dumps(asdict(plan.request)))
    return out


def to_frame(ds: xr.Dataset) -> pd.DataFrame:
    """A tidy table of an extraction: columns time, point, latitude, longitude, variable, value."""
    if "point" not in ds.dims:  # a box: one point per cell, named as points are
        flat = ds.stack(point=("latitude", "longitude"))
        lat, lon = flat["latitude"].values, flat["longitude"].values
        ds = flat.drop_vars(["point", "latitude", "longitude"]).assign_coords(
            point=[point_label(a, b) for a, b in zip(lat, lon)], latitude=("point", lat), longitude=("point", lon))
    keys = ["time", "point", "latitude", "longitude"]
    table = ds.drop_vars([c for c in ds.coords if c not in keys]).to_dataframe(dim_order=["time", "point"])
    return table.reset_index().melt(id_vars=keys, value_vars=list(ds.data_vars), var_name="variable",
                                    value_name="value")


def summary(ds: xr.Dataset) -> str:
    """A few lines describing an extraction, for the CLI and notebooks."""
    times = pd.DatetimeIndex(ds["time"].values)
    if "point" in ds.dims:
        cells = ", ".join(str(p) for p in ds["point"].values)
        n_cells = ds.sizes["point"]
    else:
        n_cells = ds.sizes["latitude"] * ds.sizes["longitude"]
        west, east = float(ds.longitude[0]), float(ds.longitude[-1])  # the box's columns run west to east
        cells = (f"{ds.sizes['latitude']} x {ds.sizes['longitude']} box, latitude "
                 f"{float(ds.latitude.min()):g}..{float(ds.latitude.max()):g}, longitude "
                 f"{west:g}..{east:g}{' (across 0)' if west > east else ''}")
    return "\n".join([
        f"source     {ds.attrs.get('source')}, {data_kind(ds.attrs.get('source'))} data ({ds.attrs.get('source_url')})",
        f"variables  {', '.join(ds.data_vars)}",
        f"time       {times[0]:%Y-%m-%dT%H:%M} .. {times[-1]:%Y-%m-%dT%H:%M} ({len(times)} hours)",
        f"cells      {cells}",
        f"rows       {len(times) * n_cells * len(ds.data_vars)} (tidy: time x cell x variable)",
    ])
