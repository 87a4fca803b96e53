"""What the loopback path of benchmarks/era5_extract.py allows: its bandwidth and request rate through
lstmnb's store, decode times on this machine, what reading only the Blosc blocks that hold the points
takes, and the limits they set (``show_limit``). A helper of era5_extract.py, not a benchmark of its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

POINTS = ((40.0, 280.0), (20.0, 280.0))  # as era5_extract.py's


def _get_all(server: str, keys: list[str], concurrency: int, byte_range=None) -> tuple[list[int], float]:
    """Sizes of ``keys`` fetched all at once through lstmnb's store of ``server`` (after one warm-up
    request), and the seconds they took."""
    import asyncio

    from zarr.core.buffer import default_buffer_prototype

    from lstmnb.data.stores import run, zarr_store

    store = zarr_store(server, True, connections=concurrency)
    proto = default_buffer_prototype()

    async def fetch(batch):
        return await asyncio.gather(*(store.get(k, proto, byte_range) for k in batch))

    try:
        run(fetch(keys[:1]))  # warm the connection pool
        t0 = time.perf_counter()
        sizes = [len(b) for b in run(fetch(keys))]
        return sizes, time.perf_counter() - t0
    finally:
        store.close()


def measure_bandwidth(server: str, hours: int, concurrency: int) -> tuple[float, float]:
    """Fetch every chunk straight from the server (no delay, no decode), as many in flight as the
    extraction, through the same store: (bytes, seconds)."""
    sizes, secs = _get_all(server, [f"2m_temperature/{t}.0.0" for t in range(hours)], concurrency)
    return float(sum(sizes)), secs


def measure_decode(store: Path, hours: int) -> float:
    """Seconds to decode every chunk once, one after another, on this machine."""
    import numcodecs

    comp = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    blobs = [(store / "2m_temperature" / f"{t}.0.0").read_bytes() for t in range(hours)]
    t0 = time.perf_counter()
    for b in blobs:
        np.frombuffer(comp.decode(b), dtype=np.float32)
    return time.perf_counter() - t0


def measure_request_rate(server: str, hours: int, concurrency: int) -> float:
    """Small (4 KB) range requests per second the path answers, as many in flight as the extraction."""
    from zarr.abc.store import RangeByteRequest

    keys = [f"2m_temperature/{t % hours}.0.0" for t in range(max(4 * hours, 1000))]
    _, secs = _get_all(server, keys, concurrency, RangeByteRequest(0, 4096))
    return len(keys) / secs


def _point_offsets() -> np.ndarray:
    """Byte offsets of POINTS in a 721 x 1440 float32 chunk (latitude 90..-90, longitude 0..359.75)."""
    rows = np.array([round((90 - lat) * 4) for lat, _ in POINTS])
    cols = np.array([round(lon * 4) for _, lon in POINTS])
    return (rows * 1440 + cols) * 4


def blocks_plan(store: Path, hours: int) -> dict:
    """What reading only the Blosc blocks that hold POINTS takes: bytes, requests, and the blocks.

    Mirrors lstmnb's partial read: one 4 KB range for the header and block table, then one range per
    run of adjacent needed blocks beyond it.
    """
    from lstmnb.data import blosc_parts
    from lstmnb.data.blosc_pipeline import HEAD_BYTES as _HEAD_BYTES

    total, requests, plan = 0, 0, []
    for t in range(hours):
        raw = (store / "2m_temperature" / f"{t}.0.0").read_bytes()
        head = blosc_parts.parse_header(raw)
        starts, stops = blosc_parts.block_extents(head, raw[:head.table_end])
        blocks = blosc_parts.blocks_holding(head, _point_offsets(), 4)
        ranges = [r for r in blosc_parts.byte_ranges(starts, stops, blocks) if r[1] > _HEAD_BYTES]
        total += min(_HEAD_BYTES, len(raw)) + sum(b - a for a, b in ranges)
        requests += 1 + len(ranges)
        plan.append((head, [(int(k), raw[starts[k]:stops[k]]) for k in blocks]))
    return {"bytes": total, "requests": requests, "plan": plan}


def measure_block_decode(part: dict) -> float:
    """Seconds to decode the needed blocks of every chunk and pick the points, one after another."""
    from lstmnb.data import blosc_parts

    offsets = _point_offsets()
    t0 = time.perf_counter()
    for head, blocks in part["plan"]:
        blosc_parts.gather(head, dict(blocks), offsets, np.float32)
    return time.perf_counter() - t0


def show_limit(label: str, nbytes: float, requests: int, chunks: int, bandwidth: float, rate: float,
               delay: float, concurrency: int, decode: float) -> tuple[float, float]:
    """Print and return the limit max(bytes / bandwidth, latency, requests / rate) + decode, and the same
    with the round trips that must come first added: opening the store, and for block reads a chunk's
    header before any of its blocks (no bytes of a block can flow before that).

    The latency term is requests x delay / concurrency in whole waves, and at least the round trips
    one chunk needs in a row (one for a whole chunk; two, header then blocks, for block reads).
    """
    chain = requests // chunks
    terms = (nbytes / bandwidth, max(chain, -(-requests // concurrency)) * delay, requests / rate)
    limit = max(terms) + decode
    first = delay * chain  # the store's metadata, then (block reads) the first headers
    print(f"limit, {label}: {nbytes / 1e6:,.0f} MB, {requests} requests: max({terms[0]:.2f} s bytes/bandwidth, "
          f"{terms[1]:.2f} s requests x delay / concurrency, {terms[2]:.2f} s requests / rate) + {decode:.2f} s "
          f"decode = {limit:.2f} s; {limit + first:.2f} s with the {chain} round trip(s) that must come first")
    return limit, limit + first
