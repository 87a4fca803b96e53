"""The reported forecast's per-point blend of the network with persistence and climatology, fitted on validation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lstmnb.errors import ConfigError
from lstmnb.training.evaluate import SOURCES, apply_blend, blend_section, blend_weights, convex_weights, fit_blend
from lstmnb.windows import WindowConfig, make_windows


def test_convex_weights_are_the_best_convex_combination():
    rng = np.random.default_rng(0)
    truth = rng.normal(size=500)
    # three forecasts with errors of different sizes, partly correlated
    common = rng.normal(size=500)
    f = np.stack([truth + 0.5 * rng.normal(size=500) + 0.2 * common, truth + 0.8 * rng.normal(size=500),
                  truth + 1.5 * rng.normal(size=500) - 0.3 * common], axis=1)
    w = convex_weights(f, truth)
    assert w.shape == (3,) and (w >= 0).all() and w.sum() == pytest.approx(1.0)
    best = np.mean((f @ w - truth) ** 2)
    # no point of a fine grid over the simplex does better
    grid = np.array([(a, b, 1 - a - b) for a in np.linspace(0, 1, 101) for b in np.linspace(0, 1, 101) if a + b <= 1 + 1e-12])
    assert best <= np.min(np.mean((f @ grid.T - truth[:, None]) ** 2, axis=0)) + 1e-12
    # never worse than any forecast alone; a forecast that is the truth gets all the weight
    assert best <= np.mean((f - truth[:, None]) ** 2, axis=0).min()
    np.testing.assert_allclose(convex_weights(np.stack([f[:, 0], truth], axis=1), truth), [0.0, 1.0], atol=1e-9)


def _windows():
    """Two points a season long: a stormy one where a forecast is useful, and a smooth one where persistence
    is hard to beat."""
    t = pd.date_range("2020-01-01", periods=24 * 120, freq="h")
    rng = np.random.default_rng(3)
    stormy = 280 + 5 * np.sin(2 * np.pi * t.hour.to_numpy() / 24) + np.cumsum(rng.normal(0, 0.8, len(t)))
    smooth = 290 + np.convolve(np.cumsum(rng.normal(0, 0.05, len(t) + 23)), np.ones(24) / 24, mode="valid")
    return make_windows(np.stack([stormy, smooth], axis=1), t, WindowConfig(window=12, lead_hours=6))


def test_the_blend_never_loses_to_persistence_on_validation_at_any_point():
    w = _windows()
    rng = np.random.default_rng(4)
    truth = {s: w.to_kelvin(w.y[s]) for s in ("val", "test")}
    # a "network" that is good at the stormy point and adds noise at the smooth one
    network = {s: truth[s] + np.where(w.point_index[s][:, None] == 0, 0.5, 0.3) * rng.normal(size=truth[s].shape)
               for s in ("val", "test")}
    for blend in ("persistence", "baselines"):
        weights = fit_blend(w, network["val"], blend)
        assert weights.shape == (2, len(SOURCES)) and np.allclose(weights.sum(axis=1), 1.0) and (weights >= 0).all()
        if blend == "persistence":
            assert (weights[:, SOURCES.index("climatology")] == 0).all()
        reported = apply_blend(w, "val", network["val"], weights)
        for p in range(2):
            sel = w.point_index["val"] == p
            mse = {name: np.mean((f[sel] - truth["val"][sel]) ** 2) for name, f in (
                ("reported", reported), ("network", network["val"]), ("persistence", w.predictions["val"]["persistence"]))}
            assert mse["reported"] <= min(mse["network"], mse["persistence"]) + 1e-12
        # the smooth point leans on persistence, the stormy one on the network
        assert weights[1, SOURCES.index("persistence")] > weights[0, SOURCES.index("persistence")]
    off = fit_blend(w, network["val"], "off")
    np.testing.assert_array_equal(apply_blend(w, "test", network["test"], off), network["test"])
    section = blend_section(w, "baselines", network["val"], weights)
    assert section["fitted_on"] == "val" and section["per_point"][1]["weights"]["persistence"] == pytest.approx(weights[1, 1])
    np.testing.assert_array_equal(blend_weights(section), weights)
    for row in section["per_point"]:
        assert row["val_reported_rmse_k"] <= min(row["val_persistence_rmse_k"], row["val_network_rmse_k"]) + 1e-9
    with pytest.raises(ConfigError, match="blend='mean' is not one of off, persistence, baselines"):
        fit_blend(w, network["val"], "mean")


def test_a_box_run_blends_every_cell_on_its_own(small_store, tmp_path):
    from lstmnb.data import Request
    from lstmnb.training import preset_config, run

    request = Request(source=str(small_store), box=(39.5, 40.0, 279.5, 280.0), start="2020-01-01", end="2020-01-10")
    cfg = preset_config(device="cpu", window=12, hidden=8, epochs=2, progress=False)
    record = run(request, cfg, results=None).record
    rows = record["skill"]["blend"]["per_point"]
    assert [r["point"] for r in rows] == record["data"]["cells"] and len(rows) == 9
    for row in rows:  # every cell: never above persistence on validation
        assert row["val_reported_rmse_k"] <= row["val_persistence_rmse_k"] + 1e-9
        assert sum(row["weights"].values()) == pytest.approx(1.0)
    assert len({tuple(r["weights"].values()) for r in rows}) > 1  # cells get their own weights
