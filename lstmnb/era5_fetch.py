"""Block-wise concurrent extraction: read each needed one-hour chunk once, fill cache blocks in order.

The plan's time range is cut into cache slots (``era5_cache``). Slots already cached are read from
disk; for the rest, every (variable, hour) chunk is read once by a pool of I/O threads, every target
(cell or box) takes its values from it, and a slot is written to the cache the moment its last hour
arrives. Reads stay pipelined across slot boundaries, but never more than one block's worth of hours
is read (or in flight) without being kept: when the window would go further, the oldest unfinished
slot's received prefix is written as a partial block (a checkpoint, at most a few per slot). So a
killed run redoes at most one block of reads, and resumes from the checkpoint.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .era5_cache import DEFAULT_BLOCK_HOURS, Block, BlockCache, extracts_root
from .errors import ConfigError, DataError

if TYPE_CHECKING:
    from .era5 import Plan

DEFAULT_CONCURRENCY = 32
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
    values: dict[int, np.ndarray] = field(default_factory=dict)
    kept: int | None = None  # hours start..kept-1 are in the cache as a checkpoint
    failed: bool = False
    first: int = 0  # the first hour this slot needed when the run began

    def __post_init__(self) -> None:
        self.first = min(self.missing, default=self.stop)

    def frontier(self) -> int:
        """The first hour this slot needs that is not in the cache."""
        return self.kept if self.kept is not None else self.first

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


@dataclass(frozen=True)
class RetryPolicy:
    """Per-chunk retries: transient errors (connection, timeout, HTTP 408/429/5xx) back off and retry."""

    attempts: int = 5
    base_delay: float = 0.25  # seconds; doubles each attempt, with jitter
    max_delay: float = 8.0
    timeout: float = 60.0  # seconds per request


class ChunkError(Exception):
    """A chunk could not be read (after retries, or a permanent error)."""


class CacheMiss(DataError):
    """Raised by an ``offline`` fetch when some block of the plan is not in the cache."""

    def __init__(self, cached: int, total: int):
        super().__init__(f"{total - cached} of {total} blocks of this request are not cached")
        self.cached, self.total = cached, total


_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class HttpClient:
    """GETs over one aiohttp session on a private event-loop thread, with per-request retries.

    Worker threads call ``get`` concurrently; the loop multiplexes them over pooled connections.
    """

    def __init__(self, limit: int, retry: RetryPolicy, headers: Callable[[], dict] | None = None):
        import asyncio
        import threading

        self.retry = retry
        self.headers = headers or (lambda: {})
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="era5-http", daemon=True)
        self.thread.start()
        self.limit = limit
        self.session = self._call(self._open())

    async def _open(self):
        import aiohttp

        conn = aiohttp.TCPConnector(limit=max(self.limit, 1), ttl_dns_cache=300)
        return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=self.retry.timeout))

    def _call(self, coro):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def get(self, url: str, retry: RetryPolicy | None = None) -> bytes | None:
        """The body at ``url``; None when it does not exist (404). Raises ChunkError after retries."""
        return self._call(self._get(url, retry or self.retry))

    def get_many(self, urls: list[str], retry: RetryPolicy | None = None) -> list[bytes | None]:
        """The bodies at ``urls``, all requested at once (one round trip, not one each)."""
        import asyncio

        async def gather():
            return await asyncio.gather(*(self._get(u, retry or self.retry) for u in urls))

        return self._call(gather()) if urls else []

    async def _get(self, url: str, retry: RetryPolicy) -> bytes | None:
        import asyncio
        import random

        import aiohttp

        last = ""
        timeout = aiohttp.ClientTimeout(total=retry.timeout)
        for attempt in range(retry.attempts):
            if attempt:
                delay = min(retry.max_delay, retry.base_delay * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                async with self.session.get(url, headers=self.headers(), timeout=timeout) as r:
                    if r.status == 200:
                        return await r.read()
                    if r.status == 404:
                        return None
                    body = (await r.text(errors="replace"))[:120].replace("\n", " ")
                    last = f"HTTP {r.status} {body}".strip()
                    if r.status in (401, 403):
                        raise ChunkError(f"{last}: access denied; check --credentials (anonymous by default)")
                    if r.status not in _TRANSIENT_STATUS:
                        raise ChunkError(last)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}".strip()
        raise ChunkError(f"{last} (after {retry.attempts} attempts)")

    def close(self) -> None:
        try:
            self._call(self.session.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)


def _gcs_media_url(url: str) -> Callable[[str], str]:
    """Map store keys of a gs:// URL to JSON-API media URLs (honours STORAGE_EMULATOR_HOST)."""
    from urllib.parse import quote

    from gcsfs.core import _location

    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    base = _location().rstrip("/")
    prefix = prefix.strip("/")

    def to_url(key: str) -> str:
        obj = f"{prefix}/{key}" if prefix else key
        return f"{base}/download/storage/v1/b/{bucket}/o/{quote(obj, safe='')}?alt=media"

    return to_url


