"""Stores in the ARCO-ERA5 layout that lstmnb builds itself: writing, checking, building once into the user cache.

Two stores are made this way, the real ERA5 of the study's two points (``study``) and the synthetic sample (``sample``).
Both copy the public store's layout, so the code path from ``open_zarr`` to a tidy series is the one the cloud store
takes: variables with dims (time, latitude, longitude), latitude descending and longitude in 0..360 (float32), time
hourly as int64 hours since 1900-01-01, one time step per chunk, Blosc-LZ4 with byte shuffle (zarr format 2),
consolidated metadata, and the ``valid_time_start``/``valid_time_stop`` dataset attributes. A completion marker written
last lists every file with its size and CRC32, so a store that lost, cut or changed a file is found out before anything
reads it (``store_problem``) and rebuilt.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from ..errors import DataError
from ..paths import CACHE_ENV, atomic_path, cache_dir, locked, sweep_stale_temps

VARIABLE_ATTRS = {
    "2m_temperature": {"long_name": "2 metre temperature", "short_name": "t2m", "units": "K"},
    "surface_pressure": {"long_name": "Surface pressure", "short_name": "sp", "units": "Pa"},
}
DONE = ".lstmnb-sample-complete"  # the completion marker's name (kept: stores built before still check)


def write_store(path: str | os.PathLike, times: pd.DatetimeIndex, lat: np.ndarray, lon: np.ndarray,
                fields: Mapping[str, np.ndarray], attrs: Mapping[str, object], *, blocksize: int = 0,
                marker: Mapping[str, object] | None = None) -> Path:
    """Write ``fields`` (name -> (time, latitude, longitude) float32) at ``path`` in the ARCO layout, then its
    completion marker (``marker``'s entries plus every file's size and CRC32). ``path`` must not exist.
    ``blocksize``: Blosc's block size in bytes (0: Blosc chooses, as for the public store)."""
    import numcodecs
    import xarray as xr
    import zarr

    path = Path(path)
    coords = xr.Dataset(coords={"time": times, "latitude": np.asarray(lat, np.float32),
                                "longitude": np.asarray(lon, np.float32)})
    coords["latitude"].attrs.update(long_name="latitude", units="degrees_north")
    coords["longitude"].attrs.update(long_name="longitude", units="degrees_east")
    coords.attrs.update(valid_time_start=times[0].strftime("%Y-%m-%d"), valid_time_stop=times[-1].strftime("%Y-%m-%d"),
                        **attrs)
    encoding = {"time": {"units": "hours since 1900-01-01", "calendar": "proleptic_gregorian", "dtype": "int64"}}
    coords.to_zarr(path, zarr_format=2, consolidated=False, encoding=encoding, mode="w-")

    compressor = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=blocksize)
    group = zarr.open_group(path, mode="r+", zarr_format=2)
    nt, ny, nx = len(times), len(lat), len(lon)
    written: dict[str, list[int]] = {}  # each chunk's [size, CRC32], for the marker
    for name, values in fields.items():
        arr = group.create_array(name, shape=(nt, ny, nx), chunks=(1, ny, nx), dtype="float32", fill_value=np.nan,
                                 compressors=compressor, chunk_key_encoding={"name": "v2", "separator": "."})
        arr.attrs.update({**VARIABLE_ATTRS.get(name, {}), "_ARRAY_DIMENSIONS": ["time", "latitude", "longitude"]})
        # Write the chunk files directly (v2 keys "<t>.0.0"): zarr's per-chunk machinery takes ~10 s for 13k
        # chunks, plain file writes well under one.
        data = np.ascontiguousarray(values, dtype=np.float32)
        for t in range(nt):
            chunk = compressor.encode(data[t])
            (path / name / f"{t}.0.0").write_bytes(chunk)
            written[f"{name}/{t}.0.0"] = [len(chunk), zlib.crc32(chunk)]
    zarr.consolidate_metadata(path, zarr_format=2)
    (path / DONE).write_text(json.dumps({**(marker or {}), "files": files_of(path, written)}))
    return path


def files_of(path: Path, written: Mapping[str, list[int]] | None = None) -> dict[str, list[int]]:
    """Every file of the store below ``path`` (but the marker) with its [size in bytes, CRC32 of its content], read
    from the file unless ``written`` has it (what a writer computed from the bytes it wrote: reading the sample store's
    26,256 chunks back took 2 s of its 15 s build). Reading all of them costs about twice what their sizes alone do
    (the sample store's 26,272 files with a warm page cache: 0.7 s against 0.3 s; benchmarks/integrity_cost.py)."""
    out: dict[str, list[int]] = {}
    written = written or {}
    for root, _, names in os.walk(path):
        folder = Path(root).relative_to(path).as_posix()  # "." at the top
        for name in names:
            key = name if folder == "." else f"{folder}/{name}"
            if key in written:
                out[key] = list(written[key])
            elif key != DONE:
                content = Path(root, name).read_bytes()
                out[key] = [len(content), zlib.crc32(content)]
    return out


def store_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with the built store at ``path`` (None: finished and intact): missing, unfinished, or files
    missing, or of another size or content (CRC32) than when it was written (checked against its marker)."""
    path = Path(path)
    if not path.is_dir():
        return "not built yet"
    try:
        marker = json.loads((path / DONE).read_text())
    except (OSError, ValueError):
        return "unfinished (no completion marker)"
    files = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, list) for v in files.values()):
        return "made by an older lstmnb (no file list with checksums to check it against)"
    have = files_of(path)
    missing = sorted(k for k in files if k not in have)
    changed = sorted(k for k, want in files.items() if k in have and have[k] != want)
    parts = [f"{len(names)} file(s) {what} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
             for names, what in ((missing, "missing"), (changed, "cut or changed, by size or checksum")) if names]
    return "; ".join(parts) or None


def built_store(name: str, write: Callable[[Path], object], what: str) -> Path:
    """The store ``name`` in the user cache, written by ``write(path)`` (atomically) when it is not there,
    unfinished or damaged; a damaged one is rebuilt with a note on stderr naming ``what`` it is (both stores
    are deterministic, so the rebuilt one is the same). Temporaries of killed builds are removed."""
    root = cache_dir()
    sweep_stale_temps(root, final=name)
    target = root / name
    if _intact(target):
        return target
    # one builder at a time per store and cache folder (the others wait, then find it built)
    lock_file = os.open(root / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    with os.fdopen(lock_file, "r+b") as lock, locked(lock.fileno()):
        problem = store_problem(target)
        if problem is None:  # another process built it while this one waited
            return target
        if target.exists():
            print(f"lstmnb: rebuilding {what} {target} ({problem}); it is deterministic, so the data are the "
                  f"same (10-30 s)", file=sys.stderr)
        try:
            with atomic_path(target) as tmp:
                write(tmp)
        except OSError as exc:
            raise DataError(f"cannot build {what} in {root}: {exc.strerror or exc}; free some space there or "
                            f"point {CACHE_ENV} at another folder") from None
    return target


def _intact(target: Path) -> bool:
    """``store_problem`` is None, checked (reading every file: ``files_of``) once per process for a store whose
    folders are unchanged (a deleted or added file changes its folder's mtime)."""
    try:
        folders = (target, *(p for p in target.iterdir() if p.is_dir()))
        key = (str(target), tuple(os.stat(d).st_mtime_ns for d in folders))
    except OSError:
        return False
    if key not in _INTACT and store_problem(target) is not None:
        return False
    _INTACT.add(key)
    return True


_INTACT: set[tuple] = set()  # stores found intact in this process (a memo, not a switch)

