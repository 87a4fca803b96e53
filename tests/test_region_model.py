"""Region mode, model side: neighbours, the sparse mix against a dense reference, the variants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lstmnb.errors import ConfigError
from lstmnb.region.grid import Grid
from lstmnb.models import Forecaster, ModelConfig
from lstmnb.region.model import (KeyedForecaster, RegionConfig, RegionForecaster, mix_source, region_model,
                                 variant_config)
from lstmnb.region.relation import dense_from, knn_index, mix_gather


def test_knn_on_a_grid_is_the_stencil():
    g = Grid.square(5, 6, lat0=41.0)
    centre = 2 * 6 + 3
    four = knn_index(g.cell_lat, g.cell_lon, 4)
    assert set(four[centre]) == {centre - 1, centre + 1, centre - 6, centre + 6}
    assert set(four[centre][:2]) == {centre - 1, centre + 1}  # east and west are nearer than north and south
    eight = knn_index(g.cell_lat, g.cell_lon, 8)
    assert set(eight[centre]) == {centre + dr * 6 + dc for dr in (-1, 0, 1) for dc in (-1, 0, 1)} - {centre}
    assert (eight != np.arange(g.n_cells)[:, None]).all()  # never the cell itself
    with pytest.raises(ConfigError, match=r"neighbours=30 must be a whole number in 1..29"):
        knn_index(g.cell_lat, g.cell_lon, 30)


def _nearest_by_rule(lat, lon, k):
    """Every pair's chord distance, then per cell the k nearest others, equal distances in id order."""
    from lstmnb.region.relation import TIE, unit_vectors

    pts = unit_vectors(lat, lon)
    d = np.linalg.norm(pts[:, None] - pts[None], axis=2)
    out = []
    for i, row in enumerate(d):
        others = [j for j in np.argsort(row, kind="stable") if j != i]
        runs = np.concatenate([[0], np.cumsum(np.diff(row[others]) > TIE)])
        out.append(np.array(others)[np.lexsort((others, runs))][:k])
    return np.array(out)


@pytest.mark.parametrize("lat0,lon0,k", [(41.0, 280.0, 3), (41.0, 280.0, 8), (-0.5, 359.5, 5), (80.0, 10.0, 8)])
def test_equally_near_cells_go_in_grid_order(lat0, lon0, k):
    """A tie at the k-th neighbour (north and south of a cell are equally far; at a box's edge, cells two
    columns away) is settled by the lower cell id, whatever order the k-d tree keeps them in: the brute
    force rule's answer, at mid latitudes, across the equator and the prime meridian, and near the pole."""
    g = Grid.square(6, 7, lat0=lat0, lon0=lon0)
    got = knn_index(g.cell_lat, g.cell_lon, k)
    np.testing.assert_array_equal(got, _nearest_by_rule(g.cell_lat, g.cell_lon, k))
    if (lat0, k) == (41.0, 3):
        centre = 2 * 7 + 3  # east and west first, then of north and south the lower id: the row above
        assert set(got[centre][:2]) == {centre - 1, centre + 1} and got[centre][2] == centre - 7


def test_sparse_kernels_equal_the_dense_reference():
    gen = torch.Generator().manual_seed(0)
    g = Grid.square(4, 5)
    index = knn_index(g.cell_lat, g.cell_lon, 6)
    idx = torch.from_numpy(index)
    weight = torch.randn(3, g.n_cells, 6, generator=gen, dtype=torch.float64)
    x = torch.randn(g.n_cells, 7, generator=gen, dtype=torch.float64)
    dense = dense_from(idx, weight, g.n_cells)
    assert dense.shape == (3, 20, 20) and int((dense != 0).sum()) == 3 * 20 * 6
    reference = torch.einsum("cij,jm->cim", dense, x)
    # the dense matrix holds exactly the listed weights, at the listed columns
    torch.testing.assert_close(dense.gather(2, idx.unsqueeze(0).expand(3, 20, 6)), weight, rtol=0, atol=0)
    assert dense[2, 7, index[7, 4]] == weight[2, 7, 4]
    torch.testing.assert_close(mix_gather(x, idx, weight), reference)


def _with_random_relation(model: RegionForecaster, seed: int = 1) -> RegionForecaster:
    with torch.no_grad():
        model.mix.weight.copy_(torch.randn(model.mix.weight.shape, generator=torch.Generator().manual_seed(seed)))
    return model


