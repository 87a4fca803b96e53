"""The local block cache of extracted ERA5 series: self-verifying files, written atomically.

Layout under ``<cache>/extracts``: ``<store_id>/<variable>/<target>/b<hours>/<slot>_<a>-<b>_<crc32>.npy``. A *target* is
one grid cell (``cell-r<row>-c<col>``) or one box of cells; a *slot* is a fixed run of ``hours`` store time steps (slot
k holds store indices k*hours ... (k+1)*hours-1), shared by every request that touches the same cells; a file holds the
contiguous part ``a..b-1`` of its slot. A file is complete by construction (``paths.write_atomic``) and its name carries
the CRC32 of its bytes, so a truncated or corrupt file is deleted and fetched again, never used. A run removes stale
temporaries in the folders it uses (``paths.sweep_stale_temps``). ``<store_id>/store-meta.json`` keeps what checking a
request needs (time axis, grid, attributes, variables), so a request with every block cached never reaches the store.
"""

from __future__ import annotations

import io
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..paths import cache_dir, sweep_stale_temps, write_atomic
from .catalogue import StoreRef, point_label

DEFAULT_BLOCK_HOURS = 168  # a week of hourly chunks per cache file
# what xarray's CF decoding (mask and scale) takes from a variable into its encoding; reads apply it as xarray does
CF_KEYS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned")
META_NAME = "store-meta.json"


def extracts_root(root: str | os.PathLike | None = None) -> Path:
    """Where extracted blocks live: ``root`` when given (a caller's own folder), else ``<user cache>/extracts``."""
    return Path(root) if root is not None else cache_dir() / "extracts"


@dataclass(frozen=True)
class Block:
    """One cached slot part: store indices ``start .. stop-1`` and their values."""

    slot: int
    start: int
    stop: int
    data: np.ndarray


class BlockCache:
    """Reads and writes the blocks of one (store, variable, target) series."""

    def __init__(self, root: Path, store_id: str, variable: str, target: str, hours: int):
        self.hours = int(hours)
        self.dir = Path(root) / store_id / variable / target / f"b{self.hours}"
        self._listing: dict[int, list[Path]] | None = None  # slot -> its files; see _files

    def covers(self, slot: int, start: int, stop: int) -> bool:
        """Whether a file of ``slot`` claims store indices ``start..stop-1`` (by name; not verified)."""
        base = slot * self.hours
        return any(base + a <= start and stop <= base + b for _, a, b, _ in (_parse(p.name) for p in self._files(slot)))

    def _files(self, slot: int) -> list[Path]:
        """The files of ``slot``, from one listing of the folder taken when first needed (a listing per question
        was quadratic in the blocks: 5.5 s for 3,330). This cache's own writes and removals keep it right; files
        another process writes meanwhile are not seen, as if written just after (a fresh ``BlockCache`` sees them)."""
        if self._listing is None:
            listing: dict[int, list[Path]] = {}
            try:
                with os.scandir(self.dir) as entries:
                    for entry in sorted(entries, key=lambda e: e.name):  # each slot's files in name order
                        if (parsed := _parse(entry.name)) is not None:
                            listing.setdefault(parsed[0], []).append(Path(entry.path))
            except (FileNotFoundError, NotADirectoryError):
                pass
            self._listing = listing
        return self._listing.setdefault(slot, [])  # a list the writes and removals below keep right

    def read(self, slot: int) -> Block | None:
        """The widest valid cached part of ``slot``, or None. Corrupt files are removed."""
        best: Block | None = None
        for path in list(self._files(slot)):
            block = _load(path, slot, self.hours)
            if block is None:
                path.unlink(missing_ok=True)
                self._files(slot).remove(path)
            elif best is None or (block.stop - block.start) > (best.stop - best.start):
                best = block
        return best

    def write(self, block: Block) -> Path:
        """Store ``block`` atomically; older parts of the same slot it covers are removed."""
        self.dir.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(block.data), allow_pickle=False)
        payload = buf.getvalue()
        a, b = block.start - block.slot * self.hours, block.stop - block.slot * self.hours
        name = f"{block.slot:08d}_{a:04d}-{b:04d}_{zlib.crc32(payload):08x}.npy"
        final = write_atomic(self.dir / name, payload)
        files = self._files(block.slot)
        for other in [p for p in files if p != final]:
            parsed = _parse(other.name)
            if parsed and parsed[1] >= a and parsed[2] <= b:
                other.unlink(missing_ok=True)
                files.remove(other)
        files[:] = sorted({final, *files})
        return final


_NAME = re.compile(r"(\d+)_(\d+)-(\d+)_([0-9a-f]+)\.npy")  # what BlockCache.write names a file


def _parse(name: str) -> tuple[int, int, int, int] | None:
    """(slot, a, b, crc) from a block file name, or None if the name is not ours."""
    match = _NAME.fullmatch(name)
    return (int(match[1]), int(match[2]), int(match[3]), int(match[4], 16)) if match else None


def _load(path: Path, slot: int, hours: int) -> Block | None:
    """Load and verify one block file; None if its name, checksum or shape is wrong."""
    parsed = _parse(path.name)
    if parsed is None or parsed[0] != slot or not (0 <= parsed[1] < parsed[2] <= hours):
        return None
    try:
        payload = path.read_bytes()
        if zlib.crc32(payload) != parsed[3]:
            return None
        data = np.load(io.BytesIO(payload), allow_pickle=False)
    except (OSError, ValueError):
        return None
    if data.shape[0] != parsed[2] - parsed[1]:
        return None
    return Block(slot, slot * hours + parsed[1], slot * hours + parsed[2], data)


