"""How fast is `lstmnb data` against an ARCO-ERA5-shaped store, compared with the published approach?

Builds a store with ARCO-sized chunks (one hour of a 721 x 1440 float32 global field per chunk,
Blosc-LZ4 with byte shuffle, zarr format 2, consolidated metadata), serves it from a threaded loopback
HTTP server behind a loopback proxy that adds a per-request delay like a cloud round trip, and extracts
two points (40N and 20N at 280E) over the whole store with

  (a) the published approach: open_zarr(..., chunks={'time': 48}).sel(...).compute()  (dask)
  (b) plain open_zarr(chunks=None).sel(...).values                                 (zarr's async reads)
  (c) lstmnb's extraction (`lstmnb data`, i.e. era5.extract) into an empty cache (default blocks)
  (c24) the same with 24-hour blocks (blocks are fetched one after another: this shows their cost)
  (c, cached) (c) again with every block cached (no store access)

and prints times (median of --repeat runs), bytes served, requests (and how many were metadata
rather than chunk reads: opening a store), ratios, and the limit this setup allows:
max(bytes / loopback bandwidth, requests x delay / concurrency) + decode time on this machine.
Finally it kills (c24) at about half-way in a subprocess and resumes it, counting the chunk reads
redone (hours read before the kill that were not kept).

    python benchmarks/era5_extract.py --hours 168 --delay 0.03
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

POINTS = ((40.0, 280.0), (20.0, 280.0))


def build_store(path: Path, hours: int, seed: int = 0) -> Path:
    """Write an ARCO-layout global store: 2m_temperature, (time, 721, 1440), one hour per chunk."""
    import numcodecs
    import pandas as pd
    import xarray as xr
    import zarr

    rng = np.random.default_rng(seed)
    lat = np.linspace(90, -90, 721, dtype=np.float32)
    lon = (np.arange(1440) * 0.25).astype(np.float32)
    times = pd.date_range("2020-01-01", periods=hours, freq="h")
    coords = xr.Dataset(coords={"time": times, "latitude": lat, "longitude": lon})
    coords.attrs.update(valid_time_start=f"{times[0]:%Y-%m-%d}", valid_time_stop=f"{times[-1]:%Y-%m-%d}")
    coords.to_zarr(path, zarr_format=2, consolidated=False, mode="w-",
                   encoding={"time": {"units": "hours since 1900-01-01", "dtype": "int64"}})
    comp = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    group = zarr.open_group(path, mode="r+", zarr_format=2)
    arr = group.create_array("2m_temperature", shape=(hours, 721, 1440), chunks=(1, 721, 1440), dtype="float32",
                             fill_value=np.nan, compressors=comp, chunk_key_encoding={"name": "v2", "separator": "."})
    arr.attrs.update(units="K", long_name="2 metre temperature",
                     _ARRAY_DIMENSIONS=["time", "latitude", "longitude"])
    # A plausible field: latitude climate + land/sea-like smooth structure + weather + small-scale noise,
    # quantised like ERA5's 16-bit GRIB packing (that sets how well real chunks compress).
    la, lo = np.meshgrid(np.radians(lat), np.radians(lon), indexing="ij")
    base = 300 - 45 * np.sin(la) ** 2 + 6 * np.sin(3 * lo) * np.cos(la) + 3 * np.cos(5 * lo + 2 * la)
    modes = [np.cos(k * lo + m * la + rng.uniform(0, 6.3)) for k, m in rng.integers(2, 30, size=(8, 2))]
    fine = rng.standard_normal((721, 1440)) * 0.8
    step = (330.0 - 180.0) / 65535
    for t in range(hours):
        weather = sum(np.sin(0.05 * t * (i + 1) + i) * m for i, m in enumerate(modes)) * 1.5
        diurnal = 5 * np.cos(2 * np.pi * (t % 24) / 24 + lo) * np.cos(la)
        field = base + weather + diurnal + np.roll(fine, t * 7, axis=1)
        field = (np.round(field / step) * step).astype(np.float32)
        (path / "2m_temperature" / f"{t}.0.0").write_bytes(comp.encode(field))
    zarr.consolidate_metadata(path, zarr_format=2)
    return path


def served(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/.lstmnb-stats") as r:
        return json.loads(r.read())


def measure_bandwidth(server: str, hours: int, concurrency: int) -> tuple[float, float]:
    """Fetch every chunk straight from the server (no proxy, no decode): (bytes, seconds)."""
    from lstmnb.era5_fetch import HttpClient, RetryPolicy
    from concurrent.futures import ThreadPoolExecutor

    client = HttpClient(concurrency, RetryPolicy())
    try:
        client.get(f"{server}/2m_temperature/0.0.0")  # warm the connection pool
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            sizes = list(pool.map(lambda t: len(client.get(f"{server}/2m_temperature/{t}.0.0")), range(hours)))
        return float(sum(sizes)), time.perf_counter() - t0
    finally:
        client.close()


def measure_decode(store: Path, hours: int) -> float:
    """Seconds to decode every chunk once, one after another, on this machine."""
    import numcodecs

    comp = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    blobs = [(store / "2m_temperature" / f"{t}.0.0").read_bytes() for t in range(hours)]
    t0 = time.perf_counter()
    for b in blobs:
        np.frombuffer(comp.decode(b), dtype=np.float32)
    return time.perf_counter() - t0


def published(url: str, start: str, end: str) -> np.ndarray:
    import xarray as xr

    ds = xr.open_zarr(url, chunks={"time": 48})
    sel = ds["2m_temperature"].sel(latitude=[p[0] for p in POINTS], longitude=POINTS[0][1], time=slice(start, end))
    return sel.compute().values  # (time, point)


def plain(url: str, start: str, end: str) -> np.ndarray:
    import xarray as xr

    ds = xr.open_zarr(url, chunks=None)
    return ds["2m_temperature"].sel(latitude=[p[0] for p in POINTS], longitude=POINTS[0][1],
                                    time=slice(start, end)).values


def ours(url: str, start: str, end: str, cache: Path, concurrency: int,
         block_hours: int | None = None) -> tuple[np.ndarray, object]:
    from lstmnb.era5 import Request, extract
    from lstmnb.era5_fetch import FetchStats

    stats = FetchStats()
    ds = extract(Request(source=url, points=POINTS, start=start, end=end), cache_dir=cache, progress=False,
                 concurrency=concurrency, block_hours=block_hours, stats=stats)
    return ds["2m_temperature"].values, stats


def chunk_reads(stats: dict) -> int:
    """Chunk reads of the variable the server has answered (all requests on servers that don't split them)."""
    return stats.get("chunk_requests", {}).get("2m_temperature", stats["requests"])


_CHILD = """
import sys
from lstmnb.era5 import Request, extract
extract(Request(source=sys.argv[1], points=((40.0, 280.0), (20.0, 280.0)), start=sys.argv[2], end=sys.argv[3]),
        cache_dir=sys.argv[4], progress=False, concurrency=int(sys.argv[5]), block_hours=int(sys.argv[6]))
"""


def kill_and_resume(url: str, start: str, end: str, cache: Path, concurrency: int, block_hours: int,
                    hours: int, server: str) -> dict:
    """Run (c) in a subprocess, SIGKILL it when about half the blocks are cached, resume, count redone."""
    from lstmnb.era5 import Request, extract
    from lstmnb.era5_cache import status
    from lstmnb.era5_fetch import FetchStats

    n_blocks = -(-hours // block_hours)
    before = chunk_reads(served(server))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, url, start, end, str(cache), str(concurrency),
                              str(block_hours)])
    def kept_hours() -> int:  # finished blocks and checkpointed parts
        rows = status(cache)
        return min((r["hours"] for r in rows), default=0)

    while child.poll() is None:
        if kept_hours() >= (n_blocks // 2) * block_hours:
            break
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    time.sleep(0.2)  # requests the delay proxy still holds reach the server: they were asked for too
    first_reads = chunk_reads(served(server)) - before
    kept_h = kept_hours()
    stats = FetchStats()
    extract(Request(source=url, points=POINTS, start=start, end=end), cache_dir=cache, progress=False,
            concurrency=concurrency, block_hours=block_hours, stats=stats)
    return {
        "blocks": n_blocks, "block_hours": block_hours, "hours_kept_at_kill": kept_h,
        "chunk_reads_before_kill": first_reads, "chunk_reads_on_resume": stats.chunks,
        "hours_redone": max(first_reads - kept_h, 0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=168, help="hours in the store and the request (default a week)")
    ap.add_argument("--delay", type=float, default=0.03, help="seconds the proxy adds per request (default 0.03)")
    ap.add_argument("--concurrency", type=int, default=32, help="lstmnb's reads in flight (default 32)")
    ap.add_argument("--block-hours", type=int, default=24, help="cache block size for the resume test")
    ap.add_argument("--workdir", default=None, help="where to build the store (default: a temp folder)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per approach; the median is shown (default 3)")
    ap.add_argument("--skip", default="", help="comma list of approaches to skip: a,b,c,c24,cached,resume")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    work = Path(args.workdir or tempfile.mkdtemp(prefix="lstmnb-bench-"))
    store = work / f"arco-like-{args.hours}h.zarr"
    if not (store / ".zmetadata").exists():
        t0 = time.perf_counter()
        shutil.rmtree(store, ignore_errors=True)
        build_store(store, args.hours)
        print(f"built {store} in {time.perf_counter() - t0:.1f} s")
    size = sum(f.stat().st_size for f in (store / "2m_temperature").glob("*.0.0"))
    print(f"store: {args.hours} chunks of 721 x 1440 float32, {size / args.hours / 1e6:.2f} MB each compressed "
          f"({721 * 1440 * 4 / 1e6:.2f} MB raw), {size / 1e9:.2f} GB total")

    serve = subprocess.Popen([sys.executable, "-m", "lstmnb.era5_serve", str(store), "--delay", str(args.delay)],
                             stdout=subprocess.PIPE, text=True)
    server, proxy, undelayed = serve.stdout.readline().split()
    os.environ.setdefault("LSTMNB_CACHE", str(work / "cache"))
    start = "2020-01-01T00"
    end = str(np.datetime64(start) + np.timedelta64(args.hours - 1, "h"))
    results: dict[str, dict] = {}
    try:
        # Medians of --repeat measurements, like the approaches' times: on a shared machine one
        # measurement of the limit is as noisy as one run of an approach.
        n = max(args.repeat, 1)
        nbytes, secs = measure_bandwidth(undelayed, args.hours, args.concurrency)
        secs = float(np.median([secs] + [measure_bandwidth(undelayed, args.hours, args.concurrency)[1]
                                         for _ in range(n - 1)]))
        bandwidth = nbytes / secs
        server_bytes, server_secs = measure_bandwidth(server, args.hours, args.concurrency)
        print(f"bandwidth: server alone {server_bytes / server_secs / 1e6:,.0f} MB/s; through the proxy path "
              f"(delay 0) {bandwidth / 1e6:,.0f} MB/s -- the limit uses the latter, the path every approach takes")
        decode = float(np.median([measure_decode(store, args.hours) for _ in range(n)]))
        requests = args.hours
        limit_io = max(nbytes / bandwidth, requests * args.delay / args.concurrency)
        limit = limit_io + decode
        print(f"loopback path bandwidth {bandwidth / 1e6:,.0f} MB/s ({nbytes / 1e6:,.0f} MB in {secs:.2f} s, "
              f"{args.concurrency} in flight; median of {n}); decode {decode:.2f} s for {args.hours} chunks "
              "on this machine")
        print(f"limit = max({nbytes / bandwidth:.2f} s bytes/bandwidth, {requests * args.delay / args.concurrency:.2f} s"
              f" requests x delay / concurrency) + {decode:.2f} s decode = {limit:.2f} s\n")

        values = {}
        warm = work / f"cache-warm-{time.time_ns()}"
        for name, label, fn in [
            ("a", "published: open_zarr(chunks={'time': 48}).sel().compute()", lambda: published(proxy, start, end)),
            ("b", "open_zarr(chunks=None).sel().values", lambda: plain(proxy, start, end)),
            ("c", "lstmnb data (era5.extract, empty cache)",
             lambda: ours(proxy, start, end, work / f"cache-c-{time.time_ns()}", args.concurrency)[0]),
            ("c24", f"lstmnb data, {args.block_hours}-h blocks, empty cache",
             lambda: ours(proxy, start, end, work / f"cache-c-{time.time_ns()}", args.concurrency,
                          args.block_hours)[0]),
            ("cached", "lstmnb data, every block cached",
             lambda: ours(proxy, start, end, warm, args.concurrency)[0]),
        ]:
            if name in skip:
                continue
            if name == "cached":
                ours(proxy, start, end, warm, args.concurrency)  # fill the cache
            runs = []
            for _ in range(max(args.repeat, 1)):
                s0 = served(server)
                t0 = time.perf_counter()
                values[name] = np.asarray(fn())
                dt = time.perf_counter() - t0
                s1 = served(server)
                runs.append((dt, s1["bytes"] - s0["bytes"], s1["requests"] - s0["requests"],
                         s1["requests"] - s0["requests"] - (chunk_reads(s1) - chunk_reads(s0))))
            dt, nb, nr, nm = sorted(runs)[len(runs) // 2]
            results[name] = {"label": label, "seconds": dt, "bytes": nb, "requests": nr, "metadata_requests": nm,
                             "runs_s": [round(r[0], 3) for r in runs]}
            r = results[name]
            spread = f"({min(x[0] for x in runs):.2f}..{max(x[0] for x in runs):.2f})" if len(runs) > 1 else ""
            print(f"({name}) {label:<58} {dt:8.2f} s {spread:>13} {r['bytes'] / 1e6:8.0f} MB  {r['requests']:6d} requests"
                  f" ({nm} metadata)")
        ref = next(iter(values.values()), None)
        for name, v in values.items():
            assert v.shape == ref.shape and np.array_equal(v, ref), f"({name}) returned different values"
        print()
        if "a" in results and "c" in results:
            print(f"speed-up (c) vs (a): {results['a']['seconds'] / results['c']['seconds']:.1f}x")
        if "b" in results and "c" in results:
            print(f"speed-up (c) vs (b): {results['b']['seconds'] / results['c']['seconds']:.1f}x")
        if "a" in results and "c24" in results:
            print(f"speed-up (c24) vs (a): {results['a']['seconds'] / results['c24']['seconds']:.1f}x")
        for name in ("c", "c24"):
            if name in results:
                print(f"({name}) / limit: {results[name]['seconds'] / limit:.2f}")
        if "resume" not in skip:
            r = kill_and_resume(proxy, start, end, work / f"cache-resume-{time.time_ns()}", args.concurrency,
                                args.block_hours, args.hours, server)
            print(f"\nkill at ~50% and resume ({r['blocks']} blocks of {r['block_hours']} h): "
                  f"{r['hours_kept_at_kill']} hours kept, {r['chunk_reads_before_kill']} chunk reads before the "
                  f"kill, {r['chunk_reads_on_resume']} on resume, {r['hours_redone']} hours read twice "
                  f"({r['hours_redone'] / r['block_hours']:.2f} blocks; target <= 1)")
            results["resume"] = r
        results["limit"] = {"seconds": limit, "bandwidth_Bps": bandwidth, "decode_s": decode, "delay_s": args.delay,
                            "concurrency": args.concurrency, "hours": args.hours}
        print("\n" + json.dumps(results, default=float))
    finally:
        serve.terminate()
        serve.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
