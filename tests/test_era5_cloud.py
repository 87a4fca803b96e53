"""The cloud code path without the cloud: gs:// through a real GCS emulator, HTTP through loopback
proxies that delay or fail requests, kill-and-resume in a subprocess, and a full disk.

The emulator's HTTP/1.0 server closes every connection and accepts few at a time: a burst of a hundred
connections stalls for seconds in SYN retries (2 s per hour read at lstmnb's default concurrency), so
extractions from it keep ``EMULATOR`` requests in flight; a real bucket keeps its connections open."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr

for _module in ("gcsfs", "aiohttp", "google.auth"):  # the cloud extra: without it these tests skip, not fail
    pytest.importorskip(_module, reason=f"{_module} is not installed (pip install 'lstmnb[cloud]')")

from lstmnb.data import FetchStats, Request, RetryPolicy, extract, open_store
from lstmnb.data.cache import status
from _loopback import Faults, Proxy, StaticServer
from lstmnb.errors import ConfigError, DataError

FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.02, max_delay=0.1, timeout=10)
EMULATOR = 8  # requests in flight to the GCS emulator (see above)
TWO_VARS = ("2m_temperature", "surface_pressure")


@pytest.fixture
def emulator_via(monkeypatch):
    """Point gcsfs and lstmnb at another emulator address (e.g. a proxy) for one test."""

    def use(url: str) -> None:
        import gcsfs

        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        gcsfs.GCSFileSystem.clear_instance_cache()

    yield use
    import gcsfs

    gcsfs.GCSFileSystem.clear_instance_cache()


def test_emulator_extraction_equals_local(cloud_store, tmp_path):
    url, local = cloud_store
    kw = dict(variables=TWO_VARS, start="2020-01-01", end="2020-01-03")
    stats = FetchStats()
    cloud = extract(Request(source=url, **kw), cache_dir=tmp_path / "c", progress=False, stats=stats,
                    concurrency=EMULATOR)
    here = extract(Request(source=str(local), **kw), cache_dir=tmp_path / "l", progress=False)
    assert stats.chunks == 72 * 2 and stats.bytes > 0
    assert cloud.attrs["source_url"] == url
    for v in TWO_VARS:
        np.testing.assert_array_equal(cloud[v].values, here[v].values)
    xr.testing.assert_equal(cloud.drop_attrs(), here.drop_attrs())
    box = dict(points=None, box=(39.5, 40.5, -80.5, -79.5), start="2020-01-02", end="2020-01-02")
    a = extract(Request(source=url, **box), cache_dir=tmp_path / "c", progress=False, concurrency=EMULATOR)
    b = extract(Request(source=str(local), **box), cache_dir=tmp_path / "l", progress=False)
    np.testing.assert_array_equal(a["2m_temperature"].values, b["2m_temperature"].values)
    assert a["2m_temperature"].shape == (24, 5, 5)
    assert open_store(url).attrs["valid_time_stop"] == "2020-01-03"


def test_retries_recover_from_transient_failures(cloud_store, gcs_emulator, emulator_via, tmp_path):
    """gs:// through gcsfs (which retries on its own policy, after 1-2 s first) and http:// through lstmnb's
    retries (twice here)."""
    url, local = cloud_store
    faults = Faults(flaky=r"2m_temperature/\d+\.\d+\.\d+", every=2, fail_times=1)
    with Proxy(gcs_emulator.url, faults=faults) as proxy:
        emulator_via(proxy.url)
        got = extract(Request(source=url, start="2020-01-01", end="2020-01-02"), cache_dir=tmp_path,
                      progress=False, concurrency=EMULATOR)
    want = extract(Request(source=str(local), start="2020-01-01", end="2020-01-02"), cache_dir=tmp_path / "l",
                   progress=False)
    assert faults.injected >= 20, "about half of the 48 chunks failed once before succeeding"
    np.testing.assert_array_equal(got["2m_temperature"].values, want["2m_temperature"].values)
    faults = Faults(flaky=r"2m_temperature/\d+\.\d+\.\d+", every=2, fail_times=2)
    with StaticServer(local, faults=faults) as server:
        got = extract(Request(source=server.url, start="2020-01-01", end="2020-01-02"), cache_dir=tmp_path,
                      progress=False, retry=FAST_RETRY)
    assert faults.injected >= 40
    np.testing.assert_array_equal(got["2m_temperature"].values, want["2m_temperature"].values)


def test_chunk_that_keeps_failing_fails_its_block_only(cloud_store, tmp_path):
    _, local = cloud_store
    with StaticServer(local, faults=Faults(broken=r"2m_temperature/30\.0\.0")) as server:
        req = Request(source=server.url, start="2020-01-01", end="2020-01-03")
        with pytest.raises(DataError) as info:
            extract(req, cache_dir=tmp_path, progress=False, retry=FAST_RETRY, block_hours=24)
        msg = str(info.value)
        assert "2020-01-02T06" in msg and server.url in msg and "503" in msg and "\n" not in msg
        cached = {r["target"]: r for r in status(tmp_path)}
        # days 1 and 3 finished and stayed; of day 2 at most the hours before 06 (a checkpoint) are kept
        assert all(r["hours"] in (48, 54) for r in cached.values()), cached
        kept = min(r["hours"] for r in cached.values())
        server.faults = None  # the store is well again
        stats = FetchStats()
        got = extract(req, cache_dir=tmp_path, progress=False, block_hours=24, stats=stats)
    assert stats.chunks == 72 - kept and stats.blocks_cached == 4, "only the failed day is fetched again"
    want = extract(Request(source=str(local), start="2020-01-01", end="2020-01-03"), cache_dir=tmp_path / "l",
                   progress=False)
    np.testing.assert_array_equal(got["2m_temperature"].values, want["2m_temperature"].values)


def test_unreachable_and_absent_stores(cloud_store, gcs_emulator, emulator_via, tmp_path, monkeypatch):
    import socket

    from lstmnb.data import stores

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(DataError) as info:  # refused: lstmnb's own retries, then the error
        open_store(f"http://127.0.0.1:{closed}/era5.zarr")
    msg = str(info.value)
    assert f"127.0.0.1:{closed}/era5.zarr" in msg and msg.endswith("check the network, or use source='sample'")
    # gcsfs keeps retrying a refused connection with its own backoff: the opening's deadline ends the wait
    # (8 s; 1 s here says the same)
    monkeypatch.setattr(stores, "PROBE_DEADLINE", 1.0)
    emulator_via(f"http://127.0.0.1:{closed}")
    with pytest.raises(DataError, match=r"cannot reach gs://lstmnb-test/ar/era5.zarr: no answer within 1 s.*check "
                                        r"the network"):
        extract(Request(source=cloud_store[0]), cache_dir=tmp_path, progress=False)
    # the command says it in one line: the opening's other reads are stopped with the first failure, not left
    # pending for the interpreter to report at exit ("Task was destroyed but it is pending!")
    out = subprocess.run([sys.executable, "-m", "lstmnb", "data", "--source", f"http://127.0.0.1:{closed}/x.zarr"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "LSTMNB_CACHE": str(tmp_path)})
    assert out.returncode == 2 and "cannot reach" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.endswith("check the network, or use --source sample\n")  # the advice as the command takes it
    # so do the studies that fetch their own data (they are shared with the notebooks, which speak Python)
    for study in (["skill"], ["region", "skill", "--box", "40,41,-100,-99"]):
        out = subprocess.run([sys.executable, "-m", "lstmnb", *study, "--source", f"http://127.0.0.1:{closed}/x.zarr"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "LSTMNB_CACHE": str(tmp_path)})
        assert out.returncode == 2 and out.stderr.endswith("check the network, or use --source sample\n"), out.stderr
    emulator_via(gcs_emulator.url)
    with pytest.raises(DataError, match="no Zarr store at gs://lstmnb-test/nothing.zarr"):
        open_store("gs://lstmnb-test/nothing.zarr")


def test_store_opens_in_one_round_trip(small_store):
    """Opening a remote store asks for both formats' metadata and the coordinates' first chunks at once
    (one round trip, where xarray alone asks for about eight one after another), and xarray then reads
    what came: nothing more goes to the server, and the store's metadata are open_zarr's."""
    from lstmnb.data import StoreMeta, open_store
    from lstmnb.data.stores import OPENING_KEYS

    want = StoreMeta.from_dataset(xr.open_zarr(str(small_store), chunks=None)).to_json()
    with StaticServer(small_store) as server, Proxy(server.url, delay=0.05) as proxy:
        opened = open_store(proxy.url)
        assert StoreMeta.from_dataset(opened).to_json() == want
        # all asked at once; of them the server found the six a v2 store has, and was asked for nothing else
        assert proxy.peak_in_flight == len(OPENING_KEYS) and server.requests == 6


def test_credentials_asked_for_but_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    with pytest.raises(ConfigError, match="google_default.*none found.*or drop the token for anonymous access$"):
        open_store("arco-v3", storage_options={"token": "google_default"})
    with pytest.raises(ConfigError, match="credentials file .*absent.json.* not found"):
        open_store("arco-v3", storage_options={"token": str(tmp_path / "absent.json")})


@pytest.fixture
def slow_http_store(small_store):
    """(server, proxy): the ten-day store over loopback HTTP, behind a proxy adding 20 ms per request."""
    with StaticServer(small_store) as server, Proxy(server.url, delay=0.02) as proxy:
        yield server, proxy


_CHILD = """
import sys
from lstmnb.data import Request, extract
extract(Request(source=sys.argv[1], start="2020-01-01", end="2020-01-10"), cache_dir=sys.argv[2],
        progress=False, concurrency=int(sys.argv[3]), block_hours=24)