def write_store_meta(root: str | os.PathLike | None, store_id: str, meta: dict) -> Path:
    """Keep a store's metadata (JSON-able) beside its blocks, atomically and with a checksum."""
    body = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    folder = extracts_root(root) / store_id
    folder.mkdir(parents=True, exist_ok=True)
    sweep_stale_temps(folder)
    return write_atomic(folder / META_NAME, json.dumps({"crc32": zlib.crc32(body.encode()), "meta": body}).encode())


def read_store_meta(root: str | os.PathLike | None, store_id: str) -> dict | None:
    """A store's cached metadata, or None when absent or damaged (a damaged file is removed)."""
    path = extracts_root(root) / store_id / META_NAME
    try:
        outer = json.loads(path.read_bytes())
        body = outer["meta"]
        if zlib.crc32(body.encode()) != outer["crc32"]:
            raise ValueError("checksum")
        return json.loads(body)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        path.unlink(missing_ok=True)
        return None


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
    variables: dict[str, dict]  # name -> {"dims": [...], "attrs": {...}, "cf": {...}} (cf: CF_KEYS in the encoding)

    @classmethod
    def from_dataset(cls, ds: xr.Dataset) -> "StoreMeta":
        variables = {str(name): {"dims": [str(d) for d in var.dims], "attrs": _plain(dict(var.attrs)),
                                 "cf": _plain({k: var.encoding[k] for k in CF_KEYS if k in var.encoding})}
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
        ticks = (np.asarray(t["values"], dtype=np.int64) if "values" in t
                 else t["start"] + t["step"] * np.arange(t["count"], dtype=np.int64))
        return cls(ticks.astype(f"datetime64[{t['unit']}]"), np.asarray(d["latitude"], dtype=np.float64),
                   np.asarray(d["longitude"], dtype=np.float64), dict(d["attrs"]), dict(d["variables"]))


def cached_meta(ref: StoreRef, cache_dir: str | os.PathLike | None = None) -> StoreMeta | None:
    """The metadata kept for this store in the block cache, or None."""
    raw = read_store_meta(cache_dir, ref.store_id)
    if raw is None or raw.get("format") != 1:
        return None
    try:
        return StoreMeta.from_json(raw)
    except (KeyError, TypeError, ValueError):
        return None


def describe_target(key: str, lat: np.ndarray, lon: np.ndarray) -> str:
    """A cache target's key (``cell-r12-c4``, ``box-r4-12-c0-4-n5``: store rows and columns) in words, on the
    store's ``lat`` and ``lon``: ``cell 40.00N 280.00E``, ``box 38.00N..40.00N, 279.00E..280.00E (9 x 5 cells)``.
    A key this version does not know comes back as it is."""
    parts = key.split("-")
    try:
        if parts[0] == "cell" and len(parts) == 3:
            return f"cell {point_label(lat[int(parts[1][1:])], lon[int(parts[2][1:])])}"
        if parts[0] == "box" and len(parts) == 6:
            r0, r1, c0, c1, n = int(parts[1][1:]), int(parts[2]), int(parts[3][1:]), int(parts[4]), int(parts[5][1:])
            south, north = sorted((lat[r0], lat[r1]))
            a, b = point_label(south, lon[c0]).split(), point_label(north, lon[c1]).split()
            return f"box {a[0]}..{b[0]}, {a[1]}..{b[1]} ({abs(r1 - r0) + 1} x {n} cells)"
    except (ValueError, IndexError):
        pass
    return key


def status(root: str | os.PathLike | None = None) -> list[dict]:
    """One row per cached series: store, variable, target (its folder) and ``area`` (the same in words,
    from the store's cached grid), block size, files, hours and bytes cached."""
    base = extracts_root(root)
    rows = []
    grids: dict[str, tuple | None] = {}
    for bdir in sorted(base.glob("*/*/*/b*")):
        # A running extraction may be replacing files meanwhile (a checkpointed part by a wider one):
        # files gone by the time they are looked at are skipped, and per slot the widest one counts.
        widest: dict[int, tuple[int, int]] = {}  # slot -> (hours, bytes)
        for path in bdir.glob("*.npy"):
            if (parsed := _parse(path.name)) is None:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            hours = parsed[2] - parsed[1]
            if hours > widest.get(parsed[0], (0, 0))[0]:
                widest[parsed[0]] = (hours, size)
        if not widest:
            continue
        store_id, variable, target = bdir.parts[-4], bdir.parts[-3], bdir.parts[-2]
        if store_id not in grids:
            meta = read_store_meta(root, store_id)
            grids[store_id] = (np.asarray(meta["latitude"]), np.asarray(meta["longitude"])) if meta else None
        grid = grids[store_id]
        rows.append({"store": store_id, "variable": variable, "target": target,
                     "area": describe_target(target, *grid) if grid else target, "block_hours": int(bdir.name[1:]),
                     "blocks": len(widest), "hours": sum(h for h, _ in widest.values()),
                     "bytes": sum(b for _, b in widest.values())})
    return rows
