"""Extracted values are what plain xarray reads from the same store: small Zarr stores written here by xarray."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from lstmnb.data import Request, extract

TIMES = pd.date_range("2020-01-01", periods=24, freq="h")
LAT = np.array([41.0, 40.75, 40.5], np.float32)
LON = np.array([279.75, 280.0, 280.25], np.float32)


def _write(path, values, *, zarr_format=2, consolidated=True, encoding=None, mode="w-"):
    """A (time, latitude, longitude) 2m_temperature store of ``values`` at ``path``, written by xarray."""
    ds = xr.Dataset({"2m_temperature": (("time", "latitude", "longitude"), values, {"units": "K"})},
                    coords={"time": TIMES, "latitude": LAT, "longitude": LON})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's note on v3 consolidated metadata
        ds.to_zarr(path, zarr_format=zarr_format, consolidated=consolidated, mode=mode,
                   encoding={"2m_temperature": encoding or {}})
    return str(path)


def _field(seed=0) -> np.ndarray:
    values = (270 + 10 * np.random.default_rng(seed).random((TIMES.size, LAT.size, LON.size))).astype(np.float32)
    values[3, 1, 1] = np.nan  # a missing hour at the point read below
    return values


def _point(source, cache):
    return extract(Request(source=source, points=((40.75, -80.0),), start="2020-01-01", end="2020-01-01"),
                   cache_dir=cache, progress=False)["2m_temperature"].values[:, 0]


@pytest.mark.parametrize("zarr_format,consolidated", [(3, True), (3, False), (2, False)])
def test_a_rewritten_store_is_not_served_from_the_old_stores_cache(tmp_path, zarr_format, consolidated):
    """The cache key of a local store follows its root metadata file: v3's zarr.json and a v2 store without
    consolidated metadata too, not only v2's .zmetadata."""
    path = tmp_path / "s.zarr"
    _write(path, np.full((TIMES.size, LAT.size, LON.size), 270.0, np.float32), zarr_format=zarr_format,
           consolidated=consolidated)
    assert _point(str(path), tmp_path / "c")[0] == 270.0
    root = path / ("zarr.json" if zarr_format == 3 else ".zgroup")
    before = os.stat(root).st_mtime_ns
    _write(path, np.full((TIMES.size, LAT.size, LON.size), 300.0, np.float32), zarr_format=zarr_format,
           consolidated=consolidated, mode="w")
    os.utime(root, ns=(before + 10**9, before + 10**9))  # a later write, whatever the clock's resolution
    np.testing.assert_array_equal(_point(str(path), tmp_path / "c"), np.full(24, 300.0, np.float32))


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("encoding", [
    {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32767},  # packed, as CF allows
    {"_FillValue": -9999.0},  # missing values stored as a number, not NaN
], ids=["packed", "fill-value"])
def test_values_are_decoded_as_xarray_decodes_them(tmp_path, zarr_format, encoding):
    """scale_factor/add_offset applied and _FillValue masked to NaN, as plain xarray reads the store; the raw
    stored numbers (498, -32767, -9999) never come out as kelvin. Points and boxes, fresh and from the cache."""
    path = _write(tmp_path / "s.zarr", _field(), zarr_format=zarr_format, encoding=encoding)
    want = xr.open_zarr(path, chunks=None)["2m_temperature"].sel(time=slice("2020-01-01", "2020-01-01T23"))
    for _ in range(2):  # the second time from the cache
        got = _point(path, tmp_path / "c")
        np.testing.assert_array_equal(got, want.sel(latitude=40.75, longitude=280.0).values.astype(np.float32))
        box = extract(Request(source=path, points=None, box=(40.5, 41.0, 279.75, 280.25), start="2020-01-01",
                              end="2020-01-01"), cache_dir=tmp_path / "c", progress=False)["2m_temperature"]
        assert box.dtype == np.float32 and box.attrs["units"] == "K"
        np.testing.assert_array_equal(box.values, want.values.astype(np.float32))
    assert np.isnan(got[3]) and np.isfinite(np.delete(got, 3)).all()
