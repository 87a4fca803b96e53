"""Splits, scaling, windows and baselines on hand-checkable series."""

import numpy as np
import pandas as pd
import pytest

from lstmnb.errors import ConfigError, DataError
from lstmnb.windows import (
    Scaler, WindowConfig, climatology_table, make_windows, sliding_windows, split_bounds, split_by_dates,
)


def hours(n, start="2020-01-01"):
    return pd.date_range(start, periods=n, freq="h")


def test_sliding_windows_match_definition():
    v = np.arange(20.0)
    x, y = sliding_windows(v, window=4, lead_hours=3, horizon=2)
    # x[i] = v[i:i+4]; first target is 3 h after the last input, two hours long
    assert x.shape == (20 - (4 + 3 - 1 + 2) + 1, 4, 1)
    for i in range(x.shape[0]):
        np.testing.assert_array_equal(x[i, :, 0], v[i : i + 4])
        np.testing.assert_array_equal(y[i], [v[i + 3 + 3], v[i + 3 + 4]])
    assert x.flags.c_contiguous and y.flags.c_contiguous


def test_split_bounds_are_chronological_and_cover_everything():
    tr, va, te = split_bounds(100, (0.7, 0.15, 0.15))
    assert (tr.start, tr.stop, va.start, va.stop, te.start, te.stop) == (0, 70, 70, 85, 85, 100)
    with pytest.raises(ConfigError, match="fractions"):
        split_bounds(100, (0.5, 0.5, 0.5))


def test_split_by_dates():
    t = hours(96)
    tr, va, te = split_by_dates(t, "2020-01-02", "2020-01-03")
    assert (tr.stop, va.stop) == (24, 48)
    with pytest.raises(ConfigError, match="split dates"):
        split_by_dates(t, "2020-01-03", "2020-01-02")


def test_windows_never_cross_a_split_and_scaling_uses_train_only():
    n = 200
    t = hours(n)
    v = np.arange(n, dtype=float) + 250.0  # value encodes its own time index
    cfg = WindowConfig(window=5, lead_hours=2, horizon=1, fractions=(0.6, 0.2, 0.2))
    w = make_windows(v, t, cfg)
    bounds = split_bounds(n, cfg.fractions)
    # scaler statistics from the training part only
    train_vals = v[bounds[0]]
    assert w.scaler.mean[0] == pytest.approx(train_vals.mean())
    assert w.scaler.std[0] == pytest.approx(train_vals.std())
    for name, sl in zip(("train", "val", "test"), bounds):
        x_k = w.scaler.inverse(w.x[name][..., 0])
        y_k = w.to_kelvin(w.y[name])
        idx_in = x_k - 250.0
        idx_out = y_k - 250.0
        assert idx_in.min() >= sl.start - 1e-6 and idx_out.max() <= sl.stop - 1 + 1e-6
        # every target is lead_hours after the last input of its window
        np.testing.assert_allclose(idx_out[:, 0] - idx_in[:, -1], cfg.lead_hours, atol=1e-4)
    assert w.sizes() == {"train": 120 - 6, "val": 40 - 6, "test": 40 - 6}


def test_persistence_baseline_by_hand():
    # a ramp of +1 K per hour: persistence at lead L is always L kelvin wrong
    v = np.arange(300.0)
    w = make_windows(v, hours(300), WindowConfig(window=3, lead_hours=2, fractions=(0.6, 0.2, 0.2)))
    for split in ("train", "val", "test"):
        assert w.baselines[split]["persistence"]["rmse"] == pytest.approx(2.0)
        assert w.baselines[split]["persistence"]["mae"] == pytest.approx(2.0)


def test_climatology_baseline_by_hand():
    # two years of a pure diurnal cycle (no noise): climatology from year one predicts year two exactly
    t = hours(24 * 366 * 2)
    v = 280 + 5 * np.sin(2 * np.pi * t.hour.to_numpy() / 24)
    w = make_windows(v, t, WindowConfig(window=6, fractions=(0.5, 0.25, 0.25)))
    assert w.baselines["test"]["climatology"]["rmse"] == pytest.approx(0.0, abs=1e-9)
    assert w.baselines["test"]["persistence"]["rmse"] > 0.5
    # and the climatology table is the hour-of-day x day-of-year mean
    table = climatology_table(v[: 24 * 366], t[: 24 * 366], smooth_days=0)
    np.testing.assert_allclose(table[10], 280 + 5 * np.sin(2 * np.pi * np.arange(24) / 24))


def test_calendar_features_and_multi_point():
    t = hours(500)
    v = np.stack([np.arange(500.0), np.arange(500.0) * 2], axis=1)
    w = make_windows(v, t, WindowConfig(window=4, calendar=True))
    assert w.n_features == 5 and w.features[1:] == ["hour_sin", "hour_cos", "doy_sin", "doy_cos"]
    assert set(np.unique(w.point_index["train"])) == {0, 1}
    assert np.abs(w.x["train"][..., 1:]).max() <= 1.0 + 1e-6


def test_scaler_roundtrip():
    s = Scaler.fit(np.array([[1.0, 10.0], [3.0, 30.0]]))
    np.testing.assert_allclose(s.transform(np.array([[2.0, 20.0]])), [[0.0, 0.0]])
    assert s.inverse(np.array([1.0]))[0] == pytest.approx(3.0)


@pytest.mark.parametrize("kw, match", [
    ({"window": 0}, "window=0"), ({"lead_hours": -1}, "lead_hours=-1"), ({"horizon": 0}, "horizon=0"),
])
def test_bad_window_settings(kw, match):
    with pytest.raises(ConfigError, match=match):
        make_windows(np.arange(100.0), hours(100), WindowConfig(**kw))


def test_window_longer_than_training_part():
    with pytest.raises(ConfigError, match="longer than the training part"):
        make_windows(np.arange(100.0), hours(100), WindowConfig(window=80))


def test_nan_in_series_is_named():
    v = np.arange(100.0)
    v[42] = np.nan
    with pytest.raises(DataError, match="2020-01-02 18:00"):
        make_windows(v, hours(100), WindowConfig(window=3))
