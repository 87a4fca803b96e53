"""Region mode, data side: boxes as per-cell series (also across the prime meridian), the point
pipeline on them, and per-cell scores as maps."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from lstmnb import era5
from lstmnb.errors import ConfigError, DataError
from lstmnb.cli import main
from lstmnb.records import read_records
from lstmnb.region.grid import Grid, box_to_points, grid_of, record_maps, to_map, unwrap_lon
from lstmnb.region.relation import knn_index
from lstmnb.windows import WindowConfig, windows_from_dataset


def _box(store, box, start="2020-01-01", end="2020-01-10", cache=None):
    return era5.extract(era5.Request(source=str(store), points=None, box=box, start=start, end=end),
                        cache_dir=cache, progress=False)


@pytest.fixture(scope="module")
def small_box(small_store, tmp_path_factory):
    """A 5 x 5 box of the ten-day sample store, as extract returns it."""
    return _box(small_store, (39.0, 40.0, 279.0, 280.0), cache=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def meridian_store(tmp_path_factory):
    """Two days of a store that circles the globe in longitude (9 rows, 1440 columns)."""
    from lstmnb.datasets.sample import write_sample

    path = tmp_path_factory.mktemp("stores") / "meridian.zarr"
    return write_sample(path, start="2020-01-01T00", end="2020-01-02T23", lat=(52.0, 50.0), lon=(0.0, 359.75),
                        variables=["2m_temperature"])


def test_box_longitudes_run_west_to_east_and_swapped_ones_are_refused(meridian_store, small_store, tmp_path, capsys):
    """WEST,EAST across the prime meridian (359,1) is a 3-column box; the same numbers swapped (1,359) would
    be 359 columns round the globe, and 281,279 (east first) 358 degrees: refused in one line before any read."""
    assert main(["data", "--source", str(meridian_store), "--box", "50,52,359,1", "--start", "2020-01-01",
                 "--end", "2020-01-02", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "9 x 9 box" in out and "longitude 359..1 (across 0)" in out, out
    for box, span, fix in (("39,41,281,279", 358, "279,281"), ("50,52,1,359", 358, "279,281")):
        assert main(["data", "--source", str(small_store), "--box", box, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        lon = box.split(",", 2)[2]
        assert len(err) == 1 and err[0].endswith(
            f"--box {box}: longitudes {lon} span {span} degrees going east from {lon.split(',')[0]} (at most 180, or the whole "
            f"circle -180,180); give LON_MIN,LON_MAX as WEST,EAST with WEST first going east, e.g. {fix}, or across "
            "the prime meridian e.g. 359,1"), err
    # the whole circle stays a box of every longitude
    era5.check_request(era5.Request(points=None, box=(50.0, 52.0, -180.0, 180.0)))


def test_box_to_points_keeps_every_cell_and_value(small_box):
    pts = box_to_points(small_box)
    assert dict(pts.sizes) == {"time": small_box.sizes["time"], "point": 25}
    for p in (0, 7, 24):
        r, c = int(pts["row"][p]), int(pts["col"][p])
        assert pts["latitude"][p] == small_box["latitude"][r] and pts["longitude"][p] == small_box["longitude"][c]
        np.testing.assert_array_equal(pts["2m_temperature"][:, p].values,
                                      small_box["2m_temperature"][:, r, c].values)
    assert pts["point"].values[0] == era5.point_label(40.0, 279.0)  # named as extract names points
    assert list(pts["row"].values[:6]) == [0, 0, 0, 0, 0, 1]  # row-major, north first as stored


def test_point_pipeline_trains_one_global_model_on_all_cells(small_box):
    cfg = WindowConfig(window=12)
    plain = windows_from_dataset(box_to_points(small_box), cfg)
    assert len(plain.points) == 25 and plain.n_features == 1
    # every cell contributes the same number of samples to every split
    assert (np.bincount(plain.point_index["train"]) == plain.sizes()["train"] // 25).all()
    with_coords = windows_from_dataset(box_to_points(small_box, coords_as_inputs=True), cfg)
    assert with_coords.features == ["2m_temperature", "cell_latitude", "cell_longitude"]
    np.testing.assert_array_equal(with_coords.x["train"][..., 0], plain.x["train"][..., 0])
    # the coordinates are inputs that tell cells apart: constant within a cell, different between cells
    lat_in = with_coords.x["train"][:, :, 1]
    first = with_coords.point_index["train"] == 0
    assert np.ptp(lat_in[first]) == 0 and np.unique(lat_in[:, 0]).size == 5


def test_box_across_the_prime_meridian(meridian_store, tmp_path):
    ds = _box(meridian_store, (50.0, 52.0, -2.0, 2.0), "2020-01-01", "2020-01-02", cache=tmp_path)
    assert dict(ds.sizes) == {"time": 48, "latitude": 9, "longitude": 17}
    lon = ds["longitude"].values
    assert lon[0] == 358.0 and lon[7] == 359.75 and lon[8] == 0.0 and lon[-1] == 2.0  # west to east
    raw = xr.open_zarr(str(meridian_store), chunks=None)["2m_temperature"]
    np.testing.assert_array_equal(ds["2m_temperature"].values,
                                  raw.sel(latitude=ds["latitude"], longitude=ds["longitude"]).values)
    pts = box_to_points(ds, coords_as_inputs=True)
    row0 = pts["cell_longitude"].values[0, :17]
    np.testing.assert_allclose(row0, 358.0 + 0.25 * np.arange(17))  # continuous across 0 E as an input
    # neighbours reach across the meridian: the cell at 359.75E has the cell at 0E as its nearest
    grid = grid_of(ds)
    idx = knn_index(grid.cell_lat, grid.cell_lon, 4)
    centre = 4 * 17 + 7  # row 4, column 7 (359.75E)
    assert set(idx[centre]) == {centre - 1, centre + 1, centre - 17, centre + 17}
    assert windows_from_dataset(pts, WindowConfig(window=6, fractions=(0.5, 0.25, 0.25))).sizes()["test"] > 0


def test_unwrap_lon():
    np.testing.assert_allclose(unwrap_lon(np.array([358.0, 359.75, 0.0, 1.5])), [358.0, 359.75, 360.0, 361.5])
    np.testing.assert_allclose(unwrap_lon(np.array([279.0, 280.0])), [279.0, 280.0])


def test_bad_layouts_are_one_line_errors(small_box):
    pts = box_to_points(small_box)
    with pytest.raises(DataError, match="a box needs dims time, latitude, longitude; got dims"):
        box_to_points(pts)
    with pytest.raises(DataError, match=r"'rmse' has shape \(3,\); a map of this grid needs \(25,\)"):
        to_map({"rmse": np.zeros(3)}, grid_of(small_box))
    with pytest.raises(DataError, match="holds no per-cell scores: only a box run"):
        record_maps({"run_id": "x", "data": {"points": [[40.0, 280.0]]}})


def test_train_box_scores_every_cell_and_draws_the_map(small_store, tmp_path, capsys):
    rc = main(["train", "--source", str(small_store), "--box", "39,40,279,280", "--start", "2020-01-01",
               "--end", "2020-01-10", "--epochs", "2", "--hidden", "8", "--window", "12", "--device", "cpu",
               "--results", str(tmp_path), "--map", str(tmp_path / "map.png"), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rec = read_records(tmp_path)[0]
    rows = rec["skill"]["per_point"]
    assert [r["point"] for r in rows[:6]] == [era5.point_label(40.0, 279.0 + 0.25 * c) for c in range(5)] + \
        [era5.point_label(39.75, 279.0)]  # one row per cell, row-major as the grid
    assert rec["data"]["grid"] == {"latitude": [40.0, 39.75, 39.5, 39.25, 39.0],
                                   "longitude": [279.0, 279.25, 279.5, 279.75, 280.0]}
    maps = record_maps(rec)
    assert dict(maps.sizes) == {"latitude": 5, "longitude": 5}
    assert rec["data"]["kind"] == "synthetic" and maps.attrs["data_kind"] == "synthetic"  # a copy of the sample
    # the cells' scores pooled over their targets are the run's own test figures
    m = rec["metrics"]
    for name, key in (("model", "test_rmse_k"), ("persistence", "persistence_rmse_k"),
                      ("climatology", "climatology_rmse_k")):
        assert maps.attrs[f"pooled_rmse_{name}"] == pytest.approx(m[key], rel=1e-4)
    assert "per cell (25 cells, test, 1 h ahead)" in out
    assert (tmp_path / "map.png").stat().st_size > 10_000


def test_a_map_needs_a_box(tmp_path, capsys):
    assert main(["train", "--map", str(tmp_path / "m.png"), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a map needs a box of cells; give --box" in err[0]
    assert not (tmp_path / "runs.jsonl").exists()


def test_square_grid_checks_its_size():
    g = Grid.square(3, 4)
    assert g.shape == (3, 4) and g.n_cells == 12 and list(g.band(1, 2)) == [4, 5, 6, 7]
    with pytest.raises(ConfigError, match="ny=0 must be a whole number"):
        Grid.square(0)
    assert Grid.square_limits() == (601, 1440)  # 60N down to 90S, and once round the globe, in 0.25 degrees
    assert Grid.square(601, 1440).shape == (601, 1440)
    with pytest.raises(ConfigError, match="a grid of 602 rows from latitude 60.0 leaves -90..90"):
        Grid.square(602, 1)
    with pytest.raises(ConfigError, match="1441 columns of 0.25 degrees goes round the globe more than once"):
        Grid.square(1, 1441)
