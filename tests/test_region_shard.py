"""Region mode, sharding: row bands and their halos, a band's model against the whole model, and
sharded against unsharded training on real gloo ranks (spawned processes on loopback)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from lstmnb.errors import ConfigError
from lstmnb.data import point_label
from lstmnb.region.data import RegionData
from lstmnb.region.grid import Grid
from lstmnb.region.model import RegionConfig, region_model
from lstmnb.region.relation import knn_index
from lstmnb.experiments.region import run_sharded
from lstmnb.region.shard import ShardConfig, local_model, plan_tiles, train_steps
from lstmnb.windows import WindowConfig, make_windows

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::UserWarning")]


def _data(ny=6, nx=4, hours=240, seed=0):
    rng = np.random.default_rng(seed)
    grid = Grid.square(ny, nx, lat0=45.0)
    values = 280 + 0.3 * np.cumsum(rng.normal(size=(hours, grid.n_cells)), axis=0)
    labels = [point_label(a, b) for a, b in zip(grid.cell_lat, grid.cell_lon)]
    times = pd.date_range("2020-01-01", periods=hours, freq="h")
    return RegionData(make_windows(values, times, WindowConfig(window=6), points=labels, keys=True), grid)


def test_bands_and_halos():
    grid = Grid.square(7, 5, lat0=45.0)
    index = knn_index(grid.cell_lat, grid.cell_lon, 8)
    tiles = plan_tiles(grid, index, 3)
    assert [t.rows for t in tiles] == [(0, 3), (3, 5), (5, 7)]
    assert np.array_equal(np.sort(np.concatenate([t.cells for t in tiles])), np.arange(35))
    for t in tiles:
        # every neighbour of the band's cells is a source, at the position the local index names
        np.testing.assert_array_equal(t.sources[t.index], index[t.cells])
        assert np.array_equal(t.sources[: t.cells.size], t.cells)  # own cells first
        for src, cells in t.recv.items():
            assert np.array_equal(tiles[src].send[t.rank], cells)
            assert set(cells) <= set(tiles[src].cells)
    # a 3 x 3 stencil needs one row from each adjacent band
    assert {k: v.size for k, v in tiles[1].recv.items()} == {0: 5, 2: 5}
    assert tiles[0].recv.keys() == {1}
    with pytest.raises(ConfigError, match=r"world_size=8 must be a whole number in 1..7"):
        plan_tiles(grid, index, 8)


def test_a_bands_model_computes_the_whole_models_forecast_for_its_cells():
    grid = Grid.square(6, 4)
    full = region_model(RegionConfig(hidden=8, neighbours=8), grid, seed=0)
    with torch.no_grad():
        full.mix.weight.normal_(generator=torch.Generator().manual_seed(1))
    x = torch.randn(3, 5, 24, 1, generator=torch.Generator().manual_seed(2))
    y_full = full(x)
    for tile in plan_tiles(grid, full.mix.index.numpy(), 3):
        part = local_model(full, tile)
        cells, sources = torch.from_numpy(tile.cells), torch.from_numpy(tile.sources)
        y = part(x[:, :, cells], x[:, :, sources])
        torch.testing.assert_close(y, y_full[:, cells])
        assert part.mix.weight.shape == (3, tile.cells.size, 8)  # a band keeps only its rows


def test_ranks_without_room_for_the_area_are_one_line_and_leave_nothing(tmp_path, monkeypatch):
    import tempfile

    from lstmnb.errors import OutputError

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))  # what TMPDIR names is a file
    with pytest.raises(OutputError, match=r"the ranks' copy of the area's series \(0.0 MiB\) could not be written "
                                          r"under .*file: .*; set TMPDIR to a folder with room"):
        run_sharded(_data(), RegionConfig(hidden=8, neighbours=4), ShardConfig(mode="tiles", steps=1))
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_dense_relations_cannot_be_tiled():
    data = _data()
    with pytest.raises(ConfigError, match="tiles need relation='sparse'"):
        run_sharded(data, RegionConfig(neighbours=4, relation="dense"), ShardConfig(mode="tiles"))
    with pytest.raises(ConfigError, match="mode='rows' is not one of"):
        ShardConfig(mode="rows").validate()


def test_one_process_steps_learn():
    data = _data()
    got = train_steps(data, RegionConfig(hidden=8, neighbours=8), ShardConfig(steps=6, lr=1e-2))
    assert len(got["losses"]) == 6 and got["losses"][-1] < got["losses"][0]
    assert got["bytes_sent_per_step"] == 0 and got["cells"] == 24


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tiles", "windows"])
def test_sharded_equals_unsharded(mode):
    """Two gloo ranks (spawned, loopback) against one process: the same loss after every step."""
    data = _data()
    model_cfg = RegionConfig(hidden=8, neighbours=8)
    cfg = ShardConfig(mode=mode, world_size=2, steps=4, batch_size=6, lr=1e-2)
    one = train_steps(data, model_cfg, cfg)
    two = run_sharded(data, model_cfg, cfg)
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
    assert two["losses"][-1] < two["losses"][0]  # it trained
    whole = data.windows.series.nbytes
    if mode == "tiles":
        assert two["cells"] == [12, 12]
        assert two["bytes_sent_per_step"] == [6 * 6 * 4 * 4] * 2  # one row of 4 cells, 6 windows x 6 hours
        assert two["held_bytes"] == [whole // 2] * 2  # each rank holds its band's series, not the area's
    else:
        assert two["cells"] == [24, 24] and two["bytes_sent_per_step"] == [0, 0]
        assert two["held_bytes"] == [whole] * 2


def test_a_part_of_the_area_gives_the_areas_batches_for_its_cells(tmp_path):
    """What a rank reads from the area file: the windows RegionData gives for the same cells, by their
    global ids; cells it does not hold are refused."""
    from lstmnb.region.bands import AreaFile

    data = _data()
    area = AreaFile.write(data, tmp_path)
    ids = np.array([0, 5, 17])
    whole = area.load()
    band = area.load(np.arange(8, 16))
    scattered = area.load(np.array([1, 9, 22]))
    assert whole.held_bytes == data.windows.series.nbytes and band.held_bytes == data.windows.series.nbytes // 3
    assert band.sizes() == data.sizes() and band.n_cells == 24 and band.grid is area.grid
    import pickle

    assert len(pickle.dumps(area)) < data.windows.series.nbytes / 4  # what every rank is handed: no series
    for part, cells in ((whole, slice(None)), (band, np.arange(8, 16)), (band, np.array([9, 12])),
                        (scattered, np.array([9, 22]))):
        for got, want in zip(part.batch("train", ids, cells=cells), data.batch("train", ids, cells=cells)):
            assert torch.equal(got, want)
    for got, want in zip(whole.batch("val"), data.batch("val")):
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match="does not hold"):
        band.batch("train", ids, cells=np.array([7, 8]))
    with pytest.raises(ValueError, match="does not hold"):
        band.batch("train", ids)
