"""Do neighbours help? Region mode's skill side: keyed windows are the point pipeline's, variant none is the
point model of `train --box` (trained, the same forecasts), per-cell differences and the split by where the
weather comes from, the one skill score, and the maps."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from lstmnb import era5
from lstmnb.data import point_label
from lstmnb.errors import ConfigError
from lstmnb.experiments.region_skill import (check_neighbours, comparison_panels, flow_table, mse_skill_maps,
                                             region_skill, skill_table, variant_maps, variant_model)
from lstmnb.region.data import RegionData
from lstmnb.region.grid import Grid, box_to_points, flow_halves, flow_position, grid_of, to_map
from lstmnb.region.maps import Panel, plot_panels
from lstmnb.rules import CLI
from lstmnb.training import preset_config, train
from lstmnb.training.evaluate import mse_skill_score, score_row
from lstmnb.windows import WindowConfig, make_windows, windows_from_dataset


@pytest.fixture(scope="module")
def small_box(small_store, tmp_path_factory):
    return era5.extract(era5.Request(source=str(small_store), points=None, box=(39.5, 40.0, 279.0, 279.75),
                                     start="2020-01-01", end="2020-01-10"),
                        cache_dir=tmp_path_factory.mktemp("cache"), progress=False)


def region_data(values, times, grid, config) -> RegionData:
    """A (time, cells) array in kelvin on ``grid`` as keyed RegionData (one series per cell, row-major)."""
    labels = [point_label(a, b) for a, b in zip(grid.cell_lat, grid.cell_lon)]
    return RegionData(make_windows(values, times, config, points=labels, keys=True), grid)


def box_data(ds, config) -> RegionData:
    """A box Dataset as keyed RegionData, windowed as `lstmnb train --box` windows it."""
    return RegionData(windows_from_dataset(box_to_points(ds), config, keys=True), grid_of(ds))


def _cfg(**kw):
    return preset_config(device="cpu", window=12, hidden=8, epochs=2, batch_size=64, progress=False, **kw)


def test_keyed_windows_are_the_point_pipelines(small_box):
    cfg = WindowConfig(window=12, lead_hours=2, horizon=2, calendar=True)
    data = box_data(small_box, cfg)
    w = windows_from_dataset(box_to_points(small_box), cfg)
    assert data.n_cells == 12 and data.n_features == 5 and data.n_mixed == 1
    assert data.sizes() == {s: n // 12 for s, n in w.sizes().items()}
    for split in ("train", "test"):  # every key's window is the point pipeline's window of that sample
        keys = data.windows.x[split]
        np.testing.assert_array_equal(data.windows.series[keys[:, 1:2] + np.arange(-11, 1), keys[:, :1]], w.x[split])
        np.testing.assert_array_equal(data.windows.y[split], w.y[split])
        assert data.windows.baselines[split] == w.baselines[split]
    x, y = data.batch("test", np.array([0, 5]), cells=np.array([3, 7]))  # an area batch: cells at the same hours
    assert x.shape == (2, 12, 2, 5) and y.shape == (2, 2, 2)
    k = np.nonzero(w.point_index["test"] == 7)[0][5]
    np.testing.assert_array_equal(x[1, :, 1].numpy(), w.x["test"][k])
    np.testing.assert_array_equal(y[1, 1].numpy(), w.y["test"][k])


@pytest.mark.slow
def test_region_none_is_the_point_model_of_train_box(small_box):
    """The same cells through both front doors: `train --box`'s pipeline and region skill's variant none
    train the same samples in the same batches from the same weights, so every cell's forecast agrees."""
    cfg = _cfg()
    point = train(windows_from_dataset(box_to_points(small_box), cfg.window_config()), cfg)
    region = region_skill(box_data(small_box, cfg.window_config()), cfg, variants=("none", "sparse"),
                          neighbours=(3,))
    none, sparse = region.records["none"], region.records["sparse"]
    rows = {r["point"]: r for r in point.record["skill"]["per_point"]}
    assert len(rows) == 12 and [r["point"] for r in none["skill"]["per_point"]] == list(rows)
    for r in none["skill"]["per_point"]:
        assert r["model_rmse_k"] == pytest.approx(rows[r["point"]]["model_rmse_k"], rel=1e-5, abs=1e-6)
    np.testing.assert_allclose([e["val_rmse_k"] for e in none["epochs"]],
                               [e["val_rmse_k"] for e in point.record["epochs"]], rtol=1e-5)
    assert none["metrics"]["test_rmse_k"] == pytest.approx(point.record["metrics"]["test_rmse_k"], rel=1e-5)
    # the same preset and stopping rule; the neighbour variant is another model on the same targets
    assert none["config"]["patience"] == point.record["config"]["patience"] == 5 and none["config"]["calendar"]
    assert none["metrics"]["stop_reason"].startswith("ran all 2 epochs")
    assert sparse["metrics"]["test_rmse_k"] != pytest.approx(none["metrics"]["test_rmse_k"], rel=1e-4)
    assert sparse["metrics"]["persistence_rmse_k"] == none["metrics"]["persistence_rmse_k"]
    for rec in (none, sparse):
        assert rec["experiment"] == "region-skill" and rec["threads"]["used"] >= 1 and rec["threads"]["reason"]
        assert rec["region"]["cells"] == 12 and rec["region"]["chosen"]


