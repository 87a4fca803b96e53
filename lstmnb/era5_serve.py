"""Loopback HTTP helpers for testing and benchmarking extraction without the cloud.

``StaticServer`` serves a directory (a Zarr store) fast, with keep-alive; ``Proxy`` forwards GET/HEAD
requests to an upstream server (the static server or a GCS emulator), adding a per-request delay like
a cloud round trip and failing chosen requests with HTTP 503 to exercise retries. Both bind 127.0.0.1
only. Run ``python -m lstmnb.era5_serve DIR --delay 0.03`` to serve a store from another process; it prints
the server's URL, the delayed proxy's, and an undelayed proxy's (to measure the path's bandwidth).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
        "content-length", "content-encoding"}


_CHUNK_KEY = re.compile(r"\d+(\.\d+)*")  # zarr v2 chunk keys: 12.0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request, client_address) -> None:
        """Clients that hang up (killed runs, closed pools) are normal here; stay quiet about them."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Base:
    """Start/stop a threaded loopback server; ``url`` is its base address."""

    server: _Server

    def _start(self, handler) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        self.server.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _StaticHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle's algorithm on, a small body then waits
    # for the client's delayed ACK (~40 ms on Linux), a stall no cloud store adds. TCP_NODELAY.
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:  # quiet
        pass

    def _file(self) -> Path | None:
        owner: StaticServer = self.server.owner  # type: ignore[attr-defined]
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        path = (owner.root / rel).resolve()
        if owner.root not in path.parents and path != owner.root:
            return None
        return path if path.is_file() else None

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        owner: StaticServer = self.server.owner  # type: ignore[attr-defined]
        if self.path == "/.lstmnb-stats":  # request and byte counts, for benchmarks
            data = json.dumps({"requests": owner.requests, "bytes": owner.bytes,
                               "chunk_requests": owner.chunk_requests}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = path.read_bytes()
        owner.count(len(data) if body else 0, rel=path.relative_to(owner.root).as_posix())
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


class StaticServer(_Base):
    """Serves the files under ``root`` on a loopback port (GET and HEAD; 404 for anything else)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        self.requests = 0
        self.bytes = 0
        self.chunk_requests: dict[str, int] = {}  # array name -> chunk reads (metadata not counted)
        self._lock = threading.Lock()
        self._start(_StaticHandler)

    def count(self, nbytes: int, rel: str = "") -> None:
        array, _, key = rel.rpartition("/")
        is_chunk = bool(array) and bool(_CHUNK_KEY.fullmatch(key))
        with self._lock:
            self.requests += 1
            self.bytes += nbytes
            if is_chunk:
                self.chunk_requests[array] = self.chunk_requests.get(array, 0) + 1


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


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as above

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._forward("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward("HEAD")

    def _fail(self) -> None:
        body = b'{"error": {"code": 503, "message": "injected by lstmnb test proxy"}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, method: str) -> None:
        owner: Proxy = self.server.owner  # type: ignore[attr-defined]
        if owner.delay:
            time.sleep(owner.delay)
        if owner.should_fail(unquote(self.path)):
            self._fail()
            return
        conn = owner.connection()
        try:
            conn.request(method, self.path, headers={k: v for k, v in self.headers.items()
                                                     if k.lower() not in _HOP and k.lower() != "host"})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            owner.drop_connection()
            self._fail()
            return
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method == "GET":
            self.wfile.write(data)


class Proxy(_Base):
    """Forwards GET/HEAD to ``upstream`` (http://host:port) after ``delay`` seconds; injects ``faults``."""

    def __init__(self, upstream: str, delay: float = 0.0, faults: Faults | None = None):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.delay = float(delay)
        self.faults = faults or Faults()
        self.requests = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._start(_ProxyHandler)

    def connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        return conn

    def drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def should_fail(self, path: str) -> bool:
        f = self.faults
        with self._lock:
            self.requests += 1
            if f.broken and re.search(f.broken, path):
                f.injected += 1
                return True
            if f.flaky and re.search(f.flaky, path):
                key = path.split("?")[0]
                if key not in f.seen:
                    f.seen[key] = [len(f.seen), 0]
                index, fails = f.seen[key]
                if index % max(f.every, 1) == 0 and fails < f.fail_times:
                    f.seen[key][1] += 1
                    f.injected += 1
                    return True
        return False


def main(argv: list[str] | None = None) -> int:
    """Serve a directory behind a delay proxy until killed; print both URLs on one line."""
    p = argparse.ArgumentParser(description="Serve a Zarr store on loopback behind a delay proxy.")
    p.add_argument("root", help="directory to serve")
    p.add_argument("--delay", type=float, default=0.03, help="seconds added per request by the proxy")
    args = p.parse_args(argv)
    server = StaticServer(args.root)
    proxy = Proxy(server.url, delay=args.delay)
    direct = Proxy(server.url, delay=0.0)  # same path without the delay: measures its bandwidth
    print(f"{server.url} {proxy.url} {direct.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
        direct.close()
        server.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
