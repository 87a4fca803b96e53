"""Loopback HTTP helpers for testing and benchmarking extraction without the cloud.

``StaticServer`` serves a directory (a Zarr store) with keep-alive and byte ranges, optionally with a
per-request delay and injected failures; ``Proxy`` forwards GET/HEAD requests to an upstream server
(a GCS emulator, say), adding a per-request delay like a cloud round trip and failing chosen
requests with HTTP 503 to exercise retries. Both bind 127.0.0.1 only and run on aiohttp in a private
event-loop thread: its HTTP parser costs a fraction of ``http.server``'s per request, so the servers
stay far from being what a benchmark measures. Run
``python benchmarks/_loopback.py DIR --delay 0.03`` to serve a store from another process; it prints the
URL of a server that adds the delay and of one that does not (to measure the path's bandwidth).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
        "content-length", "content-encoding", "host"}
_CHUNK_PATH = re.compile(r"(?P<array>.+?)/(?:c[./])?\d+(?:[./]\d+)*")  # var/12.0.0, var/c/12/0/0


class _LoopThread:
    """An asyncio event loop on a private daemon thread; other threads hand it coroutines to run."""

    def __init__(self, name: str):
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class _Base:
    """Start/stop an aiohttp application on a loopback port, in its own event-loop thread."""

    port: int

    def _start(self, app) -> None:
        from aiohttp import web

        self._loop = _LoopThread(type(self).__name__)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]

        async def up():
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            await web.SockSite(runner, sock, backlog=512).start()
            return runner

        self._runner = self._loop.run(up())

    delay: float = 0.0
    faults: "Faults | None" = None
    in_flight: int = 0  # requests waiting out their delay now
    peak_in_flight: int = 0  # the most that waited at once: how many round trips a client overlaps

    async def _gate(self, request):
        """Wait out the delay; a 503 response when ``faults`` picks this request, else None."""
        from aiohttp import web

        if self.delay:
            self.in_flight += 1  # the event loop is one thread: no lock needed
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.delay)
            finally:
                self.in_flight -= 1
        if self.faults is not None and self.faults.should_fail(unquote(request.path_qs)):
            return web.json_response({"error": {"code": 503, "message": "injected by lstmnb test server"}},
                                     status=503)
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _stop(self) -> None:
        await self._runner.cleanup()

    def close(self) -> None:
        try:
            self._loop.run(self._stop())
        finally:
            self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StaticServer(_Base):
    """Serves the files under ``root`` on a loopback port: GET and HEAD, single byte ranges, 404 otherwise.

    ``delay`` seconds are added to every file request, like a cloud round trip, and ``faults`` fail
    chosen ones, as ``Proxy`` does for other servers (here without a second hop's cost).
    ``/.lstmnb-stats`` answers the requests, bytes, and per array the chunk requests and chunk reads
    served so far (benchmarks; a chunk read is a request for a chunk's first bytes, so reading a
    header then blocks is one read and two requests).
    ``ranges=False`` ignores Range headers and always sends whole files, like some simple servers.
    """

    def __init__(self, root: str | os.PathLike, ranges: bool = True, delay: float = 0.0,
                 faults: "Faults | None" = None):
        from aiohttp import web

        self.root = Path(root).resolve()
        self.ranges = ranges
        self.delay = float(delay)
        self.faults = faults
        self.requests = 0
        self.bytes = 0
        self.chunk_requests: dict[str, int] = {}  # array name -> requests for its chunks
        self.chunk_reads: dict[str, int] = {}  # array name -> requests for a chunk's start (whole or header)
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._serve)
        app.on_response_prepare.append(self._sent)
        self._start(app)

    def _file(self, rel: str) -> Path | None:
        path = (self.root / rel).resolve()
        if self.root not in path.parents and path != self.root:
            return None
        return path if path.is_file() else None

    def count(self, nbytes: int, rel: str = "", first: int = 0) -> None:
        """Count a request; one for a chunk's start (whole, or its header) also counts as a chunk read."""
        chunk = _CHUNK_PATH.fullmatch(rel)
        self.requests += 1  # the event loop is one thread: no lock needed
        self.bytes += nbytes
        if chunk:
            array = chunk["array"]
            self.chunk_requests[array] = self.chunk_requests.get(array, 0) + 1
            if first == 0:
                self.chunk_reads[array] = self.chunk_reads.get(array, 0) + 1

    async def _serve(self, request):
        from aiohttp import web

        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405)
        rel = unquote(request.path).lstrip("/")
        if rel == ".lstmnb-stats":
            return web.json_response({"requests": self.requests, "bytes": self.bytes,
                                      "chunk_requests": self.chunk_requests, "chunk_reads": self.chunk_reads})
        refused = await self._gate(request)
        if refused is not None:
            return refused
        path = self._file(rel)
        if path is None:
            return web.Response(status=404)
        request["file"] = path.relative_to(self.root).as_posix()  # counted by _sent as aiohttp sends it
        headers = {"Content-Type": "application/octet-stream"}
        if self.ranges:  # aiohttp serves a byte range (206; a-b, a- or -n) and answers one past the end with 416
            return web.FileResponse(path, headers=headers)
        return web.Response(body=path.read_bytes(), headers=headers)

    async def _sent(self, request, response) -> None:
        """Count a file's response as it is sent: the bytes of its body, and where its range starts."""
        if "file" in request and response.status in (200, 206):
            first = int(response.headers["Content-Range"].split()[1].split("-")[0]) if response.status == 206 else 0
            self.count(response.content_length if request.method == "GET" else 0, rel=request["file"], first=first)