"""


def _cached_hours(cache) -> dict[str, int]:
    """target -> hours kept in the cache (whole days and checkpointed parts: per day the widest file,
    as reads use it); the child reads one variable in 24-hour blocks, so a target is one status row."""
    return {r["target"]: r["hours"] for r in status(cache) if r["block_hours"] == 24}


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", [4, 32])
def test_kill_and_resume_redoes_at_most_one_block(slow_http_store, small_store, tmp_path, concurrency):
    """At most one block of hours is ever read but not kept (finished days, plus checkpoints of the
    oldest unfinished day), so a kill mid-way loses at most one day of reads; the resumed run reads
    only the hours that are not cached."""
    server, proxy = slow_http_store
    cache = tmp_path / "cache"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, proxy.url, str(cache), str(concurrency)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        if sum(_cached_hours(cache).values()) >= 2 * 96:  # 2 points x 4 of 10 days
            break
        time.sleep(0.005)
    assert child.poll() is None, f"the child finished before it could be killed: {child.stderr.read()!r}"
    child.send_signal(signal.SIGKILL)
    child.wait()
    reads_before = _settled(lambda: server.chunk_reads.get("2m_temperature", 0))  # with those the proxy held
    kept = min(_cached_hours(cache).values())
    assert 96 <= kept < 240
    assert reads_before - kept <= 24, f"{reads_before} hours read, {kept} kept: more than one day lost"

    stats = FetchStats()
    resumed = extract(Request(source=proxy.url, start="2020-01-01", end="2020-01-10"),
                      cache_dir=cache, progress=False, concurrency=concurrency, block_hours=24, stats=stats)
    assert stats.chunks == 240 - kept, "only hours that are not cached are read"
    assert server.chunk_reads["2m_temperature"] == reads_before + stats.chunks
    whole = extract(Request(source=str(small_store), start="2020-01-01", end="2020-01-10"),
                    cache_dir=tmp_path / "whole", progress=False)
    np.testing.assert_array_equal(resumed["2m_temperature"].values, whole["2m_temperature"].values)


def _settled(count, quiet_s: float = 0.3, limit_s: float = 10.0) -> int:
    """``count()`` once it has not changed for ``quiet_s`` (a busy machine may deliver held requests late)."""
    last, since, end = count(), time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() - since < quiet_s and time.monotonic() < end:
        time.sleep(0.02)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_timeout_counts_a_stalled_request_not_its_wait_for_a_connection(small_store):
    """One connection, requests that each take 0.6 s, a 1.5 s timeout: the fourth waits 1.8 s for the
    connection and still succeeds; a server that stalls for longer than the timeout is retried, then
    named in the error. (Margins of about a second: a busy machine's stalls do not flip it.)"""
    import asyncio

    from zarr.core.buffer import default_buffer_prototype

    from lstmnb.data.stores import StoreError, run, zarr_store

    retry = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.01, timeout=1.5)

    async def four(store):
        return await asyncio.gather(*(store.get("time/0", default_buffer_prototype()) for _ in range(4)))

    with StaticServer(small_store, delay=0.6) as server:
        store = zarr_store(server.url, True, connections=1, retry=retry)
        try:
            bodies = [b.to_bytes() for b in run(four(store))]
        finally:
            store.close()
        assert bodies == [(small_store / "time" / "0").read_bytes()] * 4 and server.peak_in_flight == 1
    with StaticServer(small_store, delay=3.0) as server:
        store = zarr_store(server.url, True, connections=4, retry=retry)
        try:
            with pytest.raises(StoreError, match=r"Timeout.*time/0 \(after 2 attempts\)"):
                run(store.get("time/0", default_buffer_prototype()))
        finally:
            store.close()


