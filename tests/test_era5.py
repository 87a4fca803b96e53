"""ERA5 access on real small local Zarr stores: selection, caching, corrupt caches, bad input, CLI."""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from lstmnb import data
from lstmnb.cli import main
from lstmnb.data import FetchStats, Request, extract, open_store, to_frame
from lstmnb.data.cache import status
from lstmnb.errors import ConfigError, DataError
from lstmnb.paths import STALE_TMP_SECONDS, temp_path

SHORT = dict(start="2020-01-02", end="2020-01-04")


def req(store, **kw) -> Request:
    return Request(source=str(store), **{**SHORT, **kw})


def test_catalogue_and_defaults(sample_store_path):
    """Catalogue names resolve to anonymous public buckets; the default request is a valid one on the
    sample: its variable and points are there, and it spans the sample's whole valid range."""
    for name, url in data.CATALOGUE.items():
        ref = data.resolve_source(name)
        assert (ref.url, ref.remote, ref.storage_options) == (url, True, {"token": "anon"})
        assert url.startswith("gs://gcp-public-data-arco-era5/") and url.endswith(name[-2:])  # arco-v3: zarr-v3
    ds = open_store("sample")
    plan = data.make_plan(ds, data.resolve_source("sample"), Request())
    assert plan.variables == (data.DEFAULT_VARIABLE,) and plan.kind == "points"
    assert plan.requested == list(data.DEFAULT_POINTS), "every default point is its own grid cell"
    assert data.valid_range(ds) == (pd.Timestamp(plan.times[0]), pd.Timestamp(plan.times[-1]))


@pytest.mark.parametrize("lon", [280.0, -80.0, 280.1, -79.9, 279.88])
def test_point_picks_nearest_cell_in_both_longitude_conventions(small_store, tmp_path, lon):
    ds = extract(req(small_store, points=((39.9, lon),)), cache_dir=tmp_path, progress=False)
    assert ds["2m_temperature"].dims == ("time", "point")
    assert float(ds.latitude[0]) == 40.0 and float(ds.longitude[0]) == 280.0
    assert str(ds.point.values[0]) == "40.00N 280.00E"
    raw = xr.open_zarr(small_store, chunks=None)["2m_temperature"].sel(
        latitude=40.0, longitude=280.0, time=slice("2020-01-02", "2020-01-04T23"))
    np.testing.assert_array_equal(ds["2m_temperature"].values[:, 0], raw.values)
    assert ds.sizes["time"] == 72 and ds["2m_temperature"].dtype == np.float32


def test_two_points_two_variables_and_tidy_frame(small_store, tmp_path):
    ds = extract(req(small_store, variables=("2m_temperature", "surface_pressure")), cache_dir=tmp_path,
                 progress=False)
    assert list(ds.point.values) == ["40.00N 280.00E", "20.00N 280.00E"]
    assert ds.attrs["source"] == str(small_store) and ds.attrs["selection"] == "points"
    df = to_frame(ds)
    assert list(df.columns) == ["time", "point", "latitude", "longitude", "variable", "value"]
    assert len(df) == 72 * 2 * 2
    sp = df[(df.variable == "surface_pressure") & (df.point == "20.00N 280.00E")]
    assert 95000 < sp.value.mean() < 106000
    assert df.time.min() == pd.Timestamp("2020-01-02") and df.time.max() == pd.Timestamp("2020-01-04T23")


def test_box_selection(small_store, tmp_path):
    ds = extract(req(small_store, points=None, box=(39.0, 40.0, -80.5, 280.0)), cache_dir=tmp_path, progress=False)
    assert ds["2m_temperature"].dims == ("time", "latitude", "longitude")
    assert list(ds.latitude.values) == [40.0, 39.75, 39.5, 39.25, 39.0]
    assert list(ds.longitude.values) == [279.5, 279.75, 280.0]
    raw = xr.open_zarr(small_store, chunks=None)["2m_temperature"].sel(
        latitude=slice(40, 39), longitude=slice(279.5, 280), time=slice("2020-01-02", "2020-01-04T23"))
    np.testing.assert_array_equal(ds["2m_temperature"].values, raw.values)
    assert len(to_frame(ds)) == 72 * 15


