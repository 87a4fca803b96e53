"""The local block cache of extracted ERA5 series: self-verifying files, written atomically.

Layout under ``<cache>/extracts``::

    <store_id>/<variable>/<target>/b<hours>/<slot>_<a>-<b>_<crc32>.npy

A *target* is one grid cell (``cell-r<row>-c<col>``) or one box of cells; a *slot* is a fixed run of
``hours`` store time steps (slot k holds store indices k*hours ... (k+1)*hours-1), and a file holds the
contiguous part ``a..b-1`` of its slot. A file is complete by construction (written to a temporary
name, then renamed) and carries the CRC32 of its bytes in its name, so a truncated or corrupt file is
detected, deleted and fetched again, never silently used. Slots are shared by every request that
touches the same cells, so overlapping requests reuse each other's work.
"""

from __future__ import annotations

import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .paths import cache_dir

DEFAULT_BLOCK_HOURS = 168  # a week of hourly chunks per cache file


def extracts_root(root: str | os.PathLike | None = None) -> Path:
    """Where extracted blocks live: ``<root or the user cache>/extracts``."""
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

    def _files(self, slot: int) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(self.dir.glob(f"{slot:08d}_*.npy"))

    def read(self, slot: int) -> Block | None:
        """The widest valid cached part of ``slot``, or None. Corrupt files are removed."""
        best: Block | None = None
        for path in self._files(slot):
            block = _load(path, slot, self.hours)
            if block is None:
                path.unlink(missing_ok=True)
                continue
            if best is None or (block.stop - block.start) > (best.stop - best.start):
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
        final = self.dir / name
        tmp = self.dir / f".{name}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        for other in self._files(block.slot):
            if other != final:
                parsed = _parse(other.name)
                if parsed and parsed[1] >= a and parsed[2] <= b:
                    other.unlink(missing_ok=True)
        return final


def _parse(name: str) -> tuple[int, int, int, int] | None:
    """(slot, a, b, crc) from a block file name, or None if the name is not ours."""
    try:
        stem = name[:-4] if name.endswith(".npy") else None
        slot_s, rng, crc_s = stem.split("_")  # type: ignore[union-attr]
        a_s, b_s = rng.split("-")
        return int(slot_s), int(a_s), int(b_s), int(crc_s, 16)
    except (AttributeError, ValueError):
        return None


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
    base = slot * hours
    return Block(slot, base + parsed[1], base + parsed[2], data)


def status(root: str | os.PathLike | None = None) -> list[dict]:
    """One row per cached series: store, variable, target, block size, files, hours and bytes cached."""
    base = extracts_root(root)
    rows = []
    if not base.is_dir():
        return rows
    for bdir in sorted(base.glob("*/*/*/b*")):
        files = [p for p in bdir.glob("*.npy") if _parse(p.name)]
        if not files:
            continue
        store_id, variable, target = bdir.parts[-4], bdir.parts[-3], bdir.parts[-2]
        hours = sum(_parse(p.name)[2] - _parse(p.name)[1] for p in files)  # type: ignore[index]
        rows.append({
            "store": store_id, "variable": variable, "target": target, "block_hours": int(bdir.name[1:]),
            "blocks": len(files), "hours": hours, "bytes": sum(p.stat().st_size for p in files),
        })
    return rows