def test_reads_stay_concurrent_under_the_one_block_bound(slow_http_store, tmp_path):
    """Many reads are in flight at once even with small blocks (the bound moves with checkpoints)."""
    server, proxy = slow_http_store
    stats = FetchStats()
    extract(Request(source=proxy.url, start="2020-01-01", end="2020-01-03"), cache_dir=tmp_path,
            progress=False, concurrency=24, block_hours=24, stats=stats)
    assert stats.chunks == 72 and stats.blocks_written == 6
    # the proxy saw a day's hours wait out their 20 ms round trip together, not one after another (all 24
    # on an idle machine; a busy one may return the first before it issues the last), and never more
    assert 12 <= proxy.peak_in_flight <= 24, proxy.peak_in_flight


def test_chunk_reads_reuse_the_opening(slow_http_store, tmp_path):
    """After the one round trip of opening, an extraction asks for nothing but chunks, one per hour."""
    server, proxy = slow_http_store
    stats = FetchStats()
    extract(Request(source=proxy.url, start="2020-01-01", end="2020-01-01"), cache_dir=tmp_path, progress=False,
            stats=stats)
    assert stats.requests == 24 and server.chunk_requests["2m_temperature"] == 24


def test_store_without_consolidated_metadata_still_opens(small_store, gcs_emulator, tmp_path):
    """A zarr-v2 store without .zmetadata is opened by xarray (and read through zarr) as before; on a remote
    store that is said in one line (xarray's own warning has five), on a local one not at all."""
    import shutil
    import warnings

    plain = tmp_path / "plain.zarr"
    shutil.copytree(small_store, plain)
    (plain / ".zmetadata").unlink()
    req = dict(start="2020-01-02", end="2020-01-02")
    with warnings.catch_warnings(record=True) as local:
        warnings.simplefilter("always")
        got = extract(Request(source=str(plain), **req), cache_dir=tmp_path / "c", progress=False)
    want = extract(Request(source=str(small_store), **req), cache_dir=tmp_path / "l", progress=False)
    xr.testing.assert_equal(got.drop_attrs(), want.drop_attrs())
    assert not [w for w in local if "consolidated" in str(w.message)], [str(w.message) for w in local]
    gcs_emulator.make_bucket("lstmnb-plain")
    gcs_emulator.upload_dir(plain, "lstmnb-plain", "plain.zarr")
    with warnings.catch_warnings(record=True) as remote:
        warnings.simplefilter("always")
        assert open_store("gs://lstmnb-plain/plain.zarr").sizes == open_store(str(small_store)).sizes
    [said] = [str(w.message) for w in remote if "consolidated" in str(w.message)]
    assert said.startswith("gs://lstmnb-plain/plain.zarr has no consolidated metadata") and "\n" not in said
    with StaticServer(plain) as server, pytest.raises(DataError) as info:  # plain HTTP cannot list the arrays
        open_store(server.url)
    assert str(info.value).startswith(f"{server.url} has no consolidated metadata (.zmetadata)")


