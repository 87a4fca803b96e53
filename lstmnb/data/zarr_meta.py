"""Zarr metadata, read once: what checking a request needs (``StoreMeta``) and how each array's chunks
are keyed and encoded (``_ArrayMeta``), from zarr v2's ``.zmetadata`` or v3's ``zarr.json``.

``open_meta`` opens a store with consolidated metadata in one round trip; ``cached_meta`` reads the
copy kept beside the block cache, so a fully cached request never reaches the store.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DataError
from .cache import read_store_meta
from .catalogue import StoreRef, open_ref
from .transport import PROBE_RETRY, ChunkError, ChunkSource


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


def open_meta(ref: StoreRef, source: ChunkSource) -> tuple[StoreMeta, dict | None]:
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
    try:
        v2, v3, *first = source.get_many([".zmetadata", "zarr.json", *_USUAL_COORD_KEYS],
                                          retry=PROBE_RETRY if ref.remote else None)
        have = dict(zip(_USUAL_COORD_KEYS, first))
        found = _from_consolidated(v2, source, have) if v2 is not None else None
        if found is None and v3 is not None:
            found = _from_consolidated_v3(v3, source, have)
    except ChunkError as exc:
        raise DataError(f"cannot reach {ref.url}: {exc}; check the network, or use --source sample") from None
    if found is not None:
        return found
    return StoreMeta.from_dataset(open_ref(ref)), None


def _from_consolidated(raw: bytes, source: ChunkSource, have: dict[str, bytes | None]
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
                    source: ChunkSource, zarr_format: int) -> StoreMeta | None:
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


def _from_consolidated_v3(raw: bytes, source: ChunkSource, have: dict[str, bytes | None]
                          ) -> tuple[StoreMeta, dict] | None:
    """As ``_from_consolidated``, for a v3 root ``zarr.json`` with consolidated metadata; None if the
    store is not laid out that way (nested groups, sharded or many-chunk coordinates)."""
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


def as_meta(ds: "xr.Dataset | StoreMeta") -> StoreMeta:
    """``ds`` itself when it is a StoreMeta, else what an opened store's Dataset says."""
    return ds if isinstance(ds, StoreMeta) else StoreMeta.from_dataset(ds)


def cached_meta(ref: StoreRef, cache_dir: str | os.PathLike | None = None) -> StoreMeta | None:
    """The metadata kept for this store in the block cache, or None."""
    raw = read_store_meta(cache_dir, ref.store_id)
    if raw is None or raw.get("format") != 1:
        return None
    try:
        return StoreMeta.from_json(raw)
    except (KeyError, TypeError, ValueError):
        return None



@dataclass
class _ArrayMeta:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    order: str
    sep: str
    fill: float
    compressor: object | None
    filters: list
    prefix: str = ""  # before a chunk's indices in its key: "c/" in zarr v3's default encoding

    def key(self, variable: str, t: int, jy: int, jx: int) -> str:
        return f"{variable}/{self.prefix}{t}{self.sep}{jy}{self.sep}{jx}"


def _fill_value(value) -> float:
    """What a missing chunk reads as, from the metadata's ``fill_value``: a number, "NaN", or null (no
    fill value; read as NaN). ValueError for anything else: zarr's reader handles those stores."""
    return np.nan if value in (None, "NaN") else float(value)


def _array_meta(zarray: dict) -> _ArrayMeta | None:
    """Parse a zarr-v2 .zarray for the raw path; None when the layout needs zarr's general reader."""
    import numcodecs

    if zarray.get("zarr_format") != 2 or len(zarray.get("shape", ())) != 3 or zarray["chunks"][0] != 1:
        return None
    return _ArrayMeta(
        tuple(zarray["shape"]), tuple(zarray["chunks"]), np.dtype(zarray["dtype"]), zarray.get("order", "C"),
        zarray.get("dimension_separator", "."), _fill_value(zarray.get("fill_value")),
        numcodecs.get_codec(zarray["compressor"]) if zarray.get("compressor") else None,
        [numcodecs.get_codec(f) for f in (zarray.get("filters") or [])],
    )


_V3_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def v3_key_layout(meta: dict) -> tuple[str, str] | None:
    """(prefix, separator) of a zarr-v3 array's chunk keys: ("c/", "/") makes ``c/12/0/0``; None for
    an encoding this does not know."""
    enc = meta.get("chunk_key_encoding") or {"name": "default"}
    sep = (enc.get("configuration") or {}).get("separator", "/" if enc["name"] == "default" else ".")
    prefix = {"default": "c" + sep, "v2": ""}.get(enc["name"])
    return None if prefix is None else (prefix, sep)


def _array_meta_v3(meta: dict) -> _ArrayMeta | None:
    """Parse a zarr-v3 array's zarr.json for the raw path: regular one-hour chunks, the ``bytes`` codec
    and at most one of blosc, zstd or gzip after it (no sharding); None otherwise."""
    import numcodecs

    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array" or len(meta.get("shape", ())) != 3:
        return None
    grid = meta["chunk_grid"]
    chunks = tuple(grid["configuration"]["chunk_shape"]) if grid.get("name") == "regular" else ()
    if len(chunks) != 3 or chunks[0] != 1:
        return None
    layout = v3_key_layout(meta)
    codecs = list(meta.get("codecs") or [])
    if layout is None or not codecs or codecs[0]["name"] != "bytes" or len(codecs) > 2:
        return None
    prefix, sep = layout
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    dtype = np.dtype(meta["data_type"]).newbyteorder("<" if endian == "little" else ">")
    compressor = None
    if len(codecs) == 2:
        name, conf = codecs[1]["name"], codecs[1].get("configuration") or {}
        if name == "blosc":
            compressor = numcodecs.Blosc(cname=conf.get("cname", "zstd"), clevel=conf.get("clevel", 5),
                                         shuffle=_V3_SHUFFLE[conf.get("shuffle", "noshuffle")],
                                         blocksize=conf.get("blocksize", 0))
        elif name == "zstd":
            compressor = numcodecs.Zstd(level=conf.get("level", 0))
        elif name == "gzip":
            compressor = numcodecs.GZip(level=conf.get("level", 5))
        else:
            return None
    fill = _fill_value(meta.get("fill_value"))
    return _ArrayMeta(tuple(meta["shape"]), chunks, dtype, "C", sep, fill, compressor, [], prefix)
