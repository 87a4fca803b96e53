"""Block-wise concurrent extraction: read each needed one-hour chunk once, fill cache blocks in order.

The plan's time range is cut into cache slots (``era5_cache``). Slots already cached are read from
disk; for the rest, every (variable, hour) chunk is read once by a pool of I/O threads, every target
(cell or box) takes its values from it, and a slot is written to the cache the moment its last hour
arrives. Chunks are submitted in time order through a bounded window, so at any moment only the
newest one or two slots are unfinished: a killed run loses at most those.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .era5_cache import DEFAULT_BLOCK_HOURS, Block, BlockCache, extracts_root
from .errors import ConfigError, DataError

if TYPE_CHECKING:
    from .era5 import Plan

DEFAULT_CONCURRENCY = 32


@dataclass
class _Pending:
    """A slot being filled: its full range, what the cache already had, and hours still missing."""

    cache: BlockCache
    slot: int
    start: int
    stop: int
    shape: tuple[int, ...]
    have: Block | None
    missing: set[int]
    values: dict[int, np.ndarray] = field(default_factory=dict)

    def finish(self) -> Block:
        data = np.full((self.stop - self.start, *self.shape), np.nan, dtype=np.float32)
        if self.have is not None:
            data[self.have.start - self.start:self.have.stop - self.start] = self.have.data
        for t, v in self.values.items():
            data[t - self.start] = v
        return Block(self.slot, self.start, self.stop, data)


@dataclass
class FetchStats:
    """What a fetch did: chunks read, bytes read (when known), blocks reused and written, seconds."""

    chunks: int = 0
    bytes: int = 0
    blocks_cached: int = 0
    blocks_written: int = 0
    seconds: float = 0.0


class ZarrReader:
    """Reads one (variable, hour) chunk's bounding box of the requested cells through zarr."""

    def __init__(self, plan: "Plan"):
        import zarr

        ref = plan.ref
        if ref.remote:
            self.group = zarr.open_group(ref.url, mode="r", storage_options=ref.storage_options or None)
        else:
            self.group = zarr.open_group(ref.url, mode="r")
        rows, cols = plan.rows, plan.cols
        self.r0, self.r1 = int(rows.min()), int(rows.max()) + 1
        self.c0, self.c1 = int(cols.min()), int(cols.max()) + 1
        self.arrays = {v: self.group[v] for v in plan.variables}
        self.bytes_read = 0

    def read(self, variable: str, t: int) -> np.ndarray:
        return np.asarray(self.arrays[variable][t, self.r0:self.r1, self.c0:self.c1])