def _eastward_wave(ny=4, nx=6, hours=900, seed=0):
    """Every row carries the same random walk eastwards, one cell per hour: a cell's next value is its
    western neighbour's value now. Its own past cannot tell the next step; the neighbour can."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.normal(0, 1.0, hours + nx))
    field = np.stack([walk[nx - c: nx - c + hours] for c in range(nx)], axis=1)  # (hours, nx)
    values = 280 + np.repeat(field[:, None, :], ny, axis=1).reshape(hours, ny * nx)
    return values, pd.date_range("2020-01-01", periods=hours, freq="h"), Grid.square(ny, nx, lat0=45.0)


@pytest.mark.slow
def test_neighbours_beat_the_point_model_downstream_where_weather_moves():
    values, times, grid = _eastward_wave()
    cfg = preset_config(device="cpu", window=6, hidden=16, epochs=4, batch_size=32, calendar=False, progress=False)
    data = region_data(values, times, grid, cfg.window_config())
    got = region_skill(data, cfg, variants=("none", "sparse"), neighbours=(2, 4), heading_deg=0.0)
    assert set(got.maps.data_vars) == {"none", "sparse", "persistence", "climatology"}
    table, flow = got.table, got.flow
    assert table.loc["sparse", "pooled RMSE (K)"] < 0.7 * table.loc["none", "pooled RMSE (K)"]
    assert table.loc["sparse", "MSE skill score vs none"] > 0.5
    # the western column has no western neighbour: the gain is downstream (east), where the wave comes from upwind
    down, up = flow.loc[("sparse", "downstream")], flow.loc[("sparse", "upstream")]
    assert down["difference (K)"] < up["difference (K)"] < 0 and down["cells better than none"] == 1.0
    assert [r["region"]["neighbours"] for r in got.runs] == [0, 2, 4]
    assert sum(r["region"]["chosen"] for r in got.runs if r["region"]["variant"] == "sparse") == 1


def test_flow_halves_split_the_cells_by_where_the_weather_arrives_first():
    grid = Grid.square(3, 4, lat0=40.0)
    east = flow_halves(grid, 0.0).reshape(3, 4)  # weather moving east: the western half is upstream
    assert (east[:, :2] == "upstream").all() and (east[:, 2:] == "downstream").all()
    south = flow_halves(grid, -90.0).reshape(3, 4)  # moving south: the northern row first
    assert (south[0] == "upstream").all() and (south[2] == "downstream").all()
    pos = flow_position(grid, -30.0).reshape(3, 4)  # east-south-east: the north-west corner first
    assert pos.argmin() == 0 and pos.argmax() == 11
    assert (flow_halves(Grid.square(3, 3), 0.0) == "upstream").sum() == 4  # the middle cell goes downstream


def _record(rmse_model, rmse_pers, grid, lead=1):
    rows = [score_row(f"c{i}", lead, 10, {"model": m ** 2, "persistence": p ** 2, "climatology": 4.0})
            for i, (m, p) in enumerate(zip(rmse_model, rmse_pers))]
    return {"run_id": "r", "skill": {"lead_hours": lead, "per_point": rows},
            "data": {"grid": {"latitude": grid.lat.tolist(), "longitude": grid.lon.tolist()},
                     "scored": {"test": {"first": "2021-04-01 00:00:00", "last": "2021-06-30 23:00:00"}}},
            "region": {"neighbours": 0}, "metrics": {"epochs_run": 1}, "epochs": [{"epoch": 1, "val_rmse_k": 1.0}]}


def test_difference_maps_tables_and_the_one_skill_score():
    grid = Grid.square(2, 2, lat0=40.0)
    pers = [1.0, 1.0, 2.0, 2.0]
    none, sparse = [0.5, 0.5, 1.0, 1.0], [0.6, 0.4, 0.5, 1.0]
    maps = variant_maps({"none": _record(none, pers, grid), "sparse": _record(sparse, pers, grid)})
    assert list(maps.data_vars) == ["none", "sparse", "persistence", "climatology"]
    assert maps.attrs["period"] == "2021-04-01 .. 2021-06-30" and maps.attrs["lead_hours"] == 1
    # the difference panel is sparse minus none, cell by cell, on a scale centred on 0
    panels = comparison_panels(maps)
    assert [(p.title, p.kind) for p in panels] == [("none: RMSE", "level"), ("sparse: RMSE", "level"),
                                                    ("sparse − none", "difference")]
    np.testing.assert_allclose(panels[2].data.values.reshape(-1), np.subtract(sparse, none))
    # the MSE skill score: 1 - MSE / MSE of the reference, per cell and pooled; None where the reference is exact
    assert mse_skill_score(1.0, 4.0) == 0.75 and mse_skill_score(1.0, 0.0) is None
    skill = mse_skill_maps(maps, "none")["sparse"].values.reshape(-1)
    np.testing.assert_allclose(skill, 1 - np.square(sparse) / np.square(none))
    assert _record(none, pers, grid)["skill"]["per_point"][2]["mse_skill_vs_persistence"] == pytest.approx(0.75)
    table = skill_table(maps)
    assert table.loc["sparse", "MSE skill score vs none"] == pytest.approx(1 - np.mean(np.square(sparse)) /
                                                                              np.mean(np.square(none)))
    assert table.loc["sparse", "cells better than none"] == 0.5  # 0.4 < 0.5 and 0.5 < 1.0; 0.6 and 1.0 are not
    assert table.loc["none", "MSE skill score vs persistence"] == pytest.approx(1 - np.mean(np.square(none)) /
                                                                               np.mean(np.square(pers)))
    # by where the weather comes from: moving east, the western column is upstream (cells 0 and 2)
    flow = flow_table(maps, grid, heading_deg=0.0)
    up = flow.loc[("sparse", "upstream")]
    assert up["count"] == 2 and up["difference (K)"] == pytest.approx(np.mean([0.6 - 0.5, 0.5 - 1.0]))
    assert up["MSE skill score vs none"] == pytest.approx(1 - (0.36 + 0.25) / (0.25 + 1.0))
    assert flow.loc[("sparse", "downstream"), "cells better than none"] == 0.5


def test_maps_give_every_panel_its_own_scale_and_difference_panels_a_scale_centred_on_zero():
    grid = Grid.square(2, 3)
    maps = to_map({"a": np.linspace(0.4, 0.5, 6), "b": np.linspace(3.0, 4.0, 6),
                   "d": np.array([-0.1, 0.0, 0.05, 0.02, -0.03, 0.01])}, grid)
    fig = plot_panels([Panel("a", maps["a"], "K"), Panel("b", maps["b"], "K"), Panel("a − b", maps["d"], "K", "difference")],
                      "title naming what, lead and period")
    meshes = [ax.collections[0] for ax in fig.axes[:3]]
    assert meshes[0].get_clim() == pytest.approx((0.4, 0.5)) and meshes[1].get_clim() == pytest.approx((3.0, 4.0))
    assert meshes[2].get_clim() == pytest.approx((-0.1, 0.1)) and meshes[2].get_cmap().name == "RdBu_r"
    assert [ax.get_title() for ax in fig.axes[:3]] == ["a", "b", "a − b"]
    assert fig._suptitle.get_text() == "title naming what, lead and period"
    with pytest.raises(ConfigError, match="panel kind 'ratio' is not one of level, difference, skill"):
        plot_panels([Panel("a", maps["a"], "K", "ratio")], "t")
    # skill scores share the scale -1..1 (their best is 1), so a panel is not saturated by its own largest value;
    # values below -1 are clipped and the colour bar says so
    skill = to_map({"s": np.linspace(0.2, 0.3, 6), "t": np.linspace(-2.0, 0.5, 6)}, grid)
    fig = plot_panels([Panel("s", skill["s"], "skill", "skill"), Panel("t", skill["t"], "skill", "skill")], "t")
    assert [ax.collections[0].get_clim() for ax in fig.axes[:2]] == [(-1.0, 1.0), (-1.0, 1.0)]
    assert [cb.extend for cb in (ax.collections[0].colorbar for ax in fig.axes[:2])] == ["neither", "min"]


def test_a_long_map_title_is_wrapped_within_the_figure():
    import matplotlib.pyplot as plt

    # on one line, the CLI's title (about 150 characters) was wider than a one-panel figure, and the saved figure
    # (bbox_inches="tight") grew wide empty margins around the map to hold it
    maps = to_map({"s": np.linspace(0.2, 0.3, 6)}, Grid.square(2, 3))
    title = ("MSE skill score per cell against persistence (1 - MSE / MSE of persistence; above 0 beats it), "
             "24 h ahead, test period 2021-01-01 .. 2021-06-30 (synthetic data)")
    for n in (1, 3):
        fig = plot_panels([Panel("s", maps["s"], "skill", "skill")] * n, title)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        text = fig._suptitle.get_window_extent(renderer)
        assert text.width <= fig.bbox.width and text.y0 >= max(ax.get_tightbbox(renderer).y1 for ax in fig.axes[:n]) - 1
        assert " ".join(fig._suptitle.get_text().split()) == title and "2021-01-01 .." in fig._suptitle.get_text()
        plt.close(fig)


def test_bad_region_skill_input(small_box):
    data = box_data(small_box, WindowConfig(window=12))
    # from Python, the box's refusals name the arguments as given there (the command's are in test_region_experiments)
    with pytest.raises(ConfigError, match=r"^neighbours=12: a box of 12 cells gives each cell 1..11 neighbours; give each "
                                          r"k in 1..11 \(e.g. neighbours=8\), a larger box, or variants=\('none',\)$"):
        region_skill(data, _cfg(calendar=False), neighbours=(12,))
    with pytest.raises(ConfigError, match=r"^channels=9 must be 1..8: each channel mixes the 8 neighbours"):
        region_skill(data, _cfg(calendar=False), neighbours=(8,), channels=9)
    with pytest.raises(ConfigError, match=r"^variants=\('gru',\): 'gru' not known; choose from sparse,none,dense$"):
        region_skill(data, _cfg(calendar=False), variants=("gru",))
    with pytest.raises(ConfigError, match="the box holds 1 cell, which has no neighbours; give a larger box, or "
                                          r"--variants none \(the point model alone\)"):
        check_neighbours(("sparse", "none"), (8,), 1, CLI)
    with pytest.raises(ConfigError, match=r"^neighbours is empty; give one or more k, e.g. neighbours=\(8, 24\)$"):
        check_neighbours(("sparse",), (), 12)
    check_neighbours(("none",), (8,), 1)  # the point model alone needs no neighbour
    model, _ = variant_model("none", data, _cfg(calendar=False), 0)
    with pytest.raises(ConfigError, match="a model of the caller's trains on one device without a checkpoint"):
        train(data.windows, _cfg(calendar=False, cycles=False, strategy="ddp", nproc=2), model=model)