_DISK_FULL = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # writes past the limit fail with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))  # like a full disk: a 24 h box block is ~8 kB
from lstmnb.cli import main
sys.exit(main(["data", "--source", sys.argv[1], "--box", "38,40,279,281", "--start", "2020-01-01",
               "--end", "2020-01-02", "--no-progress", "--block-hours", "24"]))
"""


def test_disk_full_keeps_the_cache_consistent(small_store, tmp_path):
    env = {**os.environ, "LSTMNB_CACHE": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", _DISK_FULL, str(small_store)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "cannot write a cache block" in run.stderr and "disk full" in run.stderr
    assert "Traceback" not in run.stderr
    assert not list((tmp_path / "extracts").rglob("*.tmp"))
    # hours saved before the disk filled up (a partial block, written whole) may stay; nothing else
    kept = list((tmp_path / "extracts").rglob("*.npy"))
    assert len(kept) <= 1
    request = Request(source=str(small_store), points=None, box=(38, 40, 279, 281), start="2020-01-01",
                      end="2020-01-02")
    stats = FetchStats()
    ds = extract(request, cache_dir=tmp_path / "extracts", progress=False, block_hours=24, stats=stats)
    assert ds["2m_temperature"].shape == (48, 9, 9)
    assert stats.chunks == 48 or (kept and stats.chunks < 48)  # only what is missing is read again
    fresh = extract(request, cache_dir=tmp_path / "fresh", progress=False, block_hours=24)
    xr.testing.assert_identical(ds, fresh)  # the kept hours are exactly right


def test_cached_request_works_offline(cloud_store, gcs_emulator, emulator_via, tmp_path, monkeypatch):
    """A request whose blocks are all cached is answered from the cache and the kept store metadata,
    with the store unreachable; one that needs new blocks says what is cached and what is missing."""
    import socket

    from lstmnb.data import stores

    # each look at the gone store waits out the opening's deadline (8 s): 1 s here says the same
    monkeypatch.setattr(stores, "PROBE_DEADLINE", 1.0)

    url, _ = cloud_store
    kw = dict(variables=TWO_VARS, start="2020-01-01", end="2020-01-02")
    online = extract(Request(source=url, **kw), cache_dir=tmp_path, progress=False, block_hours=24,
                     concurrency=EMULATOR)
    # the store answers every request with an error, and counts it: no probe of the store (gcsfs's or
    # lstmnb's), not even one it would recover from, goes unseen; the count, not a wall-clock bound
    gone = Faults(broken=".")
    with Proxy(gcs_emulator.url, faults=gone) as proxy:
        emulator_via(proxy.url)
        stats = FetchStats()
        offline = extract(Request(source=url, **kw), cache_dir=tmp_path, progress=False, block_hours=24, stats=stats)
        assert gone.injected == 0, "the store was asked, though every block was cached"
        assert stats.chunks == 0 and stats.requests == 0 and stats.blocks_cached == 2 * 2 * 2
        xr.testing.assert_identical(online, offline)
        # a sub-range of the cached days works too
        part = extract(Request(source=url, **{**kw, "start": "2020-01-02"}), cache_dir=tmp_path, progress=False,
                       block_hours=24)
        xr.testing.assert_equal(part.drop_attrs(), online.sel(time=slice("2020-01-02", None)).drop_attrs())
        assert gone.injected == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    emulator_via(f"http://127.0.0.1:{dead}")  # the emulator is gone as far as gcsfs and lstmnb know
    # bad input is still checked against the kept metadata (the store, asked in case it has grown, is gone)
    with pytest.raises(ConfigError, match="unknown variable 'temp2m'.*2m_temperature"):
        extract(Request(source=url, variables=("temp2m",)), cache_dir=tmp_path, progress=False)
    with pytest.raises(DataError) as info:
        extract(Request(source=url, **{**kw, "end": "2020-01-03"}), cache_dir=tmp_path, progress=False,
                block_hours=24, retry=FAST_RETRY)
    msg = str(info.value)
    assert "cannot reach" in msg and "8 of 12 blocks of this request are cached" in msg and "\n" not in msg
    emulator_via(gcs_emulator.url)
    stats = FetchStats()
    extract(Request(source=url, **{**kw, "end": "2020-01-03"}), cache_dir=tmp_path, progress=False,
            block_hours=24, stats=stats, concurrency=EMULATOR)
    assert stats.chunks == 24 * 2 and stats.blocks_cached == 8


# --- Block reads: only the Blosc blocks that hold the points -------------------------------------

WIDE = dict(points=((40.0, 280.0), (20.0, 280.0)), variables=TWO_VARS, start="2020-01-01", end="2020-01-02")


def _wide_truth(store) -> dict[str, np.ndarray]:
    ds = xr.open_zarr(str(store), chunks=None)
    return {v: ds[v].sel(latitude=[40.0, 20.0], longitude=280.0).values for v in TWO_VARS}


def _chunk_bytes(store) -> int:
    return sum(f.stat().st_size for v in TWO_VARS for f in (store / v).glob("*.0.0"))


@pytest.mark.parametrize("how", ["local", "http", "http, Range ignored"])
def test_points_read_only_their_blocks(wide_store, tmp_path, how):
    truth = _wide_truth(wide_store)

    def run(cache, server=None, partial_reads=True):
        stats = FetchStats()
        src = str(wide_store) if server is None else server.url
        ds = extract(Request(source=src, **WIDE), cache_dir=tmp_path / cache, progress=False, stats=stats,
                     partial_reads=partial_reads)
        for v in TWO_VARS:
            np.testing.assert_array_equal(ds[v].values, truth[v])
        return stats

    if how == "local":
        parts = run("parts")
        whole = run("whole", partial_reads=False)
        assert whole.bytes == _chunk_bytes(wide_store)
        assert parts.bytes < 0.4 * whole.bytes, (parts.bytes, whole.bytes)
        assert parts.chunks == whole.chunks == 96
        return
    with StaticServer(wide_store, ranges=how == "http") as server:
        stats = run("c", server)
        served = {v: server.chunk_requests[v] for v in TWO_VARS}
        assert [server.chunk_reads[v] for v in TWO_VARS] == [48, 48], "each chunk is read once"
    if how == "http":
        assert stats.bytes < 0.4 * _chunk_bytes(wide_store)
        # per chunk: the header, then the two points' blocks (3 and 5 of 8: two ranges, at once)
        assert served == {v: 3 * 48 for v in TWO_VARS}
    else:  # the server sent whole chunks: correct values all the same
        assert stats.bytes >= _chunk_bytes(wide_store)


def test_block_reads_retry_and_fill_missing_chunks(wide_store, tmp_path_factory, tmp_path):
    """Transient failures of header or block requests are retried; a chunk absent from the store
    gives the fill value (NaN), as zarr does."""
    import shutil

    store = tmp_path_factory.mktemp("holes") / "wide.zarr"
    shutil.copytree(wide_store, store)
    (store / "2m_temperature" / "5.0.0").unlink()
    truth = _wide_truth(store)
    assert np.isnan(truth["2m_temperature"][5]).all()
    faults = Faults(flaky=r"2m_temperature/\d+\.0\.0", every=2, fail_times=2)
    with StaticServer(store, faults=faults) as server:
        ds = extract(Request(source=server.url, **WIDE), cache_dir=tmp_path, progress=False, retry=FAST_RETRY)
    assert faults.injected >= 40
    for v in TWO_VARS:
        np.testing.assert_array_equal(ds[v].values, truth[v])


def test_small_and_large_boxes(wide_store, tmp_path):
    """A small box is read through its blocks, a box covering most of a chunk whole; both exact."""
    ds = xr.open_zarr(str(wide_store), chunks=None)["2m_temperature"]
    # per hour's chunk: a header then one range of adjacent blocks; or one whole read, no header
    for name, box, share, requests in [("small", (39.0, 40.0, 279.5, 280.0), 0.5, 2 * 24),
                                       ("large", (-8.0, 78.0, 242.0, 328.0), 1.0, 24)]:
        stats = FetchStats()
        got = extract(Request(source=str(wide_store), points=None, box=box, start="2020-01-01", end="2020-01-01"),
                      cache_dir=tmp_path / name, progress=False, stats=stats)["2m_temperature"]
        want = ds.sel(latitude=slice(box[1], box[0]), longitude=slice(box[2], box[3]), time=slice("2020-01-01", "2020-01-01T23"))
        np.testing.assert_array_equal(got.values, want.values)
        whole = sum((wide_store / "2m_temperature" / f"{t}.0.0").stat().st_size for t in range(24))
        assert stats.bytes <= share * whole + 24 * 4096, (name, stats.bytes, whole)
        assert stats.chunks == 24 and stats.requests == requests, (name, stats.requests)
    assert stats.bytes == whole, "the large box's chunks were each read whole, once"


def test_emulator_block_reads_equal_local(gcs_emulator, wide_store, tmp_path):
    """gs:// through the emulator (its media downloads honour Range) gives the local values."""
    gcs_emulator.make_bucket("lstmnb-wide")
    gcs_emulator.upload_dir(wide_store, "lstmnb-wide", "ar/wide.zarr")
    stats = FetchStats()
    cloud = extract(Request(source="gs://lstmnb-wide/ar/wide.zarr", **WIDE), cache_dir=tmp_path / "c",
                    progress=False, stats=stats, concurrency=EMULATOR)
    here = extract(Request(source=str(wide_store), **WIDE), cache_dir=tmp_path / "l", progress=False)
    xr.testing.assert_equal(cloud.drop_attrs(), here.drop_attrs())
    assert stats.chunks == 96 and stats.bytes < 0.4 * _chunk_bytes(wide_store)


