"""How fast is `lstmnb data` against an ARCO-ERA5-shaped store, compared with the published approach?

Builds a store with ARCO-sized chunks (one hour of a 721 x 1440 float32 global field per chunk,
Blosc-LZ4 with byte shuffle, zarr format 2, consolidated metadata) and serves it from a loopback
HTTP server (aiohttp, in another process) that adds a per-request delay like a cloud round trip. The
delay is added by the server itself rather than by a proxy in front of it: a proxy hop in Python
nearly halves the requests per second the path can answer, a cost no cloud store adds. It extracts two
points (40N and 20N at 280E) over the whole store with

  (a) the published approach: open_zarr(..., chunks={'time': 48}).sel(...).compute()  (dask)
  (b) plain open_zarr(chunks=None).sel(...).values on zarr's fsspec store (zarr's async reads), with
      zarr's async.concurrency set to lstmnb's
  (bp) (b) with lstmnb's codec pipeline turned on (the one line of lstmnb/data/blosc_pipeline.py)
  (o), (op) (b) and (bp) on obstore's HTTP store (zarr.storage.ObjectStore) instead of fsspec's
  (c) lstmnb's extraction (`lstmnb data`, i.e. lstmnb.data.extract) into an empty cache (default blocks):
      it fetches each chunk's Blosc header, then only the blocks that hold the points
  (cw) the same reading whole chunks (as (a) and (b) do), to show what block reads gain
  (c24) (c) with 24-hour cache blocks (at most a block of hours in flight: this shows their cost)
  (cached) (c) again with every block cached (no store access)

and prints times (median of --repeat runs), bytes served, requests (and how many were metadata
rather than chunk reads: opening a store), ratios, and the limits this setup allows, for whole-chunk
reads and for block reads: max(bytes / loopback bandwidth, requests x delay / concurrency,
requests / the path's request rate) + decode time on this machine. The latency term counts whole
waves of requests, and at least the round trips a chunk needs in a row (two for block reads); the
request-rate term is the loopback path's own cost per request (client and server on these cores),
which a cloud store spreads over many machines. A second figure adds the round trips no reader can
overlap with the transfer: opening the store, and for block reads the first headers.
Finally it kills (c24) at about half-way in a subprocess and resumes it, counting the chunk reads
redone (hours read before the kill that were not kept).

With ``--before DIR`` (a checkout of an earlier lstmnb, e.g. ``git worktree add /tmp/before <commit>``)
(c) and (cw) also run from that checkout, in a subprocess, in the same rounds: "today's lstmnb" against
this one on the same machine at the same time.

    python benchmarks/era5_extract.py --hours 168 --delay 0.03
    python benchmarks/era5_extract.py --tiny      # CI: 6 hours, one run each, 2-hour blocks (the script runs)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from _extract_limits import (POINTS, blocks_plan, measure_bandwidth, measure_block_decode, measure_decode,
                             measure_request_rate, show_limit)


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


def published(url: str, start: str, end: str) -> np.ndarray:
    import xarray as xr

    ds = xr.open_zarr(url, chunks={"time": 48})
    sel = ds["2m_temperature"].sel(latitude=[p[0] for p in POINTS], longitude=POINTS[0][1], time=slice(start, end))
    return sel.compute().values  # (time, point)


def plain(url: str, start: str, end: str, concurrency: int, pipeline: bool = False, store: str = "fsspec"
          ) -> np.ndarray:
    """xarray on zarr 3 alone: zarr's fsspec store (``url`` as it is) or obstore's HTTP store, zarr's
    async.concurrency at ``concurrency``, and with ``pipeline`` lstmnb's codec pipeline turned on."""
    import xarray as xr
    import zarr

    from lstmnb.data.blosc_pipeline import PATH

    if store == "obstore":
        from obstore.store import HTTPStore
        from zarr.storage import ObjectStore

        url = ObjectStore(HTTPStore.from_url(url, client_options={"allow_http": True}), read_only=True)
    settings = {"async.concurrency": concurrency, **({"codec_pipeline.path": PATH} if pipeline else {})}
    with zarr.config.set(settings):  # the pipeline is chosen when the array opens; concurrency when it reads
        ds = xr.open_zarr(url, chunks=None)
        return ds["2m_temperature"].sel(latitude=[p[0] for p in POINTS], longitude=POINTS[0][1],
                                        time=slice(start, end)).values


