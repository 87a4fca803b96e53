"""Raw bytes of a store's keys: local files, or HTTP(S)/GCS objects fetched concurrently with retries.

``ChunkSource`` is what the rest of the package reads through: ``get``/``get_many`` from any thread, or
``aget``/``aget_many`` as coroutines on its private event-loop thread (``LoopThread``). Remote reads go
through ``HttpClient``: one aiohttp session multiplexing every request over pooled connections, with
per-request retries (``RetryPolicy``) and, for ``gs://`` stores, Google's JSON API with optional
google-auth credentials. A key that cannot be read raises ``ChunkError``; an absent one reads as None.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError

CLOSING_SERVER_REQUESTS = 4  # requests in flight to a server that closes every connection


@dataclass(frozen=True)
class RetryPolicy:
    """Per-chunk retries: transient errors (connection, timeout, HTTP 408/429/5xx) back off and retry."""

    attempts: int = 5
    base_delay: float = 0.25  # seconds; doubles each attempt, with jitter
    max_delay: float = 8.0
    # seconds a request may go without progress (connecting, or between bytes received); time spent
    # queued for a pooled connection does not count, nor does a long transfer that keeps moving
    timeout: float = 60.0


# A store's first request: a few quick retries, so an unreachable store fails fast.
PROBE_RETRY = RetryPolicy(attempts=3, base_delay=0.2, timeout=20)


class ChunkError(Exception):
    """A chunk could not be read (after retries, or a permanent error)."""


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