def test_sparse_model_equals_dense_model_with_the_same_relation():
    g = Grid.square(4, 4)
    x = torch.randn(3, 5, 16, 3, generator=torch.Generator().manual_seed(2))
    cfg = RegionConfig(n_features=3, n_mixed=2, hidden=8, neighbours=5)
    sparse = _with_random_relation(region_model(cfg, g, seed=0))
    dense = region_model(RegionConfig(**{**cfg.__dict__, "relation": "dense"}), g, seed=0)
    with torch.no_grad():
        dense.mix.weight.copy_(dense_from(sparse.mix.index, sparse.mix.weight, 16))
    ys, yd = sparse(x), dense(x)
    torch.testing.assert_close(ys, yd, rtol=1e-5, atol=1e-6)
    ys.square().sum().backward()
    yd.square().sum().backward()
    # the sparse weights' gradient is the dense gradient at the listed positions
    at_index = dense.mix.weight.grad.gather(2, sparse.mix.index.unsqueeze(0).expand(cfg.channels, 16, 5))
    torch.testing.assert_close(sparse.mix.weight.grad, at_index, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(sparse.core.rnn.weight_ih_l0.grad, dense.core.rnn.weight_ih_l0.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("variant", ["none", "sparse", "dense"])
def test_keyed_samples_give_the_area_batchs_forecasts(variant):
    """The Trainer's layout (one cell and hour per sample, windows gathered from the series) and the area
    layout (every cell at the same hours) are one model: the same forecasts, cell by cell."""
    g = Grid.square(3, 4)
    series = torch.randn(40, 12, 3, generator=torch.Generator().manual_seed(0))
    cfg = variant_config(variant, n_features=3, n_mixed=2, hidden=8, neighbours=5, horizon=2)
    area = _with_random_relation(region_model(cfg, g, seed=0)) if variant != "none" else region_model(cfg, g, seed=0)
    keyed = KeyedForecaster(area, series, window=6)
    last = torch.tensor([5, 17, 39])  # each sample's last input hour
    x = series[last[:, None] + torch.arange(-5, 1)]  # (3 windows, 6 hours, 12 cells, 3 features)
    keys = torch.stack([torch.arange(12).repeat_interleave(3), last.repeat(12)], dim=1)
    with torch.no_grad():
        by_area = area(x)  # (3, 12, 2)
        by_key = keyed(keys).view(12, 3, 2).transpose(0, 1)
    torch.testing.assert_close(by_key, by_area, rtol=1e-5, atol=1e-6)


def test_without_neighbours_the_region_model_is_the_point_forecaster():
    """Variant none, seeded as the Trainer seeds the point model: the same weights, the same forecasts."""
    cfg = variant_config("none", n_features=5, hidden=8)
    region = region_model(cfg, Grid.square(2, 3), seed=3)
    torch.manual_seed(3)
    point = Forecaster(ModelConfig(n_features=5, hidden=8, residual=True))
    for (name, a), (_, b) in zip(region.core.state_dict().items(), point.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    x = torch.randn(4, 7, 6, 5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(region(x), point(x.permute(0, 2, 1, 3).reshape(24, 7, 5)).view(4, 6, 1))
    assert cfg.input_size == 5 and region.mix is None


def test_dense_starts_as_the_sparse_model():
    g = Grid.square(3, 4)
    x = torch.randn(2, 6, 12, 1, generator=torch.Generator().manual_seed(0))
    outs = [region_model(RegionConfig(relation=r, neighbours=4), g, seed=5)(x) for r in ("sparse", "dense")]
    torch.testing.assert_close(outs[0], outs[1])


@pytest.mark.parametrize("neighbours,relation", [(0, "sparse"), (4, "sparse"), (4, "dense")])
def test_gradients_reach_every_weight(neighbours, relation):
    g = Grid.square(3, 5)
    cfg = RegionConfig(n_features=3, hidden=6, horizon=2, neighbours=neighbours, relation=relation, channels=2)
    model = region_model(cfg, g, seed=0)
    x = torch.randn(4, 8, 15, 3, generator=torch.Generator().manual_seed(1))
    y = model(x)
    assert y.shape == (4, 15, 2)
    torch.nn.functional.mse_loss(y, torch.randn(4, 15, 2)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert (model.mix is None) == (neighbours == 0)
    assert cfg.variant == ("none" if neighbours == 0 else relation)
    assert cfg.input_size == 3 + (2 * 2 * 1 if neighbours else 0)  # own inputs, then values and changes per channel


def test_the_mix_reads_neighbours_values_and_recent_changes():
    g = Grid.square(3, 3)
    x = torch.zeros(1, 4, 9, 1)
    x[0, :, 4, 0] = 1.0  # only the centre cell is warm
    none = region_model(RegionConfig(neighbours=0, hidden=4), g, seed=0)
    mixed = region_model(RegionConfig(neighbours=8, hidden=4), g, seed=0)
    y_none, y_mixed = none(x)[0, :, 0], mixed(x)[0, :, 0]
    corners = [0, 2, 6, 8]  # cold cells beside the warm one: with the mix they see it
    assert torch.allclose(y_none[corners], y_none[1].expand(4))  # without it, all cold cells are alike
    assert not torch.allclose(y_mixed[corners], y_none[corners])
    # the centre warmed only in the last hour: a recent change, which the mix's change inputs carry
    late = torch.zeros(1, 4, 9, 1)
    late[0, -1, 4, 0] = 1.0
    src = mix_source(late, 1)
    assert src.shape == (1, 4, 9, 2) and src[0, -1, 4, 1] == 1.0 and src[0, :-1, 4, 1].abs().sum() == 0


@pytest.mark.parametrize("kwargs,message", [
    (dict(neighbours=-1), r"neighbours=-1 must be a whole number >= 0 \(0: no mix\)"),
    (dict(n_mixed=2), r"n_mixed=2 must be a whole number in 1..1 \(n_features\)"),
    (dict(relation="full"), r"relation='full' is not one of sparse, dense"),
    (dict(channels=0), r"channels=0 must be a whole number >= 1"),
    (dict(hidden=0), r"hidden=0 must be a whole number >= 1"),
])
def test_bad_settings_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        region_model(RegionConfig(**kwargs), Grid.square(3))


def test_wrong_inputs_say_what_was_expected():
    with pytest.raises(ConfigError, match="neighbours=3 needs a neighbour index of shape"):
        RegionForecaster(RegionConfig(neighbours=3))
    with pytest.raises(ConfigError, match="variant 'full' is not one of sparse, none, dense"):
        variant_config("full")