_BEFORE = """
import json, sys, time
import zarr.registry
# this lstmnb's zarr.codec_pipeline entry points name modules the earlier one lacks: leave them unloaded
getattr(zarr.registry, "__pipeline_registry").lazy_load_list[:] = [
    e for e in getattr(zarr.registry, "__pipeline_registry").lazy_load_list if not e.value.startswith("lstmnb.")]
from lstmnb.data import FetchStats, Request, extract
# warm up as the parent process is (imports, the first session): one hour into a throwaway cache
extract(Request(source=sys.argv[1], points=((40.0, 280.0),), start=sys.argv[2], end=sys.argv[2]),
        cache_dir=sys.argv[4] + "-warm", progress=False)
t0 = time.perf_counter()
ds = extract(Request(source=sys.argv[1], points=((40.0, 280.0), (20.0, 280.0)), start=sys.argv[2], end=sys.argv[3]),
             cache_dir=sys.argv[4], progress=False, concurrency=int(sys.argv[5]), partial_reads=sys.argv[6] == "1")
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "values": ds["2m_temperature"].values.tolist()}))
"""


def before(checkout: str, url: str, start: str, end: str, cache: Path, concurrency: int, whole: bool
           ) -> tuple[np.ndarray, float]:
    """(c) or (cw) run by the lstmnb of an earlier ``checkout`` in a subprocess: values and its own seconds
    (the extraction alone, without the subprocess's start and imports)."""
    env = {**os.environ, "PYTHONPATH": checkout}
    out = subprocess.run([sys.executable, "-c", _BEFORE, url, start, end, str(cache), str(concurrency),
                          "0" if whole else "1"], env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return np.asarray(got["values"], dtype=np.float32), got["seconds"]


def ours(url: str, start: str, end: str, cache: Path, concurrency: int,
         block_hours: int | None = None, whole: bool = False) -> tuple[np.ndarray, object]:
    from lstmnb.data import FetchStats, Request, extract

    stats = FetchStats()
    ds = extract(Request(source=url, points=POINTS, start=start, end=end), cache_dir=cache, progress=False,
                 concurrency=concurrency, block_hours=block_hours, stats=stats, partial_reads=not whole)
    return ds["2m_temperature"].values, stats


def chunk_reads(stats: dict) -> int:
    """Chunk reads of the variable the server has answered (whole chunks, or a header then blocks)."""
    return stats["chunk_reads"].get("2m_temperature", 0)


def chunk_requests(stats: dict) -> int:
    """Requests for chunks of any array (the rest are metadata: opening the store)."""
    return sum(stats["chunk_requests"].values())


_CHILD = """
import sys
from lstmnb.data import Request, extract
extract(Request(source=sys.argv[1], points=((40.0, 280.0), (20.0, 280.0)), start=sys.argv[2], end=sys.argv[3]),
        cache_dir=sys.argv[4], progress=False, concurrency=int(sys.argv[5]), block_hours=int(sys.argv[6]))
"""


def kill_and_resume(url: str, start: str, end: str, cache: Path, concurrency: int, block_hours: int,
                    hours: int, server: str) -> dict:
    """Run (c) in a subprocess, kill it when about half the blocks are cached, resume, count redone."""
    from lstmnb.data import FetchStats, Request, extract
    from lstmnb.data.cache import status

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
    child.kill()  # SIGKILL on POSIX, TerminateProcess on Windows: no chance to tidy up either way
    child.wait()
    time.sleep(0.2)  # requests the server still holds in their delay count when they end: asked for too
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
    ap.add_argument("--delay", type=float, default=0.03, help="seconds the server adds per request (default 0.03)")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="lstmnb's requests in flight (default: lstmnb's default)")
    ap.add_argument("--block-hours", type=int, default=24, help="cache block size for the resume test")
    ap.add_argument("--workdir", default=None, help="where to build the store (default: a temp folder)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per approach; the median is shown (default 3)")
    ap.add_argument("--skip", default="", help="comma list of approaches to skip: a,b,bp,o,op,c,cw,c24,cached,resume")
    ap.add_argument("--before", default=None, metavar="DIR",
                    help="a checkout of an earlier lstmnb: run (c) and (cw) from it too, as (c-before), (cw-before)")
    ap.add_argument("--tiny", action="store_true", help="6 hours, one run each, 2-hour blocks (CI: the script runs)")
    args = ap.parse_args()
    if args.tiny:
        args.hours, args.repeat, args.block_hours = 6, 1, 2
    if args.concurrency is None:
        from lstmnb.data import DEFAULT_CONCURRENCY

        args.concurrency = DEFAULT_CONCURRENCY
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

    serve = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_loopback.py")), str(store), "--delay",
                              str(args.delay)],
                             stdout=subprocess.PIPE, text=True)
    server, direct = serve.stdout.readline().split()  # with the delay, and without it
    os.environ.setdefault("LSTMNB_CACHE", str(work / "cache"))
    start = "2020-01-01T00"
    end = str(np.datetime64(start) + np.timedelta64(args.hours - 1, "h"))
    results: dict[str, dict] = {}
    try:
        # Medians of --repeat measurements, like the approaches' times: on a shared machine one
        # measurement of the limit is as noisy as one run of an approach.
        n = max(args.repeat, 1)
        runs_bw = [measure_bandwidth(direct, args.hours, args.concurrency) for _ in range(n)]
        nbytes, secs = runs_bw[0][0], float(np.median([r[1] for r in runs_bw]))
        bandwidth = nbytes / secs
        rate = float(np.median([measure_request_rate(direct, args.hours, args.concurrency) for _ in range(n)]))
        decode = float(np.median([measure_decode(store, args.hours) for _ in range(n)]))
        part = blocks_plan(store, args.hours)
        decode_part = float(np.median([measure_block_decode(part) for _ in range(n)]))
        print(f"loopback path: {bandwidth / 1e6:,.0f} MB/s ({nbytes / 1e6:,.0f} MB in {secs:.2f} s) and "
              f"{rate:,.0f} small requests/s, {args.concurrency} in flight; decode {decode:.2f} s for "
              f"{args.hours} whole chunks, {decode_part:.2f} s for the blocks holding the points "
              f"(medians of {n})")
        limit, chained = show_limit("whole chunks", nbytes, args.hours, args.hours, bandwidth, rate, args.delay,
                                    args.concurrency, decode)
        limit_part, chained_part = show_limit("only the blocks holding the points", part["bytes"], part["requests"],
                                              args.hours, bandwidth, rate, args.delay, args.concurrency, decode_part)
        print()

        values = {}
        warm = work / f"cache-warm-{time.time_ns()}"
        fresh = lambda: work / f"cache-c-{time.time_ns()}"  # noqa: E731 - an empty cache per run
        c = args.concurrency
        approaches = [
            ("a", "published: open_zarr(chunks={'time': 48}).sel().compute()", lambda: published(server, start, end)),
            ("b", "open_zarr(chunks=None).sel().values, fsspec store", lambda: plain(server, start, end, c)),
            ("bp", "(b) + lstmnb's codec pipeline (one line)", lambda: plain(server, start, end, c, pipeline=True)),
            ("o", "open_zarr(chunks=None).sel().values, obstore store", lambda: plain(server, start, end, c, store="obstore")),
            ("op", "(o) + lstmnb's codec pipeline (one line)",
             lambda: plain(server, start, end, c, pipeline=True, store="obstore")),
            ("c", "lstmnb data (era5.extract, empty cache)", lambda: ours(server, start, end, fresh(), c)[0]),
            ("cw", "lstmnb data reading whole chunks, empty cache", lambda: ours(server, start, end, fresh(), c, whole=True)[0]),
            ("c24", f"lstmnb data, {args.block_hours}-h blocks, empty cache",
             lambda: ours(server, start, end, fresh(), c, args.block_hours)[0]),
            ("cached", "lstmnb data, every block cached", lambda: ours(server, start, end, warm, c)[0]),
        ]
        if args.before:
            approaches += [("c-before", "(c) by the lstmnb of --before", lambda: before(args.before, server, start, end, fresh(), c, False)),
                           ("cw-before", "(cw) by the lstmnb of --before", lambda: before(args.before, server, start, end, fresh(), c, True))]
        approaches = [x for x in approaches if x[0] not in skip]
        if any(name in ("o", "op") for name, *_ in approaches):
            try:
                import obstore  # noqa: F401
            except ImportError:
                print("(o), (op) skipped: obstore is not installed (pip install 'lstmnb[bench]')")
                approaches = [x for x in approaches if x[0] not in ("o", "op")]
        if any(name == "cached" for name, *_ in approaches):
            ours(server, start, end, warm, c)  # fill the cache
        runs: dict[str, list] = {name: [] for name, *_ in approaches}
        for _ in range(max(args.repeat, 1)):  # rounds: every approach once per round, so they share the machine's moods
            for name, label, fn in approaches:
                s0 = served(server)
                t0 = time.perf_counter()
                got = fn()
                dt = time.perf_counter() - t0
                if isinstance(got, tuple):  # a subprocess's own time of its extraction
                    got, dt = got
                values[name] = np.asarray(got)
                s1 = served(server)
                runs[name].append((dt, s1["bytes"] - s0["bytes"], s1["requests"] - s0["requests"],
                                   s1["requests"] - s0["requests"] - (chunk_requests(s1) - chunk_requests(s0))))
        for name, label, _ in approaches:
            mine = runs[name]
            dt, nb, nr, nm = sorted(mine)[len(mine) // 2]
            results[name] = {"label": label, "seconds": dt, "bytes": nb, "requests": nr, "metadata_requests": nm,
                             "runs_s": [round(r[0], 3) for r in mine]}
            spread = f"({min(x[0] for x in mine):.2f}..{max(x[0] for x in mine):.2f})" if len(mine) > 1 else ""
            print(f"({name}) {label:<58} {dt:8.2f} s {spread:>13} {nb / 1e6:8.0f} MB  {nr:6d} requests ({nm} metadata)")
        ref = next(iter(values.values()), None)
        for name, v in values.items():
            assert v.shape == ref.shape and np.array_equal(v, ref), f"({name}) returned different values"
        print()
        for x, y in (("c", "a"), ("c", "b"), ("bp", "a"), ("op", "a"), ("cw", "a"), ("c24", "a"), ("c", "cw"),
                     ("c", "c-before"), ("cw", "cw-before")):
            if x in results and y in results:
                print(f"speed-up ({x}) vs ({y}): {results[y]['seconds'] / results[x]['seconds']:.1f}x")
        for name, lim, lim2, what in (("c", limit_part, chained_part, "blocks"), ("cw", limit, chained, "whole chunks"),
                                      ("c24", limit_part, chained_part, "blocks")):
            if name in results:
                print(f"({name}) / limit ({what}): {results[name]['seconds'] / lim:.2f}; "
                      f"with the round trips that come first: {results[name]['seconds'] / lim2:.2f}")
        if "resume" not in skip:
            r = kill_and_resume(server, start, end, work / f"cache-resume-{time.time_ns()}", args.concurrency,
                                args.block_hours, args.hours, server)
            print(f"\nkill at ~50% and resume ({r['blocks']} blocks of {r['block_hours']} h): "
                  f"{r['hours_kept_at_kill']} hours kept, {r['chunk_reads_before_kill']} chunk reads before the "
                  f"kill, {r['chunk_reads_on_resume']} on resume, {r['hours_redone']} hours read twice "
                  f"({r['hours_redone'] / r['block_hours']:.2f} blocks; target <= 1)")
            results["resume"] = r
        results["limit"] = {"seconds": limit, "blocks_seconds": limit_part, "chained_seconds": chained,
                            "blocks_chained_seconds": chained_part, "bandwidth_Bps": bandwidth,
                            "requests_per_s": rate, "decode_s": decode, "blocks_decode_s": decode_part,
                            "blocks_bytes": part["bytes"], "blocks_requests": part["requests"],
                            "delay_s": args.delay, "concurrency": args.concurrency, "hours": args.hours}
        print("\n" + json.dumps(results, default=float))
    finally:
        serve.terminate()
        serve.wait()
    from _tiny import DONE

    print(DONE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