def test_second_call_reads_the_cache(small_store, tmp_path):
    first, second = FetchStats(), FetchStats()
    a = extract(req(small_store), cache_dir=tmp_path, progress=False, stats=first)
    b = extract(req(small_store), cache_dir=tmp_path, progress=False, stats=second)
    assert first.chunks == 72 and first.blocks_written > 0
    assert second.chunks == 0 and second.blocks_cached == first.blocks_written
    xr.testing.assert_identical(a, b)
    # an overlapping request reuses the cached hours and reads only the new ones
    third = FetchStats()
    c = extract(req(small_store, end="2020-01-05"), cache_dir=tmp_path, progress=False, stats=third)
    assert third.chunks == 24
    xr.testing.assert_equal(c.sel(time=slice(None, "2020-01-04T23")), a)
    # refresh ignores the cache
    fourth = FetchStats()
    extract(req(small_store), cache_dir=tmp_path, progress=False, refresh=True, stats=fourth)
    assert fourth.chunks == 72
    assert {r["target"] for r in status(tmp_path)} == {"cell-r4-c4", "cell-r84-c4"}


@pytest.mark.parametrize("damage", ["garbage", "truncate", "empty", "flipped-bit"])
def test_corrupt_cache_is_detected_and_rebuilt(small_store, tmp_path, damage):
    good = extract(req(small_store), cache_dir=tmp_path, progress=False)
    files = sorted(tmp_path.rglob("*.npy"))
    assert files
    victim = files[0]
    payload = victim.read_bytes()
    if damage == "garbage":
        victim.write_bytes(payload[:-8] + b"\x00garbage")
    elif damage == "flipped-bit":  # same size: only the CRC32 in the file's name tells
        victim.write_bytes(payload[:200] + bytes([payload[200] ^ 0x01]) + payload[201:])
    elif damage == "truncate":
        victim.write_bytes(payload[: len(payload) // 2])
    else:
        victim.write_bytes(b"")
    leftover = temp_path(victim)  # a killed writer's half-written temporary, old by now
    leftover.write_bytes(b"half")
    os.utime(leftover, (time.time() - STALE_TMP_SECONDS - 60,) * 2)
    stats = FetchStats()
    again = extract(req(small_store), cache_dir=tmp_path, progress=False, stats=stats)
    assert stats.chunks > 0, "the damaged block was fetched again"
    xr.testing.assert_identical(good, again)
    assert not leftover.exists(), "the leftover was swept, not read"
    assert len(list(victim.parent.glob(f"{victim.name[:8]}_*.npy"))) == 1, "the damaged file was replaced"


def test_default_request_on_the_sample(sample_store_path):
    ds = extract(Request(source="sample", end="2020-01-07"), progress=False)
    assert ds.attrs["source"] == "sample" and ds.sizes == {"time": 168, "point": 2}
    t = ds["2m_temperature"]
    assert float(t.sel(point="20.00N 280.00E").mean()) > float(t.sel(point="40.00N 280.00E").mean())
    assert open_store("sample").attrs["valid_time_start"] == "2020-01-01"


@pytest.mark.parametrize(
    "kw, err, words",
    [
        (dict(variables=("2m_temp",)), ConfigError, ["2m_temp", "2m_temperature", "surface_pressure"]),
        (dict(points=((91.0, 280.0),)), ConfigError, ["91", "-90..90"]),
        (dict(points=((40.0, 400.0),)), ConfigError, ["400", "-180..180"]),
        (dict(start="2019-12-01", end="2020-01-03"), ConfigError, ["2019-12-01", "valid range", "2020-01-01"]),
        (dict(start="2020-01-05", end="2020-02-01"), ConfigError, ["2020-02-01", "valid range", "2020-01-10"]),
        (dict(start="2020-01-05", end="2020-01-03"), ConfigError, ["before"]),
        (dict(start="yesterday"), ConfigError, ["yesterday", "ISO"]),
        (dict(points=((60.0, 280.0),)), DataError, ["60", "outside", "latitude 19..41"]),
        (dict(points=None, box=(39.1, 39.2, 279.0, 281.0)), DataError, ["selects no grid cells"]),
        (dict(points=None, box=(-95.0, 40.0, 279.0, 281.0)), ConfigError, ["-95", "-90..90"]),
        (dict(points=()), ConfigError, ["at least one"]),
        (dict(points=None, box=None), ConfigError, ["give either points or box"]),
        (dict(variables=()), ConfigError, ["at least one"]),
    ],
)
def test_bad_requests(small_store, tmp_path, kw, err, words):
    with pytest.raises(err) as info:
        extract(req(small_store, **kw), cache_dir=tmp_path, progress=False)
    msg = str(info.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_bad_sources(tmp_path):
    (tmp_path / "notzarr").mkdir()
    with pytest.raises(DataError, match="is not a Zarr store"):
        open_store(str(tmp_path / "notzarr"))
    with pytest.raises(DataError, match="neither a known name.*arco-v3"):
        open_store("arco-v4")
    with pytest.raises(ConfigError, match="credentials file"):
        open_store("arco-v3", storage_options={"token": str(tmp_path / "missing.json")})
    broken = tmp_path / "broken.zarr"
    broken.mkdir()
    (broken / ".zgroup").write_text("{not json")
    with pytest.raises(DataError, match="not a readable Zarr store"):
        open_store(str(broken))


def test_cli_data(small_store, capsys):
    rc = main(["data", "--source", str(small_store), "--start", "2020-01-02", "--end", "2020-01-02",
               "--point", "40,-80", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "40.00N 280.00E" in out and "24 hours" in out and "cached" in out
    assert main(["data", "--status"]) == 0
    assert "cell 40.00N 280.00E" in capsys.readouterr().out  # the cached series named by its place, not its folder
    assert main(["data", "--source", str(small_store), "--end", "2020-01-02", "--box", "38,40,279,280",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["data", "--status"]) == 0
    assert "box 38.00N..40.00N, 279.00E..280.00E (9 x 5 cells)" in capsys.readouterr().out
    rc = main(["data", "--source", str(small_store), "--variable", "temp2m", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown variable 'temp2m'" in err and "Traceback" not in err
    assert main(["data", "--help"]) == 0 and "--point" in capsys.readouterr().out


def test_cached_request_does_not_open_the_store(small_store, tmp_path, monkeypatch):
    """With every block cached, extract uses the store metadata kept in the cache (checksummed)."""
    first = extract(req(small_store), cache_dir=tmp_path, progress=False)
    metas = list(tmp_path.glob("*/store-meta.json"))
    assert len(metas) == 1

    def unreachable(ref, *args):
        raise DataError(f"cannot reach {ref.url}")

    monkeypatch.setattr(data.extraction, "open_ref", unreachable)
    xr.testing.assert_identical(first, extract(req(small_store), cache_dir=tmp_path, progress=False))
    with pytest.raises(DataError, match=r"cannot reach .*\(0 of 2 blocks of this request are cached"):
        extract(req(small_store, start="2020-01-06", end="2020-01-07"), cache_dir=tmp_path, progress=False)
    # a damaged metadata file is ignored (and rebuilt from the store)
    monkeypatch.undo()
    metas[0].write_bytes(metas[0].read_bytes()[:-20] + b"x" * 20)
    again = extract(req(small_store), cache_dir=tmp_path, progress=False)
    xr.testing.assert_identical(first, again)
    assert data.cached_meta(data.resolve_source(str(small_store)), tmp_path) is not None


def test_extraction_leaves_the_garbage_collector_as_it_found_it(small_store, tmp_path):
    """Reads keep older objects out of full collections (gc.freeze) and hand them back after; objects
    the caller froze itself stay frozen."""
    import gc

    before, enabled = gc.get_freeze_count(), gc.isenabled()  # what earlier tests left is not ours to judge
    extract(req(small_store), cache_dir=tmp_path / "a", progress=False)
    assert gc.get_freeze_count() == before and gc.isenabled() == enabled
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        extract(req(small_store), cache_dir=tmp_path / "b", progress=False)
        assert gc.get_freeze_count() > frozen // 2  # still frozen (objects freed meanwhile leave it)
    finally:
        gc.unfreeze()


def test_status_counts_what_reads_would_use(tmp_path):
    """Two parts of one slot (a later, narrower request wrote beside a wider part): reads use the widest,
    and the status counts it once, with its hours and bytes."""
    from lstmnb.data.cache import Block, BlockCache

    cache = BlockCache(tmp_path, "store", "2m_temperature", "cell-r1-c1", 24)
    wide = cache.write(Block(slot=3, start=72, stop=90, data=np.arange(18, dtype=np.float32)))
    cache.write(Block(slot=3, start=72, stop=78, data=np.arange(6, dtype=np.float32)))
    cache.write(Block(slot=4, start=96, stop=120, data=np.zeros(24, dtype=np.float32)))
    assert cache.read(3).stop == 90 and len(list(cache.dir.glob("00000003_*.npy"))) == 2
    (row,) = status(tmp_path)
    assert (row["blocks"], row["hours"]) == (2, 18 + 24)
    assert row["bytes"] == wide.stat().st_size + next(cache.dir.glob("00000004_*.npy")).stat().st_size


def test_block_cache_looks_at_its_folder_once_and_keeps_what_it_saw_right(tmp_path):
    """A run asks about every slot, some twice: a BlockCache lists its folder once (listing it per
    question was quadratic in the number of blocks) and its own writes and removals keep that listing
    right; files another instance writes later are seen by a fresh one, not by one that already looked."""
    from lstmnb.data.cache import Block, BlockCache

    def cache() -> BlockCache:
        return BlockCache(tmp_path, "store", "2m_temperature", "cell-r1-c1", 24)

    def day(slot: int, a: int = 0, b: int = 24) -> Block:
        return Block(slot, slot * 24 + a, slot * 24 + b, np.full(b - a, slot, dtype=np.float32))

    writer = cache()
    for slot in range(200):
        writer.write(day(slot))
    reader = cache()
    for c in (writer, reader):
        assert all(c.covers(s, s * 24, s * 24 + 24) for s in range(200)) and not c.covers(200, 4800, 4801)
        for s in range(200):
            got = c.read(s)
            assert (got.start, got.stop) == (s * 24, s * 24 + 24) and (got.data == s).all()
    writer.write(day(200))
    assert not reader.covers(200, 4800, 4824) and reader.read(200) is None, "looked once, before it was written"
    assert cache().covers(200, 4800, 4824) and cache().read(200).stop == 4824

    # own writes: a wider part replaces a narrower one (on disk and in the listing), a narrower one
    # written later stays beside the wider one; a damaged file is removed from both
    c = cache()
    c.write(day(300, 0, 6))
    assert c.covers(300, 7200, 7206) and not c.covers(300, 7200, 7207)
    wide = c.write(day(300, 0, 18))
    assert [p.name[9:18] for p in c.dir.glob("00000300_*.npy")] == ["0000-0018"]
    c.write(day(300, 0, 6))
    assert len(list(c.dir.glob("00000300_*.npy"))) == 2 and c.read(300).stop == 7218
    wide.write_bytes(wide.read_bytes()[:-4] + b"oops")
    assert c.read(300).stop == 7206 and not wide.exists()
    assert not c.covers(300, 7200, 7218) and c.covers(300, 7200, 7206)
    assert cache().read(300).stop == 7206


def test_stale_tmp_files_are_removed_and_live_ones_kept(small_store, tmp_path):
    import subprocess
    import sys

    from lstmnb.paths import HOST

    extract(req(small_store), cache_dir=tmp_path, progress=False)
    folder = sorted(tmp_path.rglob("*.npy"))[0].parent
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a concurrent extraction
    try:
        old = time.time() - STALE_TMP_SECONDS - 60
        files = {
            f".00000000_0000-0072_0.npy.{HOST}.{dead}-3.tmp": (None, False),  # killed writer here: stale
            f".00000000_0000-0072_1.npy.{HOST}.{live.pid}-0.tmp": (None, True),  # live writer: kept
            f".00000000_0000-0072_2.npy.{HOST}.{live.pid}-1.tmp": (old, False),  # live pid, hours old: stale
            f".00000000_0000-0072_3.npy.otherhost.{dead}-0.tmp": (None, True),  # another host's, fresh: kept
            f".00000000_0000-0072_4.npy.otherhost.{dead}-0.tmp": (old, False),  # another host's, old: stale
            f".store-meta.json.{HOST}.{dead}-0.tmp.json": (None, False),  # suffixed temporary, dead writer
            "not-ours.tmp": (None, True),  # not an lstmnb temporary: never touched
        }
        for name, (mtime, _) in files.items():
            (folder / name).write_bytes(b"half")
            if mtime is not None:
                os.utime(folder / name, (mtime, mtime))
        stats = FetchStats()
        extract(req(small_store), cache_dir=tmp_path, progress=False, stats=stats)
        assert stats.chunks == 0
        left = {p.name for p in folder.glob("*.tmp*")}
        assert left == {name for name, (_, keep) in files.items() if keep}
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize("kw, word", [({"concurrency": 0}, "^concurrency=0 must be a whole number >= 1$"),
                                      ({"block_hours": 0}, "^block_hours=0 must be a whole number >= 1$")])
def test_zero_concurrency_or_block_size_is_refused(small_store, tmp_path, kw, word):
    with pytest.raises(ConfigError, match=word):
        extract(req(small_store), cache_dir=tmp_path, progress=False, **kw)


@pytest.mark.parametrize("how", ["points", "whole chunks", "large box"])
def test_a_store_chunk_cut_short_is_damage_not_numbers(small_store, tmp_path, how):
    """c-blosc trusts a chunk's header and would read past a chunk cut short, returning plausible numbers:
    every read path checks the length first and says the chunk is damaged (rereading will not help)."""
    import shutil

    store = tmp_path / "cut.zarr"
    shutil.copytree(small_store, store)
    chunk = store / "2m_temperature" / "30.0.0"
    chunk.write_bytes(chunk.read_bytes()[:-100])
    kw = dict(points=None, box=(19.0, 41.0, 279.0, 281.0)) if how == "large box" else {}
    with pytest.raises(DataError) as info:
        extract(Request(source=str(store), start="2020-01-01", end="2020-01-03", **kw), cache_dir=tmp_path / "c",
                progress=False, partial_reads=how != "whole chunks")
    msg = str(info.value)
    assert "2020-01-02T06" in msg and "cut short or damaged" in msg and "re-copy the store" in msg, msg