@dataclass
class Faults:
    """Which requests the proxy fails with HTTP 503.

    ``flaky``: paths matching it fail their first ``fail_times`` requests, for every ``every``-th such
    path (counted in arrival order); ``broken``: paths matching it always fail.
    """

    flaky: str | None = None
    every: int = 3
    fail_times: int = 1
    broken: str | None = None
    seen: dict = field(default_factory=dict)
    injected: int = 0

    def should_fail(self, path: str) -> bool:
        if self.broken and re.search(self.broken, path):
            self.injected += 1
            return True
        if self.flaky and re.search(self.flaky, path):
            key = path.split("?")[0]
            if key not in self.seen:
                self.seen[key] = [len(self.seen), 0]
            index, fails = self.seen[key]
            if index % max(self.every, 1) == 0 and fails < self.fail_times:
                self.seen[key][1] += 1
                self.injected += 1
                return True
        return False


class Proxy(_Base):
    """Forwards GET/HEAD to ``upstream`` (http://host:port) after ``delay`` seconds; injects ``faults``."""

    def __init__(self, upstream: str, delay: float = 0.0, faults: Faults | None = None):
        from aiohttp import web

        parts = urlsplit(upstream)
        self.upstream = f"http://{parts.hostname or '127.0.0.1'}:{parts.port or 80}"
        self.delay = float(delay)
        self.faults = faults or Faults()
        self._session = None
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._start(app)

    async def _forward(self, request):
        import aiohttp
        from aiohttp import web

        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405)
        refused = await self._gate(request)
        if refused is not None:
            return refused
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                  auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=60)) as resp:
                data = await resp.read()
                out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return web.json_response({"error": {"code": 503, "message": "upstream unreachable"}}, status=503)
        if request.method == "HEAD":
            return web.Response(status=status, headers=out)
        return web.Response(status=status, body=data, headers=out)

    async def _stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        await super()._stop()


def main(argv: list[str] | None = None) -> int:
    """Serve a directory with and without a per-request delay until killed; print both URLs on one line."""
    p = argparse.ArgumentParser(description="Serve a Zarr store on loopback with a per-request delay.")
    p.add_argument("root", help="directory to serve")
    p.add_argument("--delay", type=float, default=0.03, help="seconds added per request (default 0.03)")
    args = p.parse_args(argv)
    delayed = StaticServer(args.root, delay=args.delay)
    direct = StaticServer(args.root)  # the same path without the delay: measures its bandwidth
    print(f"{delayed.url} {direct.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        delayed.close()
        direct.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
