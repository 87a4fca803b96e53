"""Block-wise concurrent extraction: read each needed one-hour chunk once, fill cache blocks in order.

The plan's time range is cut into cache slots (``cache``). Cached slots are read from disk; for the rest, every
(variable, hour) is read once through zarr (``reads``: runs of hours, many in flight on zarr's event loop), every target
(cell or box) takes its values from it, and a slot is written to the cache the moment its last hour arrives. Reads stay
pipelined across slot boundaries, but never more than one block's worth of hours is read (or in flight) without being
kept: when the window would go further, the oldest unfinished slot's received prefix is written as a partial block (a
checkpoint, at most a few per slot). So a killed run redoes at most one block of reads, and resumes from the checkpoint.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np

from ..errors import DataError
from ..paths import CACHE_ENV, sweep_stale_temps, why_not_written
from ..rules import PYTHON, Spelling, whole
from .cache import DEFAULT_BLOCK_HOURS, Block, BlockCache, extracts_root
from .plan import Plan
from .reads import CellReader
from .stores import ReadStore, StoreError, submit

DEFAULT_CONCURRENCY = 128  # connections; about twice as many hours' reads in flight (see _run)
MAX_FAILED_CHUNKS = 8  # after this many chunks fail for good, stop starting new ones


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
    frontier: int  # the first hour this slot needs that is not in the cache (before it: cached, or checkpointed)
    values: dict[int, np.ndarray] = field(default_factory=dict)
    failed: bool = False

    def received_to(self) -> int:
        """End of the run of received hours from ``start`` (checkpoints only when nothing was cached)."""
        return min(self.missing, default=self.stop) if self.have is None else self.start

    def part(self, stop: int) -> Block:
        return Block(self.slot, self.start, stop, np.stack([self.values[t] for t in range(self.start, stop)]))

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
    requests: int = 0
    blocks_cached: int = 0
    blocks_written: int = 0
    seconds: float = 0.0


class CacheMiss(DataError):
    """Raised by an ``offline`` fetch when some block of the plan is not in the cache."""

    def __init__(self, cached: int, total: int):
        super().__init__(f"{total - cached} of {total} blocks of this request are not cached")
        self.cached, self.total = cached, total


MAX_BLOCK_HOURS = 24 * 366  # a cache file of more than a year of hours helps nothing
MAX_CONCURRENCY = 4096  # threads or open requests; far past where more hides more round trips


def check_sizes(block_hours: int | None, concurrency: int | None, say: Spelling = PYTHON) -> tuple[int, int]:
    """(block hours, requests in flight) with their defaults; a ConfigError naming one outside its range as ``say``
    spells it (``--block-hours 0``, ``block_hours=0``)."""
    hours = DEFAULT_BLOCK_HOURS if block_hours is None else block_hours
    workers = DEFAULT_CONCURRENCY if concurrency is None else concurrency
    for name, value, top in (("block_hours", hours, MAX_BLOCK_HOURS), ("concurrency", workers, MAX_CONCURRENCY)):
        if why := whole(1, top).why(value):
            raise say.refuse(name, value, why)
    return int(hours), int(workers)


def fetch_plan(plan: Plan, *, cache_dir: str | os.PathLike | None = None, progress: bool = True,
               refresh: bool = False, concurrency: int = DEFAULT_CONCURRENCY, block_hours: int = DEFAULT_BLOCK_HOURS,
               stats: FetchStats | None = None, offline: bool = False, store: ReadStore | None = None,
               partial_reads: bool = True) -> dict[tuple[str, str], np.ndarray]:
    """Return {(variable, target key): array over plan's hours}, from the cache where possible. ``offline``: serve
    from the cache only; raise ``CacheMiss`` (touching nothing remote, counting nothing in ``stats``) when any block
    is missing or damaged. ``store``: the open store (with its retry policy) the plan was made on, read for what the
    cache lacks (the caller closes it); needed unless ``offline``. ``partial_reads``: read only the Blosc blocks
    that hold the cells where possible (else whole chunks)."""
    if store is None and not offline:
        raise TypeError("fetch_plan needs the plan's open store unless offline")
    hours, workers = block_hours, concurrency  # as check_sizes passed them (extract checks them first)
    outer = stats if stats is not None else FetchStats()
    stats = FetchStats() if offline else outer
    t_start = time.perf_counter()
    root, store_id = extracts_root(cache_dir), plan.ref.store_id
    slots = range(plan.i0 // hours, (plan.i1 - 1) // hours + 1)
    span = {slot: (max(plan.i0, slot * hours), min(plan.i1, (slot + 1) * hours)) for slot in slots}  # the plan's part
    caches = {(v, t.key): BlockCache(root, store_id, v, t.key, hours) for v in plan.variables for t in plan.targets}
    blocks = len(caches) * len(slots)
    for cache in caches.values():
        sweep_stale_temps(cache.dir)  # leftovers of a killed run
    if offline:  # with refresh, no cached block counts
        covered = 0 if refresh else sum(cache.covers(slot, *span[slot]) for cache in caches.values() for slot in slots)
        if covered < blocks:
            raise CacheMiss(covered, blocks)

    done: dict[tuple[str, str, int], Block] = {}
    pending: dict[tuple[str, str, int], _Pending] = {}
    needs: dict[tuple[str, int], list[tuple[str, int]]] = {}
    shapes = {t.key: () if plan.kind == "points" else (len(t.rows), len(t.cols)) for t in plan.targets}
    for (v, key), cache in caches.items():
        for slot, (a, b) in span.items():
            have = None if refresh else cache.read(slot)
            if have is not None and have.start <= a and b <= have.stop:
                done[(v, key, slot)] = have
                stats.blocks_cached += 1
                continue
            if have is not None and (have.stop < a or have.start > b):
                have = None  # disjoint parts are not merged; the new part replaces it
            lo, hi = (a, b) if have is None else (min(a, have.start), max(b, have.stop))
            missing = {t for t in range(lo, hi) if have is None or not have.start <= t < have.stop}
            pending[(v, key, slot)] = _Pending(cache, slot, lo, hi, shapes[key], have, missing, min(missing, default=hi))
            for t in missing:
                needs.setdefault((v, t), []).append((key, slot))

    if needs and offline:
        raise CacheMiss(blocks - len(pending), blocks)  # damaged files
    if needs:
        reader = CellReader(plan, store, partial_reads)
        store.requests = store.bytes_read = 0  # from here on: chunk reads only
        _run(plan, reader, pending, needs, done, workers, hours, progress, stats)
    stats.seconds = time.perf_counter() - t_start
    if offline:
        outer.blocks_cached, outer.seconds = outer.blocks_cached + stats.blocks_cached, outer.seconds + stats.seconds

    def kept(key: tuple[str, str], slot: int) -> np.ndarray:
        block, (a, b) = done[(*key, slot)], span[slot]
        return block.data[a - block.start:b - block.start]

    return {key: np.concatenate([kept(key, slot) for slot in slots]).astype(np.float32, copy=False) for key in caches}


# hours per zarr read: one call per hour cost about a third more (720 hours of an ARCO-sized local store, two
# points: 0.66 s one hour per call, 0.48 s four, 0.46 s sixteen), and at 720 h over loopback HTTP 1.28 s
# against 0.89 s with runs of 8 (benchmarks/era5_extract.py)
RUN_HOURS = 8


def _runs(needs, variables: tuple[str, ...], hours: int) -> list[tuple[str, int, int]]:
    """The needed (variable, hour)s as runs ``(variable, first, end)`` of consecutive hours, at most ``RUN_HOURS``
    (and an eighth of a cache block) long and aligned to multiples of it, in time order: one zarr read each."""
    size = max(1, min(RUN_HOURS, hours // 8))
    runs = []
    for v in variables:
        # consecutive hours keep the same hour minus position; a run also stays within one aligned stretch
        ordered = enumerate(sorted(t for vv, t in needs if vv == v))
        for _, run in groupby(ordered, key=lambda it: (it[1] - it[0], it[1] // size)):
            hours_of_run = [t for _, t in run]
            runs.append((v, hours_of_run[0], hours_of_run[-1] + 1))
    return sorted(runs, key=lambda r: (r[1], variables.index(r[0])))


def _run(plan, reader, pending, needs, done, workers, hours, progress, stats) -> None:
    """Read the needed chunks concurrently, in time order, writing each slot as it completes. A run of hours
    goes out only while it ends within ``hours`` of the frontier (the first needed hour not in the cache);
    at that bound the oldest slots' received prefixes are checkpointed (at least a quarter block each time),
    which moves the frontier on without draining the pipeline at slot boundaries."""
    index = {t.key: i for i, t in enumerate(plan.targets)}  # a points read: one value per target, in order
    order = _runs(needs, plan.variables, hours)
    per_hour = Counter(t for _, t in needs)  # reads each hour still waits for

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(per_hour), unit="h", desc=f"ERA5 {plan.ref.source}", leave=True,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} h [{elapsed}<{remaining}, {rate_fmt}{postfix}]")
    t_bar = time.perf_counter()
    last_post = 0.0

    def failed(v: str, t: int, exc: Exception) -> DataError:
        """One clear error naming the variable, the time and the store."""
        when = str(np.datetime64(plan.times[0] + (t - plan.i0) * np.timedelta64(1, "h"), "h"))
        what = str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (StoreError, OSError, TimeoutError)):  # the connection or the disk: may pass
            advice = "finished blocks are kept, run again to resume"
        elif plan.ref.source in ("sample", "study"):  # built by lstmnb: it rebuilds a store deleted
            advice = f"the chunk is damaged; delete {plan.ref.url} and run again (lstmnb rebuilds the sample)"
        else:
            advice = "the chunk is damaged in the store, so running again will not help; repair or re-copy the store"
        return DataError(f"reading {v} at {when} from {plan.ref.url} failed: {(what.splitlines() or [''])[0][:240]}; "
                         + advice)

    async def read(run: tuple[str, int, int]) -> dict[int, np.ndarray | DataError]:  # on zarr's event loop
        """Each hour of ``run``'s values (or its error): one zarr read for the run, and where that fails,
        one per hour, so the other hours still arrive and the error names the hour that failed."""
        v, t0, t1 = run
        try:
            return dict(zip(range(t0, t1), await reader.read(v, t0, t1)))
        except Exception as exc:  # noqa: BLE001 - see failed()
            if t1 - t0 == 1:
                return {t0: failed(v, t0, exc)}
        out: dict[int, np.ndarray | DataError] = {}
        for t in range(t0, t1):
            try:
                out[t] = (await reader.read(v, t, t + 1))[0]
            except Exception as exc:  # noqa: BLE001 - see failed()
                out[t] = failed(v, t, exc)
        return out

    def write(p: _Pending, block: Block) -> None:
        try:
            p.cache.write(block)
        except OSError as exc:
            raise DataError(f"cannot write a cache block under {p.cache.dir}: {why_not_written(exc)}; finished blocks "
                            f"are kept and this one is redone next time (set {CACHE_ENV} to move the cache)") from None

    step = max(1, hours // 4)  # a checkpoint keeps at least this many new hours

    def frontier() -> int:
        return min((p.frontier for p in pending.values() if not p.failed), default=plan.i1)

    def checkpoint(front: int) -> bool:
        """Write the received prefix of every slot holding the frontier back; True if it moved."""
        moved = False
        for p in list(pending.values()):
            if p.failed or p.frontier != front:
                continue
            upto = p.received_to()
            if upto - front < step:
                return moved
            write(p, p.part(upto))
            p.frontier = upto  # hours start..upto-1 are in the cache as a checkpoint
            moved = True
        return moved

    in_flight: dict[Future, tuple[str, int, int]] = {}
    position = 0  # next entry of ``order`` to submit
    failures: list[DataError] = []
    # Objects made before the read (a notebook's torch, xarray, pandas: a million or more) stay out of the garbage
    # collector's full passes until it ends: a full pass set off by the read's short-lived objects stopped the event
    # loop for about 50 ms of a 0.3 s read (extraction benchmark). A process that froze objects itself is left alone.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        # Reads are coroutines on zarr's event loop (no thread per read), a run of hours each. Over HTTP, a point
        # read is a header request then a block request per hour: twice as many hours in flight as connections
        # keep every connection busy (aiohttp queues the requests beyond ``workers``, so later chunks' headers go
        # out while earlier chunks wait for their blocks).
        depth = max(1, 2 * workers // max(t1 - t0 for _, t0, t1 in order)) if order else 1
        exhausted = False
        front = frontier()
        while in_flight or not exhausted:
            while not exhausted and len(in_flight) < depth:
                if position == len(order):
                    exhausted = True
                    break
                nxt = order[position]
                # The frontier only moves on, so a stale value is a safe, cheap first test.
                if nxt[2] - front > hours and in_flight:
                    front = frontier()
                    if nxt[2] - front > hours:  # this read would risk more than a block on a kill
                        moved = checkpoint(front)
                        front = frontier()
                        if not moved or nxt[2] - front > hours:
                            break
                position += 1
                in_flight[submit(read(nxt))] = nxt
            if not in_flight:
                break
            finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for fut in finished:
                v = in_flight.pop(fut)[0]
                for t, chunk in fut.result().items():
                    if isinstance(chunk, DataError):
                        # This hour's blocks stay unfinished; every other block still completes.
                        failures.append(chunk)
                        for key, slot in needs[(v, t)]:
                            pending[(v, key, slot)].failed = True
                        if len(failures) >= MAX_FAILED_CHUNKS:
                            exhausted = True  # the store looks down: stop asking, finish what is in flight
                        continue
                    stats.chunks += 1
                    for key, slot in needs[(v, t)]:
                        p = pending[(v, key, slot)]
                        p.values[t] = chunk[index[key]] if plan.kind == "points" else chunk
                        p.missing.discard(t)
                        if not p.missing and not p.failed:
                            block = p.finish()
                            write(p, block)
                            done[(v, key, slot)] = block
                            stats.blocks_written += 1
                            del pending[(v, key, slot)]
                    per_hour[t] -= 1
                    if per_hour[t] == 0 and bar is not None:
                        bar.update(1)
                        now = time.perf_counter()
                        if now - last_post > 0.25:
                            last_post = now
                            mb = reader.store.bytes_read / 1e6
                            bar.set_postfix_str(f"{mb:,.1f} MB read, {mb / max(now - t_bar, 1e-9):,.1f} MB/s",
                                                refresh=False)
        if failures:
            more = f" ({len(failures)} chunks failed" + (", gave up early" if len(failures) >= MAX_FAILED_CHUNKS else "")
            raise DataError(f"{failures[0]}{more}; {stats.blocks_written} blocks written this run)")
    except BaseException:
        for fut in in_flight:
            fut.cancel()
        raise
    finally:
        if freeze:
            gc.unfreeze()
        stats.bytes += reader.store.bytes_read
        stats.requests += reader.store.requests
        if bar is not None:
            mb = reader.store.bytes_read / 1e6
            bar.set_postfix_str(f"{mb:,.1f} MB read, {mb / max(time.perf_counter() - t_bar, 1e-9):,.1f} MB/s")
            bar.close()