def _auth_headers(token) -> Callable[[], dict]:
    """Bearer headers from google-auth for a credentials file or 'google_default'; none when anonymous."""
    if token in (None, "anon"):
        return lambda: {}
    from gcsfs.credentials import GoogleCredentials

    creds = GoogleCredentials(project=None, access='read_only', token=token)

    def headers() -> dict:
        out: dict = {}
        creds.apply(out)
        return out

    return headers


class ChunkSource:
    """Raw bytes of store keys: local files, or HTTP(S)/GCS objects fetched concurrently with retries."""

    def __init__(self, url: str, remote: bool, storage_options: dict, concurrency: int, retry: RetryPolicy):
        self.url = url.rstrip("/")
        self.remote = remote
        self.bytes_read = 0
        self.requests = 0
        self.client: HttpClient | None = None
        if remote:
            if self.url.startswith(("gs://", "gcs://")):
                self.to_url = _gcs_media_url(self.url)
                headers = _auth_headers(storage_options.get("token", "anon"))
            elif self.url.startswith(("http://", "https://")):
                self.to_url = lambda key: f"{self.url}/{key}"
                headers = None
            else:
                raise ConfigError(f"unsupported store URL {url!r}; use gs://, http(s):// or a local path")
            self.client = HttpClient(concurrency, retry, headers)

    def get(self, key: str, retry: RetryPolicy | None = None) -> bytes | None:
        """The bytes of ``key``; None when absent. ``retry`` overrides the source's policy."""
        if self.client is None:
            data = self._local(key)
        else:
            data = self.client.get(self.to_url(key), retry)
        self._count(data)
        return data

    def get_many(self, keys: list[str], retry: RetryPolicy | None = None) -> list[bytes | None]:
        """The bytes of several keys, requested concurrently; None for absent ones."""
        if self.client is None:
            out = [self._local(k) for k in keys]
        else:
            out = self.client.get_many([self.to_url(k) for k in keys], retry)
        for data in out:
            self._count(data)
        return out

    def _local(self, key: str) -> bytes | None:
        try:
            with open(os.path.join(self.url, key), "rb") as fh:
                return fh.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def _count(self, data: bytes | None) -> None:
        self.requests += 1
        if data is not None:
            self.bytes_read += len(data)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


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


def _array_meta(zarray: dict) -> _ArrayMeta | None:
    """Parse a zarr-v2 .zarray for the raw path; None when the layout needs zarr's general reader."""
    import numcodecs

    if zarray.get("zarr_format") != 2 or len(zarray.get("shape", ())) != 3 or zarray["chunks"][0] != 1:
        return None
    fill = zarray.get("fill_value")
    fill = np.nan if fill in (None, "NaN") else float(fill)
    return _ArrayMeta(
        tuple(zarray["shape"]), tuple(zarray["chunks"]), np.dtype(zarray["dtype"]), zarray.get("order", "C"),
        zarray.get("dimension_separator", "."), fill,
        numcodecs.get_codec(zarray["compressor"]) if zarray.get("compressor") else None,
        [numcodecs.get_codec(f) for f in (zarray.get("filters") or [])],
    )