def fetch_plan(
    plan: "Plan",
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    refresh: bool = False,
    concurrency: int | None = None,
    block_hours: int | None = None,
    stats: FetchStats | None = None,
) -> dict[tuple[str, str], np.ndarray]:
    """Return {(variable, target key): array over plan's hours}, from the cache where possible."""
    hours = int(block_hours or DEFAULT_BLOCK_HOURS)
    workers = int(concurrency or DEFAULT_CONCURRENCY)
    if hours < 1:
        raise ConfigError(f"block_hours must be >= 1, got {hours}")
    if workers < 1:
        raise ConfigError(f"concurrency must be >= 1, got {workers}")
    stats = stats if stats is not None else FetchStats()
    t_start = time.perf_counter()
    root = extracts_root(cache_dir)
    store_id = plan.ref.store_id

    done: dict[tuple[str, str, int], Block] = {}
    pending: dict[tuple[str, str, int], _Pending] = {}
    needs: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for v in plan.variables:
        for target in plan.targets:
            cache = BlockCache(root, store_id, v, target.key, hours)
            shape = () if plan.kind == "points" else (len(target.rows), len(target.cols))
            for slot in range(plan.i0 // hours, (plan.i1 - 1) // hours + 1):
                a, b = max(plan.i0, slot * hours), min(plan.i1, (slot + 1) * hours)
                have = None if refresh else cache.read(slot)
                if have is not None and have.start <= a and b <= have.stop:
                    done[(v, target.key, slot)] = have
                    stats.blocks_cached += 1
                    continue
                if have is not None and (have.stop < a or have.start > b):
                    have = None  # disjoint parts are not merged; the new part replaces it
                lo = a if have is None else min(a, have.start)
                hi = b if have is None else max(b, have.stop)
                missing = {t for t in range(lo, hi) if have is None or not have.start <= t < have.stop}
                pending[(v, target.key, slot)] = _Pending(cache, slot, lo, hi, shape, have, missing)
                for t in missing:
                    needs.setdefault((v, t), []).append((target.key, slot))

    if needs:
        _run(plan, pending, needs, done, workers, progress, stats)
    stats.seconds = time.perf_counter() - t_start

    out: dict[tuple[str, str], np.ndarray] = {}
    for v in plan.variables:
        for target in plan.targets:
            parts = []
            for slot in range(plan.i0 // hours, (plan.i1 - 1) // hours + 1):
                blk = done[(v, target.key, slot)]
                a, b = max(plan.i0, slot * hours), min(plan.i1, (slot + 1) * hours)
                parts.append(blk.data[a - blk.start:b - blk.start])
            out[(v, target.key)] = np.concatenate(parts, axis=0).astype(np.float32, copy=False)
    return out


def _run(plan, pending, needs, done, workers, progress, stats) -> None:
    """Read the needed chunks concurrently, in time order, writing each slot as it completes."""
    reader = ZarrReader(plan)
    targets = {t.key: t for t in plan.targets}
    r0, c0 = reader.r0, reader.c0
    index = {
        key: (np.asarray(t.rows) - r0, np.asarray(t.cols) - c0) for key, t in targets.items()
    }
    order = sorted(needs, key=lambda vt: (vt[1], plan.variables.index(vt[0])))
    per_hour: dict[int, int] = {}
    for _, t in order:
        per_hour[t] = per_hour.get(t, 0) + 1

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(per_hour), unit="h", desc=f"ERA5 {plan.ref.source}", leave=True)

    def task(vt: tuple[str, int]) -> np.ndarray:
        v, t = vt
        try:
            return reader.read(v, t)
        except Exception as exc:  # noqa: BLE001 - becomes one clear error naming time and store
            when = str(np.datetime64(plan.times[0] + (t - plan.i0) * np.timedelta64(1, "h"), "h"))
            raise DataError(
                f"reading {v} at {when} from {plan.ref.url} failed: {type(exc).__name__}: "
                f"{(str(exc).splitlines() or [''])[0][:200]}; finished blocks are kept, run again to resume"
            ) from None

    in_flight: dict[Future, tuple[str, int]] = {}
    it = iter(order)
    window = max(workers * 2, workers + 4)
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="era5-read") as pool:
            exhausted = False
            while in_flight or not exhausted:
                while not exhausted and len(in_flight) < window:
                    nxt = next(it, None)
                    if nxt is None:
                        exhausted = True
                        break
                    in_flight[pool.submit(task, nxt)] = nxt
                if not in_flight:
                    break
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in finished:
                    v, t = in_flight.pop(fut)
                    chunk = fut.result()  # raises DataError; pool shutdown waits for the rest
                    stats.chunks += 1
                    for key, slot in needs[(v, t)]:
                        rows, cols = index[key]
                        p = pending[(v, key, slot)]
                        if plan.kind == "points":
                            p.values[t] = chunk[rows[0], cols[0]]
                        else:
                            p.values[t] = chunk[np.ix_(rows, cols)]
                        p.missing.discard(t)
                        if not p.missing:
                            block = p.finish()
                            p.cache.write(block)
                            done[(v, key, slot)] = block
                            stats.blocks_written += 1
                            del pending[(v, key, slot)]
                    per_hour[t] -= 1
                    if per_hour[t] == 0 and bar is not None:
                        bar.update(1)
    except BaseException:
        for fut in in_flight:
            fut.cancel()
        raise
    finally:
        stats.bytes += reader.bytes_read
        if bar is not None:
            bar.close()