@pytest.mark.parametrize("codecs", ["blosc", "bitshuffle", "zstd", "sharded"])
def test_zarr_v3_stores(wide_store, tmp_path, codecs):
    """Zarr-v3 copies (as ARCO's newer store is) give the same series: Blosc ones through their blocks
    (bit-shuffled Blosc, which blosc_parts does not decode, whole), other codecs whole, sharded ones through
    zarr's sharding codec."""
    from conftest import write_v3

    store = write_v3(wide_store, tmp_path / f"v3-{codecs}.zarr", codecs)
    truth = _wide_truth(wide_store)
    with StaticServer(store) as server:
        stats = FetchStats()
        ds = extract(Request(source=server.url, **WIDE), cache_dir=tmp_path / "c", progress=False, stats=stats)
        for v in TWO_VARS:
            np.testing.assert_array_equal(ds[v].values, truth[v])
        requests = {v: server.chunk_requests.get(v, 0) for v in TWO_VARS}
    if codecs == "blosc":  # header, then the two points' blocks, per chunk
        assert requests == {v: 3 * 48 for v in TWO_VARS} and stats.bytes < 0.4 * _chunk_bytes(wide_store)
    elif codecs in ("zstd", "bitshuffle"):  # each chunk whole, once (no header first for Blosc read whole)
        assert requests == {v: 48 for v in TWO_VARS}
    here = extract(Request(source=str(store), **WIDE), cache_dir=tmp_path / "l", progress=False)
    xr.testing.assert_equal(ds.drop_attrs(), here.drop_attrs())


