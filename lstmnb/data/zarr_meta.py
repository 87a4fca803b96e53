"""Zarr metadata, read in one place for both formats: what checking a request needs (``StoreMeta``)
and how each array's chunks are keyed and encoded (``ArrayMeta``, for reading them raw).

Zarr v2 keeps consolidated metadata in ``.zmetadata`` (an array's ``.zarray``, its dimension names
in ``.zattrs``); v3 in the root ``zarr.json``. Both are read into the same per-array view (``_arrays_v2``,
``_arrays_v3``) that one set of functions interprets: ``_layout`` (shape, chunks, chunk keys),
``array_meta`` (dtype and codecs too), ``_coordinate_keys`` (the chunks opening a store reads).
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
_PARSE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError)


# ------------------------------------------------------------------------------- one view of both formats

def _arrays_v2(md: dict) -> dict[str, dict]:
    """The top-level arrays in a v2 store's consolidated metadata (``.zmetadata``'s "metadata"): each
    its ``.zarray``, with the dimension names of its ``.zattrs`` under v3's key, "dimension_names"."""
    out = {}
    for key, zarray in md.items():
        name = key[:-len("/.zarray")]
        if key.endswith("/.zarray") and "/" not in name:
            dims = (md.get(f"{name}/.zattrs") or {}).get("_ARRAY_DIMENSIONS")
            out[name] = {**zarray, "dimension_names": dims}
    return out


def _arrays_v3(root: dict) -> dict[str, dict]:
    """The nodes in a v3 root ``zarr.json``'s consolidated metadata, by path (a copy)."""
    return dict((root.get("consolidated_metadata") or {}).get("metadata") or {})


@dataclass(frozen=True)
class _Layout:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    prefix: str  # before a chunk's indices in its key: "c/" in zarr v3's default encoding
    sep: str  # between the indices


def _layout(meta: dict) -> _Layout | None:
    """Shape, chunk shape and chunk-key layout of an array in either format; None where chunks are
    not plain keys of a regular grid (v3: sharded, an irregular grid, an unknown key encoding)."""
    if meta.get("zarr_format") == 2:
        return _Layout(tuple(meta["shape"]), tuple(meta["chunks"]), "", meta.get("dimension_separator", "."))
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        return None
    grid = meta["chunk_grid"]
    if grid.get("name") != "regular" or any(c.get("name") == "sharding_indexed" for c in meta.get("codecs") or []):
        return None
    enc = meta.get("chunk_key_encoding") or {"name": "default"}
    sep = (enc.get("configuration") or {}).get("separator", "/" if enc["name"] == "default" else ".")
    prefix = {"default": "c" + sep, "v2": ""}.get(enc["name"])
    if prefix is None:
        return None
    return _Layout(tuple(meta["shape"]), tuple(grid["configuration"]["chunk_shape"]), prefix, sep)


