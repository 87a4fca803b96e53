"""Region mode, training side: windows of the whole area against the point pipeline, baselines per
cell, training, the skill map and its plot."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from lstmnb import era5
from lstmnb.errors import ConfigError, DataError
from lstmnb.region.data import region_data, region_data_from_box
from lstmnb.region.grid import Grid, box_to_points
from lstmnb.region.model import RegionConfig
from lstmnb.region.grid import plot_skill_map
from lstmnb.region.train import RegionTrainConfig, compare, predict, skill_map
from lstmnb.windows import WindowConfig, windows_from_dataset


@pytest.fixture(scope="module")
def small_box(small_store, tmp_path_factory):
    return era5.extract(era5.Request(source=str(small_store), points=None, box=(39.5, 40.0, 279.0, 279.75),
                                     start="2020-01-01", end="2020-01-10"),
                        cache_dir=tmp_path_factory.mktemp("cache"), progress=False)


def test_region_windows_are_the_point_pipelines(small_box):
    cfg = WindowConfig(window=12, lead_hours=2, horizon=2)
    data = region_data_from_box(small_box, cfg, coords_as_inputs=False)
    w = windows_from_dataset(box_to_points(small_box), cfg)
    assert data.n_cells == 12 and data.sizes() == {s: n // 12 for s, n in w.sizes().items()}
    x, y = data.batch("test", np.array([0, 5]), cells=np.array([3, 7]))
    assert x.shape == (2, 12, 2, 1) and y.shape == (2, 2, 2)
    for b, i in enumerate((0, 5)):
        for j, cell in enumerate((3, 7)):
            k = np.nonzero(w.point_index["test"] == cell)[0][i]  # the same sample in the point pipeline
            np.testing.assert_allclose(x[b, :, j, 0].numpy(), w.x["test"][k, :, 0], rtol=1e-6)
            np.testing.assert_allclose(y[b, j].numpy(), w.y["test"][k], rtol=1e-6)
    # the baselines per cell, pooled, are the point pipeline's
    truth = data.truth("test")
    for name, pred in (("persistence", data.persistence("test")), ("climatology", data.climatology("test"))):
        rmse = np.sqrt(np.mean((pred - truth) ** 2))
        assert rmse == pytest.approx(w.baselines["test"][name]["rmse"], rel=1e-6)


def test_static_inputs_are_scaled_cell_coordinates(small_box):
    data = region_data_from_box(small_box, WindowConfig(window=12))
    assert data.static.shape == (12, 2)
    np.testing.assert_allclose(data.static.mean(axis=0), 0, atol=1e-6)
    assert np.corrcoef(data.static[:, 0], data.grid.cell_lat)[0, 1] == pytest.approx(1.0)


def _eastward_wave(ny=4, nx=6, hours=700, seed=0):
    """Every row carries the same random walk eastwards, one cell per hour: a cell's next value is its
    western neighbour's value now. Its own past cannot tell the next step; the neighbour can."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.normal(0, 1.0, hours + nx))
    field = np.stack([walk[nx - c: nx - c + hours] for c in range(nx)], axis=1)  # (hours, nx)
    values = 280 + np.repeat(field[:, None, :], ny, axis=1).reshape(hours, ny * nx)
    return values, pd.date_range("2020-01-01", periods=hours, freq="h"), Grid.square(ny, nx, lat0=45.0)


@pytest.mark.slow
def test_neighbours_beat_the_per_cell_model_where_weather_moves():
    values, times, grid = _eastward_wave()
    data = region_data(values, times, grid, WindowConfig(window=6))
    variants = {"sparse": RegionConfig(n_static=2, hidden=16, neighbours=4),
                "none": RegionConfig(n_static=2, hidden=16, neighbours=0)}
    table, maps, fits = compare(data, variants, RegionTrainConfig(epochs=3, steps_per_epoch=30, batch_size=8,
                                                                  lr=1e-2))
    assert set(maps.data_vars) == {"sparse", "none", "persistence", "climatology"}
    assert dict(maps.sizes) == {"latitude": 4, "longitude": 6}
    rmse = table["mean_cell_rmse_k"]
    assert rmse["sparse"] < 0.7 * rmse["none"] and rmse["sparse"] < 0.7 * rmse["persistence"]
    # away from the western edge (no western neighbour there) nearly every cell gains
    inner = maps["sparse"].values[:, 1:] < maps["none"].values[:, 1:]
    assert inner.mean() > 0.9
    assert table.loc["sparse", "parameters"] > table.loc["none", "parameters"]
    assert all(len(f.history) == 3 for f in fits.values())


def test_fit_learns_and_skill_map_reports_every_cell():
    values, times, grid = _eastward_wave(ny=3, nx=3, hours=300)
    data = region_data(values, times, grid, WindowConfig(window=4))
    table, maps, fits = compare(data, {"sparse": RegionConfig(n_static=2, hidden=8, neighbours=3)},
                                RegionTrainConfig(epochs=2, steps_per_epoch=15, batch_size=4, lr=1e-2))
    hist = fits["sparse"].history
    assert [h["epoch"] for h in hist] == [1, 2] and all(np.isfinite(h["val_rmse_k"]) for h in hist)
    assert fits["sparse"].best_epoch in (1, 2)
    err = predict(data, fits["sparse"].model, "test") - data.truth("test")
    assert maps.attrs["pooled_rmse_sparse"] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-5)
    np.testing.assert_allclose(maps["sparse"].values.reshape(-1), np.sqrt(np.mean(err ** 2, axis=(0, 2))), rtol=1e-5)
    better = (maps["sparse"] < maps["persistence"]).values.mean()
    assert table.loc["sparse", "cells_better_than_persistence"] == pytest.approx(better)
    fig = plot_skill_map(maps, reference="persistence")
    assert [a.get_title() for a in fig.axes[:2]] == ["sparse", "climatology"]  # the reference has no panel
    fig = plot_skill_map(maps, ["sparse", "persistence"])
    assert [a.get_title() for a in fig.axes[:2]] == ["sparse", "persistence"]
    with pytest.raises(ConfigError, match="no map named 'gru'"):
        plot_skill_map(maps, ["gru"])


def test_bad_input(small_box):
    with pytest.raises(ConfigError, match="steps_per_epoch=0 must be a whole number >= 1 or None"):
        RegionTrainConfig(steps_per_epoch=0).validate()
    region_data_from_box(small_box, WindowConfig(window=48))  # inputs may reach back into the part before
    with pytest.raises(ConfigError, match="is longer than the training part"):
        region_data_from_box(small_box, WindowConfig(window=1000))
    with pytest.raises(DataError, match=r"values must be \(time, 4 cells"):
        region_data(np.zeros((10, 5)), pd.date_range("2020", periods=10, freq="h"), Grid.square(2))
    values = np.full((100, 4), 280.0)
    values[50, 1] = np.nan
    with pytest.raises(DataError, match=r"1 missing \(NaN\) hours, first at"):
        region_data(values, pd.date_range("2020", periods=100, freq="h"), Grid.square(2))
    data = region_data(np.random.default_rng(0).normal(280, 1, (200, 4)), pd.date_range("2020", periods=200, freq="h"),
                       Grid.square(2), WindowConfig(window=4))
    with pytest.raises(ConfigError, match="forecast 'm' has shape"):
        skill_map(data, {"m": np.zeros(3)})
    with pytest.raises(ConfigError, match="taken by a baseline"):
        compare(data, {"persistence": RegionConfig(neighbours=0)})