# --- gcsfs's path: standard HTTP unless the user chose otherwise -------------------------------------

_OPEN_AND_SAY_PATH = """
import sys
from lstmnb.data import open_store
from lstmnb.data.stores import gcsfs_class, gcsfs_path
ds = open_store(sys.argv[1], storage_options={"token": "anon", "retry_timeout": 1, "retry_initial": 0.1,
                                               "retry_maximum": 0.2})
print(gcsfs_class().__module__, "|", gcsfs_path(), "|", ds.attrs["valid_time_stop"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("user_setting, module", [(None, "gcsfs.core"), ("true", "gcsfs.extended_gcsfs")])
def test_gcsfs_takes_the_standard_path_unless_the_user_set_it(cloud_store, user_setting, module):
    """gcsfs reads the variable once, when first imported, so each setting gets a fresh process. Unset,
    lstmnb's own store opens the emulator's bucket on gcsfs's standard HTTP path (without setting the
    variable for anyone else); set by the user, their choice stands
    (the experimental path asks the Storage Control API for the bucket's layout, fails here within the
    short retry given, and falls back to HTTP)."""
    url, _ = cloud_store
    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    if user_setting is not None:
        env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = user_setting
    out = subprocess.run([sys.executable, "-c", _OPEN_AND_SAY_PATH, url], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got_module, path, stop = (part.strip() for part in out.stdout.strip().splitlines()[-1].split("|"))
    assert got_module == module and stop == "2020-01-03"
    assert path == ("standard HTTP path" if user_setting is None
                    else "experimental zonal/HNS path (GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT='true')")


# --- The codec pipeline from plain xarray ---------------------------------------------------------------

def test_plain_xarray_reads_only_the_blocks_after_one_line(wide_store):
    """``zarr.config.set({"codec_pipeline.path": ...})`` then ``xr.open_zarr``: the points' values are
    zarr's own, and the server sends about a quarter of the chunk bytes (a header and a block per chunk)."""
    import zarr

    from lstmnb.data.blosc_pipeline import PATH

    truth = _wide_truth(wide_store)
    lat = xr.DataArray([40.0, 20.0], dims="point")
    lon = xr.DataArray([280.0, 280.0], dims="point")
    sent = {}
    for name, settings in (("default", {}), ("lstmnb", {"codec_pipeline.path": PATH})):
        with StaticServer(wide_store) as server, zarr.config.set(settings):
            ds = xr.open_zarr(server.url, chunks=None)
            got = ds["2m_temperature"].sel(latitude=lat, longitude=lon).values
            sent[name] = server.bytes
        np.testing.assert_array_equal(got, truth["2m_temperature"])
    assert sent["lstmnb"] < 0.4 * sent["default"], sent


def test_zarr_finds_the_pipeline_by_its_entry_point():
    """A fresh process that never imports lstmnb gets the class from zarr's registry (the entry point)."""
    code = ("import sys, zarr\nfrom zarr.registry import get_pipeline_class\n"
            "zarr.config.set({'codec_pipeline.path': 'lstmnb.data.blosc_pipeline.BloscBlocksPipeline'})\n"
            "print(get_pipeline_class().__name__, 'lstmnb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["BloscBlocksPipeline", "True"]


def test_a_plain_zarr_user_loads_only_the_pipelines_modules():
    """zarr loads every registered pipeline when a process first opens an array: in an environment with
    lstmnb, a plain zarr user gets the pipeline's two modules and their package, not xarray, pandas or
    the rest of lstmnb.data (that cost such a user 0.27 s per process, and tied every zarr open to them)."""
    code = ("import sys, zarr\na = zarr.create_array(store={}, shape=(4,), dtype='f4')\na[:] = 1.0\n"
            "assert (a[:] == 1.0).all()\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('lstmnb', 'xarray', 'pandas'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["lstmnb", "lstmnb.data", "lstmnb.data.blosc_parts", "lstmnb.data.blosc_pipeline"]
