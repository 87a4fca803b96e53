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

import contextlib
import gc
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from . import blosc_parts
from .era5_cache import DEFAULT_BLOCK_HOURS, Block, BlockCache, extracts_root
from .errors import ConfigError, DataError

if TYPE_CHECKING:
    from .era5 import Plan

DEFAULT_CONCURRENCY = 128  # requests (connections) in flight; era5_extract.py: 0.33 s at 64, 0.24 at 128, 0.22 at 256
CLOSING_SERVER_REQUESTS = 4  # requests in flight to a server that closes every connection
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
    # seconds a request may go without progress (connecting, or between bytes received); time spent
    # queued for a pooled connection does not count, nor does a long transfer that keeps moving
    timeout: float = 60.0


class ChunkError(Exception):
    """A chunk could not be read (after retries, or a permanent error)."""


class CacheMiss(DataError):
    """Raised by an ``offline`` fetch when some block of the plan is not in the cache."""

    def __init__(self, cached: int, total: int):
        super().__init__(f"{total - cached} of {total} blocks of this request are not cached")
        self.cached, self.total = cached, total


_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class LoopThread:
    """An asyncio event loop running on a private daemon thread; other threads hand it coroutines."""

    def __init__(self, name: str):
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro) -> Future:
        """Schedule ``coro`` on the loop; a concurrent.futures.Future of its result."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro):
        """Run ``coro`` on the loop and wait for its result."""
        return self.submit(coro).result()

    def close(self) -> None:
        """Cancel what is still running on the loop (an interrupted run's reads), then stop it."""
        import asyncio

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.submit(drain()).result(timeout=5)
        except Exception:  # noqa: BLE001 - stopping anyway
            pass
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
            if not self.thread.is_alive():
                self.loop.close()


def _timeout(retry: RetryPolicy):
    """aiohttp's timeouts for ``retry.timeout`` (see RetryPolicy)."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=retry.timeout, sock_read=retry.timeout)


class HttpClient:
    """GETs over one aiohttp session on a private event-loop thread, with per-request retries.

    Coroutines on ``loop`` await ``fetch``; other threads call ``get``/``get_many``. The loop
    multiplexes every request over pooled connections.
    """

    def __init__(self, limit: int, retry: RetryPolicy, headers: Callable[[], dict] | None = None,
                 loop: LoopThread | None = None):
        self.retry = retry
        self.headers = headers or (lambda: {})
        self.owns_loop = loop is None
        self.loop = loop or LoopThread("era5-http")
        self.limit = limit
        self.closing_server = False  # set when responses say the server closes its connections
        self.session = self.loop.run(self._open())

    async def _open(self):
        import asyncio

        import aiohttp

        self._narrow = asyncio.Semaphore(CLOSING_SERVER_REQUESTS)
        conn = aiohttp.TCPConnector(limit=max(self.limit, 1), ttl_dns_cache=300)
        return aiohttp.ClientSession(connector=conn, timeout=_timeout(self.retry))

    def get(self, url: str, retry: RetryPolicy | None = None, byte_range: tuple[int, int] | None = None
            ) -> bytes | None:
        """The body at ``url`` (bytes start..stop-1 of it with ``byte_range``; fewer at its end, and
        all of it when a server ignores a range that starts at 0); None when it does not exist (404).
        Raises ChunkError after retries."""
        return self.loop.run(self.fetch(url, retry, byte_range))

    def get_many(self, urls: list[str], retry: RetryPolicy | None = None,
                 byte_ranges: list[tuple[int, int] | None] | None = None) -> list[bytes | None]:
        """The bodies at ``urls`` (or byte ranges of them), all requested at once (one round trip)."""
        import asyncio

        ranges = byte_ranges or [None] * len(urls)

        async def gather():
            return await asyncio.gather(*(self.fetch(u, retry, r) for u, r in zip(urls, ranges)))

        return self.loop.run(gather()) if urls else []

    async def fetch(self, url: str, retry: RetryPolicy | None = None, byte_range: tuple[int, int] | None = None
                    ) -> bytes | None:
        """``get`` for coroutines running on ``loop``."""
        import asyncio
        import random

        import aiohttp

        retry = retry or self.retry
        last = ""
        for attempt in range(retry.attempts):
            if attempt:
                delay = min(retry.max_delay, retry.base_delay * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                async with self._narrow if self.closing_server else contextlib.nullcontext():
                    status, body = await self._once(url, retry, byte_range)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}".strip()
                continue
            if status in (200, 206, 404):
                return body
            last = f"HTTP {status} {body.decode(errors='replace')[:120]}".replace("\n", " ").strip()
            if status in (401, 403):
                raise ChunkError(f"{last}: access denied; check --credentials (anonymous by default)")
            if status not in _TRANSIENT_STATUS:
                raise ChunkError(last)
        raise ChunkError(f"{last} (after {retry.attempts} attempts)")

    async def _once(self, url: str, retry: RetryPolicy, byte_range: tuple[int, int] | None
                    ) -> tuple[int, bytes | None]:
        """One GET: (status, body); the body is None for 404 and cut to ``byte_range`` as ``get`` says."""
        import aiohttp

        headers = self.headers()
        if byte_range is not None:
            headers = {**headers, "Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"}
        async with self.session.get(url, headers=headers, timeout=_timeout(retry)) as r:
            if r.version < aiohttp.HttpVersion11 or r.headers.get("Connection", "").lower() == "close":
                # A server that closes every connection (an HTTP/1.0 test server, say) accepts few at
                # a time: a hundred connection attempts overflow its queue and stall for seconds.
                self.closing_server = True
            if r.status == 404:
                return 404, None
            body = await r.read()
            if r.status == 200 and byte_range is not None and byte_range[0] > 0:
                body = body[byte_range[0]:byte_range[1]]  # the server ignored Range and sent everything
            return r.status, body  # a range from the start that came whole: callers may use the rest

    def close(self) -> None:
        try:
            self.loop.run(self.session.close())
        finally:
            if self.owns_loop:
                self.loop.close()


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
    """Raw bytes of store keys: local files, or HTTP(S)/GCS objects fetched concurrently with retries.

    Reads are coroutines (``aget``, ``aget_many``) on the source's event-loop thread ``loop``; ``get``
    and ``get_many`` wrap them for other threads.
    """

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
        self.loop = LoopThread("era5-read")
        if remote:
            try:
                self.client = HttpClient(concurrency, retry, headers, loop=self.loop)
            except BaseException:
                self.loop.close()
                raise

    async def aget(self, key: str, retry: RetryPolicy | None = None, byte_range: tuple[int, int] | None = None
                   ) -> bytes | None:
        """The bytes of ``key`` (bytes start..stop-1 with ``byte_range``; fewer at the object's end);
        None when absent. ``retry`` overrides the source's policy. Runs on ``loop``."""
        if self.client is None:
            data = self._local(key, byte_range)
        else:
            data = await self.client.fetch(self.to_url(key), retry, byte_range)
        self._count(data)
        return data

    async def aget_many(self, keys: list[str], retry: RetryPolicy | None = None,
                        byte_ranges: list[tuple[int, int] | None] | None = None) -> list[bytes | None]:
        """The bytes of several keys (or byte ranges of them), requested concurrently; None for absent ones."""
        import asyncio

        ranges = byte_ranges or [None] * len(keys)
        return list(await asyncio.gather(*(self.aget(k, retry, r) for k, r in zip(keys, ranges))))

    def get(self, key: str, retry: RetryPolicy | None = None, byte_range: tuple[int, int] | None = None
            ) -> bytes | None:
        """``aget`` from another thread."""
        return self.loop.run(self.aget(key, retry, byte_range))

    def get_many(self, keys: list[str], retry: RetryPolicy | None = None,
                 byte_ranges: list[tuple[int, int] | None] | None = None) -> list[bytes | None]:
        """``aget_many`` from another thread."""
        return self.loop.run(self.aget_many(keys, retry, byte_ranges)) if keys else []

    def _local(self, key: str, byte_range: tuple[int, int] | None = None) -> bytes | None:
        try:
            with open(os.path.join(self.url, key), "rb") as fh:
                if byte_range is None:
                    return fh.read()
                fh.seek(byte_range[0])
                return fh.read(byte_range[1] - byte_range[0])
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def _count(self, data: bytes | None) -> None:
        self.requests += 1  # only the loop thread counts: no lock needed
        if data is not None:
            self.bytes_read += len(data)

    def close(self) -> None:
        try:
            if self.client is not None:
                self.client.close()
        finally:
            self.loop.close()


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


# Read the few Blosc blocks that hold the requested cells instead of whole chunks (see blosc_parts).
# The benchmark turns this off to show what whole-chunk reads cost.
PARTIAL_READS = True
_HEAD_BYTES = 4096  # first range of a partial read: the header and a table of up to 1020 blocks
_WHOLE_SHARE = 0.5  # when the needed blocks hold more of a chunk than this, read chunks whole


def _cells(plan: "Plan") -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of every grid cell some target needs (each once)."""
    rows, cols = [], []
    for t in plan.targets:
        if plan.kind == "points":
            rows.append(np.asarray(t.rows[:1]))
            cols.append(np.asarray(t.cols[:1]))
        else:
            r, c = np.meshgrid(np.asarray(t.rows), np.asarray(t.cols), indexing="ij")
            rows.append(r.ravel())
            cols.append(c.ravel())
    cells = np.unique(np.stack([np.concatenate(rows), np.concatenate(cols)], axis=1), axis=0)
    return cells[:, 0].astype(np.int64), cells[:, 1].astype(np.int64)


def _box(plan: "Plan") -> tuple[int, int, int, int]:
    """(r0, r1, c0, c1): the smallest box of rows r0..r1-1 and columns c0..c1-1 holding every target's
    cells; a reader reads it for each (variable, hour)."""
    rows, cols = plan.rows, plan.cols
    return int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1


def _partial_ok(m: "_ArrayMeta") -> bool:
    """Whether chunks of this array can be read in parts (Blosc with a codec blosc_parts decodes)."""
    import numcodecs

    c = m.compressor
    return (PARTIAL_READS and isinstance(c, numcodecs.Blosc) and not m.filters
            and blosc_parts.readable(c.cname, c.shuffle))


class RawReader:
    """Reads the requested cells of one (variable, hour) straight from chunk bytes, as a box.

    For zarr stores (format 2, or 3 without sharding) with one time step per chunk (ARCO-ERA5's
    layout). Chunk bytes are fetched by
    ``ChunkSource`` (concurrent, retried). When the cells are a small part of a Blosc chunk (point
    series), only the header and the blocks that hold them are fetched and decoded (``blosc_parts``);
    otherwise the chunk is fetched whole and decoded once for every cell. Box entries that are not
    requested cells may be left unset (two points far apart span a large box; filling it every hour
    would cost more than reading their blocks).
    """

    def __init__(self, plan: "Plan", source: ChunkSource, metas: dict[str, _ArrayMeta]):
        self.r0, self.r1, self.c0, self.c1 = _box(plan)
        self.source = source
        self.metas = metas
        self.cell_rows, self.cell_cols = _cells(plan)
        self.whole: set[str] = {v for v, m in metas.items() if not _partial_ok(m)}
        self._in_chunk: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @property
    def bytes_read(self) -> int:
        return self.source.bytes_read

    async def read(self, variable: str, t: int) -> np.ndarray:
        """The box of ``variable`` at hour index ``t`` (a coroutine on the source's loop)."""
        m = self.metas[variable]
        cy, cx = m.chunks[1], m.chunks[2]
        out = np.empty((self.r1 - self.r0, self.c1 - self.c0), dtype=np.float32)  # cells are all set
        for jy in range(self.r0 // cy, (self.r1 - 1) // cy + 1):
            for jx in range(self.c0 // cx, (self.c1 - 1) // cx + 1):
                key = m.key(variable, t, jy, jx)
                rows, cols, flat = self._cells_in(m, jy, jx)
                if not rows.size:
                    continue
                if variable not in self.whole and rows.size * 2 < cy * cx:
                    out[rows + jy * cy - self.r0, cols + jx * cx - self.c0] = \
                        await self._read_cells(variable, key, m, flat)
                    continue
                block = self._decode(m, await self.source.aget(key))
                ya, yb = max(self.r0, jy * cy), min(self.r1, (jy + 1) * cy)
                xa, xb = max(self.c0, jx * cx), min(self.c1, (jx + 1) * cx)
                out[ya - self.r0:yb - self.r0, xa - self.c0:xb - self.c0] = \
                    block[ya - jy * cy:yb - jy * cy, xa - jx * cx:xb - jx * cx]
        return out

    def _cells_in(self, m: _ArrayMeta, jy: int, jx: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Requested cells in chunk (jy, jx): rows and columns within it, and positions in its order."""
        cy, cx = m.chunks[1], m.chunks[2]
        key = (cy, cx, m.order, jy, jx)
        if key not in self._in_chunk:  # only the loop thread reads: no lock needed
            inside = (self.cell_rows // cy == jy) & (self.cell_cols // cx == jx)
            rows, cols = self.cell_rows[inside] - jy * cy, self.cell_cols[inside] - jx * cx
            self._in_chunk[key] = (rows, cols, rows * cx + cols if m.order == "C" else cols * cy + rows)
        return self._in_chunk[key]

    @staticmethod
    def _decode(m: _ArrayMeta, raw: bytes | None, flat: np.ndarray | None = None) -> np.ndarray:
        """A whole chunk as a (rows, cols) array, or its values at positions ``flat`` (in the chunk's
        order); the fill value when the chunk does not exist."""
        cy, cx = m.chunks[1], m.chunks[2]
        if raw is None:
            return np.full((cy, cx) if flat is None else flat.size, m.fill, dtype=np.float32)
        data = m.compressor.decode(raw) if m.compressor is not None else raw
        for f in reversed(m.filters):
            data = f.decode(data)
        values = np.frombuffer(data, dtype=m.dtype)
        return values.reshape((cy, cx), order=m.order) if flat is None else values[flat]

    async def _read_cells(self, variable: str, key: str, m: _ArrayMeta, flat: np.ndarray) -> np.ndarray:
        """Values at chunk positions ``flat``, read through the Blosc blocks that hold them."""
        head_raw = await self.source.aget(key, byte_range=(0, _HEAD_BYTES))
        if head_raw is None:
            return self._decode(m, None, flat)
        itemsize = m.dtype.itemsize
        try:
            head = blosc_parts.parse_header(head_raw)
            if head.nbytes != m.chunks[1] * m.chunks[2] * itemsize:
                raise ValueError("Blosc header does not match the array's chunk size")
            if len(head_raw) >= head.cbytes:  # a small chunk came whole with the header
                return self._decode(m, head_raw[:head.cbytes], flat)
            if len(head_raw) < head.table_end:  # more blocks than the first range covered
                head_raw += await self.source.aget(key, byte_range=(len(head_raw), head.table_end)) or b""
            starts, stops = blosc_parts.block_extents(head, head_raw)
            offsets = flat * itemsize
            blocks = blosc_parts.blocks_holding(head, offsets, itemsize)
        except ValueError:
            return self._decode(m, await self.source.aget(key), flat)
        if (stops[blocks] - starts[blocks]).sum() > _WHOLE_SHARE * head.cbytes:
            self.whole.add(variable)  # later chunks of this array: one whole read, no header round trip
            rest = await self.source.aget(key, byte_range=(len(head_raw), head.cbytes)) or b""
            return self._decode(m, head_raw + rest, flat)
        ranges = blosc_parts.byte_ranges(starts, stops, blocks)
        fetch = [r for r in ranges if r[1] > len(head_raw)]
        got = dict(zip(fetch, await self.source.aget_many([key] * len(fetch), byte_ranges=fetch)))
        try:
            comps = {}
            for a, b in ranges:
                data = head_raw[a:b] if b <= len(head_raw) else got[(a, b)]
                if data is None or len(data) != b - a:
                    raise ValueError("chunk changed while it was read")
                for k in blocks[(starts[blocks] >= a) & (stops[blocks] <= b)]:
                    comps[int(k)] = data[starts[k] - a:stops[k] - a]
            return blosc_parts.gather(head, comps, offsets, m.dtype)
        except ValueError:
            return self._decode(m, await self.source.aget(key), flat)


class ZarrReader:
    """Fallback for layouts the raw path does not handle (zarr v3, several hours per chunk): zarr reads."""

    def __init__(self, plan: "Plan"):
        import zarr

        ref = plan.ref
        if ref.remote:
            self.group = zarr.open_group(ref.url, mode="r", storage_options=ref.storage_options or None)
        else:
            self.group = zarr.open_group(ref.url, mode="r")
        self.r0, self.r1, self.c0, self.c1 = _box(plan)
        self.arrays = {v: self.group[v] for v in plan.variables}
        self.bytes_read = 0

    def read(self, variable: str, t: int) -> np.ndarray:
        return np.asarray(self.arrays[variable][t, self.r0:self.r1, self.c0:self.c1])


def make_reader(plan: "Plan", source: ChunkSource, zmetadata: dict | None = None) -> RawReader | ZarrReader:
    """The fastest reader that handles this store: raw chunk bytes through ``source`` when possible,
    else zarr.

    ``zmetadata`` (the store's consolidated metadata: v2's ``.zmetadata`` contents or v3's root
    ``zarr.json``), when the caller already has it from opening the store, is reused: no second
    metadata read.
    """
    import json

    try:
        v3 = zmetadata is not None and zmetadata.get("zarr_format") == 3
        raw = None if zmetadata is not None else source.get(".zmetadata")
        metas = {}
        if (zmetadata is not None and not v3) or raw is not None:
            meta = zmetadata if zmetadata is not None else json.loads(raw)["metadata"]
            for v in plan.variables:
                m = _array_meta(meta.get(f"{v}/.zarray", {}))
                if m is None:
                    break
                metas[v] = m
        else:  # zarr v3: the root's consolidated metadata, else each array's zarr.json
            root = zmetadata if v3 else json.loads(source.get("zarr.json") or b"{}")
            arrays = ((root.get("consolidated_metadata") or {}).get("metadata")) or {}
            missing = [v for v in plan.variables if v not in arrays]
            for v, body in zip(missing, source.get_many([f"{v}/zarr.json" for v in missing])):
                arrays[v] = json.loads(body or b"{}")
            for v in plan.variables:
                m = _array_meta_v3(arrays[v])
                if m is None:
                    break
                metas[v] = m
        if metas and len(metas) == len(plan.variables):
            source.bytes_read = source.requests = 0  # from here on: chunk reads only
            return RawReader(plan, source, metas)
    except ChunkError as exc:
        raise DataError(f"cannot read {plan.ref.url}/.zmetadata: {exc}; check the network or use --source sample") from None
    except (ValueError, KeyError, TypeError):
        pass
    return ZarrReader(plan)


def check_sizes(block_hours: int | None, concurrency: int | None) -> tuple[int, int]:
    """(block hours, requests in flight) with their defaults; ConfigError when either is below 1."""
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
    offline: bool = False,
    source: ChunkSource | None = None,
    zmetadata: dict | None = None,
) -> dict[tuple[str, str], np.ndarray]:
    """Return {(variable, target key): array over plan's hours}, from the cache where possible.

    ``offline``: serve from the cache only; raise ``CacheMiss`` (touching nothing remote, counting
    nothing in ``stats``) when any block is missing or damaged. ``source`` and ``zmetadata``: the
    open source (with its retry policy) and consolidated metadata the store was opened with, reused
    for the chunk reads (the caller closes ``source``); ``source`` is needed unless ``offline``.
    """
    if source is None and not offline:
        raise TypeError("fetch_plan needs the store's open source unless offline")
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
        _run(plan, pending, needs, done, workers, hours, progress, stats, source, zmetadata)
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


def _run(plan, pending, needs, done, workers, hours, progress, stats, source, zmetadata) -> None:
    """Read the needed chunks concurrently, in time order, writing each slot as it completes.

    An hour is submitted only while it lies within ``hours`` of the frontier (the first needed hour
    not in the cache), so a kill loses at most one block of reads. When the window reaches that
    bound, the oldest slots' received prefixes are checkpointed (at least a quarter block each time),
    which moves the frontier on without draining the pipeline at slot boundaries.
    """
    reader = make_reader(plan, source, zmetadata)
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

    def failed(v: str, t: int, exc: Exception) -> DataError:
        """One clear error naming the variable, the time and the store."""
        when = str(np.datetime64(plan.times[0] + (t - plan.i0) * np.timedelta64(1, "h"), "h"))
        what = str(exc) if isinstance(exc, ChunkError) else f"{type(exc).__name__}: {exc}"
        return DataError(f"reading {v} at {when} from {plan.ref.url} failed: {(what.splitlines() or [''])[0][:240]}; "
                         "finished blocks are kept, run again to resume")

    async def read_async(vt: tuple[str, int]) -> np.ndarray:  # RawReader: a coroutine on the source's loop
        try:
            return await reader.read(*vt)
        except Exception as exc:  # noqa: BLE001 - see failed()
            raise failed(*vt, exc) from None

    def read_sync(vt: tuple[str, int]) -> np.ndarray:  # ZarrReader: in a worker thread
        try:
            return reader.read(*vt)
        except Exception as exc:  # noqa: BLE001 - see failed()
            raise failed(*vt, exc) from None

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
    # The objects that exist before the read (a notebook's torch, xarray, pandas: a million or more)
    # stay out of the garbage collector's full passes until it ends. A read makes many short-lived
    # objects (tasks, requests, buffers), which now and then sets off a full pass over every object;
    # in the extraction benchmark one such pass stopped the event loop for about 50 ms of a 0.3 s read.
    # A process that froze objects itself (before forking workers, say) is left as it is.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        # Raw reads are coroutines on the source's event loop (no thread per read); zarr's reader
        # is synchronous and gets a thread pool (empty, and so free, when unused).
        # Over HTTP, a point read is a header request then a block request. Twice as many chunk reads
        # as connections keep every connection busy: the pool queues the requests beyond ``workers``, so
        # later chunks' headers go out while earlier chunks wait for their blocks.
        depth = 2 * workers if isinstance(reader, RawReader) and reader.source.client is not None else workers
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="era5-read") as pool:
            if isinstance(reader, RawReader):
                def submit(vt: tuple[str, int]) -> Future:
                    return reader.source.loop.submit(read_async(vt))
            else:
                def submit(vt: tuple[str, int]) -> Future:
                    return pool.submit(read_sync, vt)
            exhausted = False
            front = frontier()
            while in_flight or not exhausted:
                while not exhausted and len(in_flight) < depth:
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
                    in_flight[submit(nxt)] = nxt
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
        if freeze:
            gc.unfreeze()
        stats.bytes += reader.bytes_read
        if isinstance(reader, RawReader):  # zarr's reads do not go through the source
            stats.requests += source.requests
        if bar is not None:
            mb = reader.bytes_read / 1e6
            bar.set_postfix_str(f"{mb:,.1f} MB read, {mb / max(time.perf_counter() - t_bar, 1e-9):,.1f} MB/s")
            bar.close()