class RawReader:
    """Reads one (variable, hour) bounding box of the requested cells straight from chunk bytes.

    For zarr-v2 stores with one time step per chunk (ARCO-ERA5's layout): the chunk bytes are fetched
    by ``ChunkSource`` (concurrent, retried), decoded once with numcodecs, and cut to the box.
    """

    def __init__(self, plan: "Plan", source: ChunkSource, metas: dict[str, _ArrayMeta]):
        rows, cols = plan.rows, plan.cols
        self.r0, self.r1 = int(rows.min()), int(rows.max()) + 1
        self.c0, self.c1 = int(cols.min()), int(cols.max()) + 1
        self.source = source
        self.metas = metas

    @property
    def bytes_read(self) -> int:
        return self.source.bytes_read

    def read(self, variable: str, t: int) -> np.ndarray:
        m = self.metas[variable]
        cy, cx = m.chunks[1], m.chunks[2]
        out = np.empty((self.r1 - self.r0, self.c1 - self.c0), dtype=np.float32)
        for jy in range(self.r0 // cy, (self.r1 - 1) // cy + 1):
            for jx in range(self.c0 // cx, (self.c1 - 1) // cx + 1):
                raw = self.source.get(f"{variable}/{t}{m.sep}{jy}{m.sep}{jx}")
                if raw is None:
                    block = np.full((cy, cx), m.fill, dtype=np.float32)
                else:
                    data = m.compressor.decode(raw) if m.compressor is not None else raw
                    for f in reversed(m.filters):
                        data = f.decode(data)
                    block = np.frombuffer(data, dtype=m.dtype).reshape((cy, cx), order=m.order)
                ya, yb = max(self.r0, jy * cy), min(self.r1, (jy + 1) * cy)
                xa, xb = max(self.c0, jx * cx), min(self.c1, (jx + 1) * cx)
                out[ya - self.r0:yb - self.r0, xa - self.c0:xb - self.c0] = \
                    block[ya - jy * cy:yb - jy * cy, xa - jx * cx:xb - jx * cx]
        return out


class ZarrReader:
    """Fallback for layouts the raw path does not handle (zarr v3, several hours per chunk): zarr reads."""

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


def make_reader(plan: "Plan", concurrency: int, retry: RetryPolicy, source: ChunkSource | None = None,
                zmetadata: dict | None = None):
    """The fastest reader that handles this store: raw chunk bytes when possible, else zarr.

    ``source`` and ``zmetadata`` (the store's consolidated metadata), when the caller already has
    them from opening the store, are reused: no second connection pool, no second metadata read.
    Returns (reader, the source it reads through or None, whether the caller must close that source).
    """
    import json

    owned = source is None
    if source is None:
        source = ChunkSource(plan.ref.url, plan.ref.remote, plan.ref.storage_options, concurrency, retry)
    try:
        raw = None if zmetadata is not None else source.get(".zmetadata")
        metas = {}
        if zmetadata is not None or raw is not None:
            meta = zmetadata if zmetadata is not None else json.loads(raw)["metadata"]
            for v in plan.variables:
                m = _array_meta(meta.get(f"{v}/.zarray", {}))
                if m is None:
                    break
                metas[v] = m
        if metas and len(metas) == len(plan.variables):
            source.bytes_read = source.requests = 0  # from here on: chunk reads only
            return RawReader(plan, source, metas), source, owned
    except ChunkError as exc:
        if owned:
            source.close()
        raise DataError(f"cannot read {plan.ref.url}/.zmetadata: {exc}; check the network or use --source sample") from None
    except (ValueError, KeyError, TypeError):
        pass
    if owned:
        source.close()
    return ZarrReader(plan), None, False


def check_sizes(block_hours: int | None, concurrency: int | None) -> tuple[int, int]:
    """(block hours, reads in flight) with their defaults; ConfigError when either is below 1."""
    hours = DEFAULT_BLOCK_HOURS if block_hours is None else int(block_hours)
    workers = DEFAULT_CONCURRENCY if concurrency is None else int(concurrency)
    if hours < 1:
        raise ConfigError(f"block_hours must be >= 1, got {hours}")
    if workers < 1:
        raise ConfigError(f"concurrency must be >= 1, got {workers}")
    return hours, workers


def fetch_plan(
    plan: "Plan",
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    refresh: bool = False,
    concurrency: int | None = None,
    block_hours: int | None = None,
    stats: FetchStats | None = None,
    retry: RetryPolicy | None = None,
    offline: bool = False,
    source: ChunkSource | None = None,
    zmetadata: dict | None = None,
) -> dict[tuple[str, str], np.ndarray]:
    """Return {(variable, target key): array over plan's hours}, from the cache where possible.

    ``offline``: serve from the cache only; raise ``CacheMiss`` (touching nothing remote, counting
    nothing in ``stats``) when any block is missing or damaged. ``source`` and ``zmetadata``: the
    open source and consolidated metadata the store was opened with, reused for the chunk reads
    (the caller closes ``source``).
    """
    hours, workers = check_sizes(block_hours, concurrency)
    outer = stats if stats is not None else FetchStats()
    stats = FetchStats() if offline else outer
    t_start = time.perf_counter()
    root = extracts_root(cache_dir)
    store_id = plan.ref.store_id
    slots = range(plan.i0 // hours, (plan.i1 - 1) // hours + 1)
    caches = {(v, t.key): BlockCache(root, store_id, v, t.key, hours) for v in plan.variables for t in plan.targets}
    for cache in caches.values():
        cache.sweep()  # leftovers of a killed run
    if offline:
        if refresh:
            raise CacheMiss(0, len(caches) * len(slots))
        covered = sum(cache.covers(slot, max(plan.i0, slot * hours), min(plan.i1, (slot + 1) * hours))
                      for cache in caches.values() for slot in slots)
        if covered < len(caches) * len(slots):
            raise CacheMiss(covered, len(caches) * len(slots))

    done: dict[tuple[str, str, int], Block] = {}
    pending: dict[tuple[str, str, int], _Pending] = {}
    needs: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for v in plan.variables:
        for target in plan.targets:
            cache = caches[(v, target.key)]
            shape = () if plan.kind == "points" else (len(target.rows), len(target.cols))
            for slot in slots:
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

    if needs and offline:
        raise CacheMiss(len(caches) * len(slots) - len(pending), len(caches) * len(slots))  # damaged files
    if needs:
        _run(plan, pending, needs, done, workers, hours, progress, stats, retry or RetryPolicy(), source, zmetadata)
    stats.seconds = time.perf_counter() - t_start
    if offline:
        for name in ("blocks_cached", "seconds"):
            setattr(outer, name, getattr(outer, name) + getattr(stats, name))

    out: dict[tuple[str, str], np.ndarray] = {}
    for v in plan.variables:
        for target in plan.targets:
            parts = []
            for slot in slots:
                blk = done[(v, target.key, slot)]
                a, b = max(plan.i0, slot * hours), min(plan.i1, (slot + 1) * hours)
                parts.append(blk.data[a - blk.start:b - blk.start])
            out[(v, target.key)] = np.concatenate(parts, axis=0).astype(np.float32, copy=False)
    return out


def _run(plan, pending, needs, done, workers, hours, progress, stats, retry, shared=None, zmetadata=None) -> None:
    """Read the needed chunks concurrently, in time order, writing each slot as it completes.

    An hour is submitted only while it lies within ``hours`` of the frontier (the first needed hour
    not in the cache), so a kill loses at most one block of reads. When the window reaches that
    bound, the oldest slots' received prefixes are checkpointed (at least a quarter block each time),
    which moves the frontier on without draining the pipeline at slot boundaries.
    """
    reader, source, owned = make_reader(plan, workers, retry, shared, zmetadata)
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

        bar = tqdm(total=len(per_hour), unit="h", desc=f"ERA5 {plan.ref.source}", leave=True,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} h [{elapsed}<{remaining}, {rate_fmt}{postfix}]")
    t_bar = time.perf_counter()
    last_post = 0.0

    def task(vt: tuple[str, int]) -> np.ndarray:
        v, t = vt
        try:
            return reader.read(v, t)
        except Exception as exc:  # noqa: BLE001 - becomes one clear error naming time and store
            when = str(np.datetime64(plan.times[0] + (t - plan.i0) * np.timedelta64(1, "h"), "h"))
            what = str(exc) if isinstance(exc, ChunkError) else f"{type(exc).__name__}: {exc}"
            raise DataError(
                f"reading {v} at {when} from {plan.ref.url} failed: {(what.splitlines() or [''])[0][:240]}; "
                "finished blocks are kept, run again to resume"
            ) from None

    def write(p: _Pending, block: Block) -> None:
        try:
            p.cache.write(block)
        except OSError as exc:
            raise DataError(
                f"cannot write a cache block under {p.cache.dir}: {exc.strerror or exc} "
                "(disk full?); finished blocks are kept and this one is redone next time"
            ) from None

    step = max(1, hours // 4)  # a checkpoint keeps at least this many new hours

    def frontier() -> int:
        live = [p.frontier() for p in pending.values() if not p.failed]
        return min(live, default=plan.i1)

    def checkpoint(front: int) -> bool:
        """Write the received prefix of every slot holding the frontier back; True if it moved."""
        moved = False
        for p in list(pending.values()):
            if p.failed or p.frontier() != front:
                continue
            upto = p.received_to()
            if upto - front < step:
                return moved
            write(p, p.part(upto))
            p.kept = upto
            moved = True
        return moved

    in_flight: dict[Future, tuple[str, int]] = {}
    position = 0  # next entry of ``order`` to submit
    failures: list[DataError] = []
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="era5-read") as pool:
            exhausted = False
            front = frontier()
            while in_flight or not exhausted:
                while not exhausted and len(in_flight) < workers:
                    if position == len(order):
                        exhausted = True
                        break
                    nxt = order[position]
                    # The frontier only moves on, so a stale value is a safe, cheap first test.
                    if nxt[1] - front >= hours and in_flight:
                        front = frontier()
                        if nxt[1] - front >= hours:  # this read would risk more than a block on a kill
                            moved = checkpoint(front)
                            front = frontier()
                            if not moved or nxt[1] - front >= hours:
                                break
                    position += 1
                    in_flight[pool.submit(task, nxt)] = nxt
                if not in_flight:
                    break
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in finished:
                    v, t = in_flight.pop(fut)
                    try:
                        chunk = fut.result()
                    except DataError as exc:
                        # This chunk's blocks stay unfinished; every other block still completes.
                        failures.append(exc)
                        for key, slot in needs[(v, t)]:
                            pending[(v, key, slot)].failed = True
                        if len(failures) >= MAX_FAILED_CHUNKS:
                            exhausted = True  # the store looks down: stop asking, finish what is in flight
                        continue
                    stats.chunks += 1
                    for key, slot in needs[(v, t)]:
                        rows, cols = index[key]
                        p = pending[(v, key, slot)]
                        if plan.kind == "points":
                            p.values[t] = chunk[rows[0], cols[0]]
                        else:
                            p.values[t] = chunk[np.ix_(rows, cols)]
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
                            mb = reader.bytes_read / 1e6
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
        stats.bytes += reader.bytes_read
        if source is not None:
            stats.requests += source.requests
            if owned:
                source.close()
        if bar is not None:
            mb = reader.bytes_read / 1e6
            bar.set_postfix_str(f"{mb:,.1f} MB read, {mb / max(time.perf_counter() - t_bar, 1e-9):,.1f} MB/s")
            bar.close()