def _coordinate_keys(arrays: dict[str, dict]) -> list[str] | None:
    """The chunk keys of every dimension coordinate (what xarray reads when it opens the store); None
    when there are too many, one's chunks are not plain keys, or time, latitude or longitude lack."""
    keys: list[str] = []
    for name, meta in arrays.items():
        if meta.get("dimension_names") != [name] or len(meta["shape"]) != 1:
            continue  # only dimension coordinates are read when a store is opened
        layout = _layout(meta)
        if layout is None:
            return None
        n = -(-int(layout.shape[0]) // int(layout.chunks[0]))
        if n > MAX_COORD_CHUNKS:
            return None
        keys += [f"{name}/{layout.prefix}{i}" for i in range(n)]
    if not {"time", "latitude", "longitude"} <= {k.split("/")[0] for k in keys}:
        return None  # let open_ref name what is missing
    return keys


# ------------------------------------------------------------------------------- opening a store

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
        found = _from_consolidated(v2, 2, source, have) if v2 is not None else None
        if found is None and v3 is not None:
            found = _from_consolidated(v3, 3, source, have)
    except ChunkError as exc:
        raise DataError(f"cannot reach {ref.url}: {exc}; check the network, or use --source sample") from None
    if found is not None:
        return found
    return StoreMeta.from_dataset(open_ref(ref)), None


def _from_consolidated(raw: bytes, zarr_format: int, source: ChunkSource, have: dict[str, bytes | None]
                       ) -> tuple[StoreMeta, dict] | None:
    """StoreMeta from consolidated metadata (v2's ``.zmetadata`` or v3's root ``zarr.json``) and the
    dimension coordinates' chunks (``have``: those already fetched), with the metadata dict
    ``open_meta`` returns; None if the store is not laid out that way (v3: nested groups too)."""
    try:
        doc = json.loads(raw)
        if zarr_format == 2:
            md = doc["metadata"]
            if doc.get("zarr_consolidated_format") != 1 or md[".zgroup"].get("zarr_format") != 2:
                return None
            arrays, kept = _arrays_v2(md), md
            files = {".zmetadata": raw, ".zgroup": json.dumps(md[".zgroup"]).encode(),
                     ".zattrs": json.dumps(md.get(".zattrs") or {}).encode()}
        else:
            arrays, kept = _arrays_v3(doc), doc
            if doc.get("zarr_format") != 3 or doc.get("node_type") != "group" or not arrays:
                return None
            if any("/" in name or meta.get("node_type") != "array" for name, meta in arrays.items()):
                return None  # nested groups: xarray opens those
            files = {"zarr.json": raw, **{f"{name}/zarr.json": json.dumps(meta).encode()
                                          for name, meta in arrays.items()}}
        keys = _coordinate_keys(arrays)
    except _PARSE_ERRORS:
        return None
    if keys is None:
        return None
    meta = _open_in_memory(files, keys, have, source, zarr_format)
    return None if meta is None else (meta, kept)


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


# ------------------------------------------------------------------------------- reading chunks raw

@dataclass
class ArrayMeta:
    """What reading an array's chunks straight from their bytes needs."""

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


_V3_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def _codecs_v2(zarray: dict) -> tuple[np.dtype, str, object | None, list]:
    """(dtype, order, compressor, filters) of a zarr-v2 array, as numcodecs codecs."""
    import numcodecs

    return (np.dtype(zarray["dtype"]), zarray.get("order", "C"),
            numcodecs.get_codec(zarray["compressor"]) if zarray.get("compressor") else None,
            [numcodecs.get_codec(f) for f in (zarray.get("filters") or [])])


def _codecs_v3(meta: dict) -> tuple[np.dtype, str, object | None, list] | None:
    """As ``_codecs_v2`` for a zarr-v3 array: the ``bytes`` codec and at most one of blosc, zstd or gzip
    after it; None for other codec chains."""
    import numcodecs

    codecs = list(meta.get("codecs") or [])
    if not codecs or codecs[0]["name"] != "bytes" or len(codecs) > 2:
        return None
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
    return dtype, "C", compressor, []


def array_meta(meta: dict) -> ArrayMeta | None:
    """An array's metadata (either format) for the raw path: (time, y, x) with one time step per chunk
    and codecs this reads; None when the layout needs zarr's general reader."""
    layout = _layout(meta)
    if layout is None or len(layout.shape) != 3 or len(layout.chunks) != 3 or layout.chunks[0] != 1:
        return None
    codecs = _codecs_v2(meta) if meta["zarr_format"] == 2 else _codecs_v3(meta)
    if codecs is None:
        return None
    dtype, order, compressor, filters = codecs
    return ArrayMeta(layout.shape, layout.chunks, dtype, order, layout.sep, _fill_value(meta.get("fill_value")),
                     compressor, filters, layout.prefix)


def array_metas(variables: tuple[str, ...], source: ChunkSource, zmetadata: dict | None = None
                ) -> dict[str, ArrayMeta] | None:
    """Each variable's ``ArrayMeta``; None when any of them (or none at all) can be read raw.

    ``zmetadata`` is what ``open_meta`` returned (v2's ``.zmetadata`` contents or v3's root
    ``zarr.json``): reused, no second metadata read. Without it the store's ``.zmetadata`` is read,
    else its root ``zarr.json`` and the arrays' own ``zarr.json`` files. Raises ChunkError when the
    store cannot be read, ValueError, KeyError or TypeError for metadata that does not parse.
    """
    md = root = None
    if zmetadata is not None:
        md, root = (None, zmetadata) if zmetadata.get("zarr_format") == 3 else (zmetadata, None)
    else:
        raw = source.get(".zmetadata")
        if raw is not None:
            md = json.loads(raw)["metadata"]
        else:
            root = json.loads(source.get("zarr.json") or b"{}")
    if md is not None:
        arrays = _arrays_v2(md)
    else:  # zarr v3: the root's consolidated metadata, else each array's zarr.json
        arrays = _arrays_v3(root)
        missing = [v for v in variables if v not in arrays]
        for v, body in zip(missing, source.get_many([f"{v}/zarr.json" for v in missing])):
            arrays[v] = json.loads(body or b"{}")
    metas = {}
    for v in variables:
        m = array_meta(arrays.get(v, {}))
        if m is None:
            return None
        metas[v] = m
    return metas or None
