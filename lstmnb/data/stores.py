"""The zarr store a source is read through, and what lstmnb adds around it: one-round-trip opening, retries, counts.

``zarr_store`` makes a zarr-python 3 store: zarr's ``LocalStore`` for a path, zarr's ``FsspecStore`` for a URL, on gcsfs
for ``gs://`` (anonymous by default, credentials through google-auth) and on fsspec's aiohttp filesystem for
``http(s)://`` (one pooled session with as many connections as the extraction keeps requests in flight). obstore's GCS
store asks for object paths that the GCS emulator the tests run does not serve (HTTP 501), so gcsfs it is; for HTTP,
obstore's store and fsspec's read equally fast (benchmarks/era5_extract.py).

``ReadStore`` wraps that store: it fetches what opening a store reads in one round trip, counts requests and bytes (what
``FetchStats`` reports), retries transient failures (connection errors, stalls, HTTP 408/429/5xx) with backoff per
``RetryPolicy``, and turns what is left into ``StoreError``, one line naming the key. gcsfs retries inside itself (six
tries over about 30 s, its own policy), so ``gs://`` stores are not retried again.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import weakref
from dataclasses import dataclass

from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import _get_loop  # zarr 3.1's event-loop thread, where the stores' sessions live (pinned: see
from zarr.core.sync import sync as run  # blosc_pipeline); run(coro) runs a coroutine there and waits for it
from zarr.storage import FsspecStore, LocalStore, WrapperStore

from ..errors import ConfigError

GCSFS_PATH_VARIABLE = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class RetryPolicy:
    """Per-request retries: transient errors (connection, stall, HTTP 408/429/5xx) back off and retry."""

    attempts: int = 5
    base_delay: float = 0.25  # seconds; doubles each attempt, with jitter
    max_delay: float = 8.0
    # seconds a request may go without progress (connecting, or between bytes received); time spent
    # queued for a pooled connection does not count, nor does a long transfer that keeps moving
    timeout: float = 60.0


# A store's first request: a few quick retries within a short deadline, so an unreachable store fails fast.
PROBE_RETRY = RetryPolicy(attempts=3, base_delay=0.2, timeout=20)
PROBE_DEADLINE = 8.0  # seconds for the first answer to opening (gcsfs's own retries back off for longer)


# The metadata of either Zarr format (v2's consolidated .zmetadata, v3's root zarr.json, and what zarr asks
# for besides) and the first chunk of each ERA5 coordinate, in zarr v2's keys and v3's default ones
OPENING_KEYS = (".zmetadata", "zarr.json", ".zgroup", ".zattrs", "time/0", "latitude/0", "longitude/0",
                "time/c/0", "latitude/c/0", "longitude/c/0")


class StoreError(Exception):
    """A key could not be read (after retries, or a permanent error)."""


def gcsfs_class():
    """The gcsfs filesystem class lstmnb reads ``gs://`` with: the standard HTTP one, unless the user set
    ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` (then gcsfs's own choice for that setting). gcsfs's default since
    2026 is an experimental zonal/HNS path (gRPC, the Storage Control API) that a standard bucket such as
    ARCO-ERA5's does not need and that stalls where gRPC cannot reach Google."""
    import gcsfs
    import gcsfs.core

    return gcsfs.GCSFileSystem if GCSFS_PATH_VARIABLE in os.environ else gcsfs.core.GCSFileSystem


def gcsfs_path() -> str:
    """Which gcsfs filesystem lstmnb's ``gs://`` reads take in this process, in words."""
    if gcsfs_class().__module__ == "gcsfs.core":
        return "standard HTTP path"
    return f"experimental zonal/HNS path ({GCSFS_PATH_VARIABLE}={os.environ.get(GCSFS_PATH_VARIABLE, '')!r})"


def zarr_store(url: str, remote: bool, storage_options: dict | None = None, *, connections: int = 128,
               retry: RetryPolicy | None = None) -> "ReadStore":
    """A read-only zarr store of ``url`` (a local path when not ``remote``), wrapped in ``ReadStore``."""
    retry = retry or RetryPolicy()
    if not remote:
        return ReadStore(LocalStore(url, read_only=True), retry, url)
    if url.startswith(("gs://", "gcs://")):
        session = {"connector": run(_connector(connections))}  # made on zarr's loop, where gcsfs uses it
        fs = gcsfs_class()(asynchronous=True, skip_instance_cache=True, session_kwargs=session,
                           **{"token": "anon", **(storage_options or {})})
        return ReadStore(FsspecStore(fs, path=url.split("://", 1)[1], read_only=True), RetryPolicy(attempts=1), url)
    if url.startswith(("http://", "https://")):
        from fsspec.implementations.http import HTTPFileSystem

        async def client(**kwargs):
            import aiohttp

            kwargs.pop("loop", None)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=retry.timeout, sock_read=retry.timeout)
            return aiohttp.ClientSession(connector=await _connector(connections), timeout=timeout, **kwargs)

        fs = HTTPFileSystem(asynchronous=True, skip_instance_cache=True, get_client=client, **(storage_options or {}))
        return ReadStore(FsspecStore(fs, path=url.rstrip("/"), read_only=True), retry, url)
    raise ConfigError(f"unsupported store URL {url!r}; use gs://, http(s):// or a local path")


async def _connector(limit: int):
    """One pool of up to ``limit`` connections (made on the running loop, as aiohttp asks)."""
    import aiohttp

    return aiohttp.TCPConnector(limit=max(1, limit), ttl_dns_cache=300)


class ReadStore(WrapperStore):
    """A zarr store that counts what it reads and retries transient failures (see the module's text)."""

    def __init__(self, store, retry: RetryPolicy, url: str):
        super().__init__(store)
        self.retry, self.url = retry, url
        self.requests = self.bytes_read = 0
        self._kept: dict = {}  # key -> what open_metadata fetched (None: absent)
        # a local store's whole files are read right here, on zarr's loop: LocalStore sends each read to a
        # worker thread, and for the study's store (13,128 chunks of 8 bytes) the hops cost more than the reads
        self._root = str(store.root) if isinstance(store, LocalStore) else None
        fs = getattr(store, "fs", None)
        # fsspec closes the sessions of its synchronous filesystems only: a Dataset opened on this store
        # and dropped later (open_store's) closes its session here, without "Unclosed client session"
        self._finalizer = weakref.finalize(self, _close_session, fs) if fs is not None else None

    def _with_store(self, store):
        return type(self)(store, self.retry, self.url)

    def close(self) -> None:
        """Close the store and its HTTP session (on zarr's loop, where it lives)."""
        if self._finalizer is not None:
            self._finalizer()
        super().close()

    async def get(self, key, prototype, byte_range=None):
        if byte_range is None and key in self._kept:  # fetched with the store's opening
            return self._kept[key]
        if self._root is not None and byte_range is None:  # the whole file, None when there is none (as LocalStore)
            try:
                with open(os.path.join(self._root, *key.split("/")), "rb") as fh:
                    value = prototype.buffer.from_bytes(fh.read())
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                value = None
        else:
            value = await self._retrying(key, self._store.get, key, prototype, byte_range)
        self.requests += 1  # only zarr's event-loop thread reads: no lock needed
        if value is not None:
            self.bytes_read += len(value)
        return value

    async def _retrying(self, key: str, call, *args, retry: RetryPolicy | None = None):
        retry, last = retry or self.retry, ""
        for attempt in range(retry.attempts):
            if attempt:
                delay = min(retry.max_delay, retry.base_delay * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                return await call(*args)
            except (KeyboardInterrupt, MemoryError, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - sorted into transient and permanent below
                last, transient = _describe(exc)
                if not transient:
                    raise StoreError(f"{last} reading {key}") from None
        tries = f" (after {retry.attempts} attempts)" if retry.attempts > 1 else ""
        raise StoreError(f"{last} reading {key}{tries}")

    async def open_metadata(self) -> bool:
        """Fetch what opening the store reads first (its metadata in either Zarr format, the first chunk of
        each ERA5 coordinate) all at once, and keep it for the reads that follow: one round trip where
        xarray, asking for them one after another, would wait for about eight. Whether the store has Zarr
        metadata at all; ``StoreError`` when it cannot be read or gives no answer in ``PROBE_DEADLINE``."""
        proto = default_buffer_prototype()
        tasks = [asyncio.ensure_future(self._retrying(k, self._store.get, k, proto, None, retry=PROBE_RETRY))
                 for k in OPENING_KEYS]
        done, _ = await asyncio.wait(tasks, timeout=PROBE_DEADLINE, return_when=asyncio.FIRST_COMPLETED)
        try:
            if not done:
                raise StoreError(f"no answer within {PROBE_DEADLINE:g} s")
            got = await asyncio.gather(*tasks)
        except BaseException:  # the first failure ends the opening: the other reads are stopped, not left
            for task in tasks:  # pending (each would print "Task was destroyed but it is pending!" at exit)
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        self.requests += len(got)
        self.bytes_read += sum(len(v) for v in got if v is not None)
        self._kept = dict(zip(OPENING_KEYS, got))
        return any(self._kept[k] is not None for k in OPENING_KEYS[:3])


def _close_session(fs) -> None:
    """Close ``fs``'s aiohttp session on zarr's loop as fsspec closes its own filesystems' sessions: waiting for
    it, or closing its connections directly where that cannot be waited for (on the loop's own thread, or once
    the loop has stopped), which is what marks it closed."""
    from fsspec.implementations.http import HTTPFileSystem

    session = getattr(fs, "_session", None)
    if session is not None and not session.closed:
        HTTPFileSystem.close_session(_get_loop(), session)


def _describe(exc: Exception) -> tuple[str, bool]:
    """(one line naming the failure, whether trying again may help)."""
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    text = (str(getattr(exc, "message", "") or exc).strip().splitlines() or [""])[0][:160]
    if isinstance(status, int) and status >= 400:
        line = f"HTTP {status} {text}".strip()
        if status in (401, 403):
            return f"{line}: access denied; check --credentials (anonymous by default)", False
        return line, status in _TRANSIENT_STATUS
    name = type(exc).__name__
    if isinstance(exc, PermissionError) or "Forbidden" in text:
        return f"{name}: {text}: access denied; check --credentials (anonymous by default)", False
    aiohttp = sys.modules.get("aiohttp")  # an aiohttp error comes only from an aiohttp already imported
    transient = (isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError))
                 or (aiohttp is not None and isinstance(exc, aiohttp.ClientError)))
    return f"{name}: {text}".rstrip(": "), transient


def submit(coro):
    """Schedule ``coro`` on zarr's event-loop thread; a concurrent.futures.Future of its result."""
    return asyncio.run_coroutine_threadsafe(coro, _get_loop())
