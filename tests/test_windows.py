"""Splits, scaling, windows and baselines on hand-checkable series."""

import numpy as np
import pandas as pd
import pytest

from lstmnb.errors import ConfigError, DataError
from lstmnb.climate import CLIMATOLOGIES, calendar_day, climatology_kind
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


@pytest.mark.parametrize("horizon", [1, 3])
def test_targets_belong_to_one_split_inputs_may_cross_and_scaling_uses_train_only(horizon):
    n = 200
    t = hours(n)
    v = np.arange(n, dtype=float) + 250.0  # value encodes its own time index
    cfg = WindowConfig(window=5, lead_hours=2, horizon=horizon, fractions=(0.6, 0.2, 0.2))
    w = make_windows(v, t, cfg)
    bounds = split_bounds(n, cfg.fractions)
    # scaler statistics from the training part only
    train_vals = v[bounds[0]]
    assert w.scaler.mean[0] == pytest.approx(train_vals.mean())
    assert w.scaler.std[0] == pytest.approx(train_vals.std())
    seen = []
    for name, sl in zip(("train", "val", "test"), bounds):
        idx_in = np.rint(w.scaler.inverse(w.x[name][..., 0]) - 250.0)
        idx_out = np.rint(w.to_kelvin(w.y[name]) - 250.0)
        # every target hour of every sample lies in its split; the first is the sample's target time
        assert idx_out.min() >= sl.start and idx_out.max() <= sl.stop - 1
        np.testing.assert_array_equal(t[idx_out[:, 0].astype(int)], w.target_times[name])
        # inputs end lead_hours before the first target and are consecutive hours
        np.testing.assert_array_equal(idx_out[:, 0] - idx_in[:, -1], cfg.lead_hours)
        np.testing.assert_array_equal(np.diff(idx_in, axis=1), 1)
        if name != "train":  # the first samples of val and test take their inputs from the part before
            assert idx_in.min() == sl.start - cfg.lead_hours - cfg.window + 1 < sl.start
        seen.append(set(idx_out.ravel().astype(int)))
        sc = w.scored[name]
        assert sc["count"] == w.sizes()[name] and sc["first"] == str(t[int(idx_out[0, 0])])
        assert sc["last"] == str(t[int(idx_out[-1, 0])])
    assert not (seen[0] & seen[1] or seen[1] & seen[2] or seen[0] & seen[2]), "a target hour in two splits"
    # train loses its first window + lead - 1 hours (no inputs); every split drops the horizon - 1
    # hours at its end whose later targets would fall into the next split
    assert w.sizes() == {"train": 120 - 6 - (horizon - 1), "val": 40 - (horizon - 1), "test": 40 - (horizon - 1)}
    assert w.scored["test"]["last"] == str(t[n - horizon])


def test_val_and_test_score_the_same_targets_at_every_lead():
    t = hours(24 * 40)
    rng = np.random.default_rng(0)
    v = 280 + 5 * np.sin(2 * np.pi * t.hour.to_numpy() / 24) + np.cumsum(rng.normal(0, 0.3, len(t)))
    ws = {lead: make_windows(v, t, WindowConfig(window=24, lead_hours=lead)) for lead in (1, 6, 24)}
    for split in ("val", "test"):
        for lead, w in ws.items():
            np.testing.assert_array_equal(w.target_times[split], ws[1].target_times[split])
            np.testing.assert_array_equal(w.y[split], ws[1].y[split])
            assert w.scored[split] == ws[1].scored[split]
            # the same targets give the same climatology score; persistence gets worse with the lead
            assert w.baselines[split]["climatology"] == ws[1].baselines[split]["climatology"]
        pers = [ws[lead].baselines[split]["persistence"]["rmse"] for lead in (1, 6, 24)]
        assert pers[0] < pers[1]
    # the training targets start where this lead's inputs exist
    for lead, w in ws.items():
        assert w.scored["train"]["first"] == str(t[24 + lead - 1])


def test_under_a_year_of_training_the_climatology_is_the_hour_of_day_mean_stated_once():
    # 90 days from 1 January, split in halves and quarters: training is 1 Jan - 14 Feb (45 days), too short
    # for a day-of-year table (most days of the year would have no training day near them), so the standard
    # climatology is the hour-of-day mean of the training part, for every target
    t = hours(24 * 90)
    rng = np.random.default_rng(1)
    v = np.stack([280 + 4 * np.sin(2 * np.pi * t.hour.to_numpy() / 24) + rng.normal(0, 1, len(t)),
                  290 + 0.05 * np.arange(len(t)) / 24], axis=1)
    w = make_windows(v, t, WindowConfig(window=24, lead_hours=3, fractions=(0.5, 0.25, 0.25)))
    assert w.climatology["kind"] == "hour-of-day" and w.climatology["training_days"] == 45.0
    assert w.climatology["description"] == CLIMATOLOGIES["hour-of-day"]
    assert "hour-of-day mean of the training part" in w.climatology["line"] and "45.0 days" in w.climatology["line"]
    train = slice(0, 24 * 45)
    truth = v[24 * 67 + 12:]  # the test part: its last 540 hours
    by_hand = []
    for p in range(2):
        hour_mean = pd.Series(v[train, p]).groupby(t[train].hour).mean()
        by_hand.append(hour_mean.loc[t[24 * 67 + 12:].hour].to_numpy() - truth[:, p])
    assert w.baselines["test"]["climatology"]["rmse"] == pytest.approx(np.sqrt(np.mean(np.concatenate(by_hand) ** 2)))
    # the table is that mean on every day of the year
    table = climatology_table(v[train, 0], t[train])
    np.testing.assert_allclose(table, np.tile(pd.Series(v[train, 0]).groupby(t[train].hour).mean().to_numpy(), (365, 1)))


def test_climatology_kind_needs_a_year_of_training():
    assert climatology_kind(hours(24 * 364)) == "hour-of-day"
    assert climatology_kind(hours(24 * 365)) == "day-of-year"
    assert climatology_kind(hours(24 * 366, start="2020-01-01")) == "day-of-year"


def test_persistence_baseline_by_hand():
    # a ramp of +1 K per hour: persistence at lead L is always L kelvin wrong
    v = np.arange(300.0)
    w = make_windows(v, hours(300), WindowConfig(window=3, lead_hours=2, fractions=(0.6, 0.2, 0.2)))
    for split in ("train", "val", "test"):
        assert w.baselines[split]["persistence"]["rmse"] == pytest.approx(2.0)
        assert w.baselines[split]["persistence"]["mae"] == pytest.approx(2.0)


def test_climatology_baseline_by_hand():
    # two years of a pure diurnal cycle plus a seasonal one (no noise): the day-of-year climatology from year
    # one predicts year two to within the +-7 days of smoothing
    t = hours(24 * 366 * 2)
    doy = calendar_day(t) + 1
    v = 280 + 5 * np.sin(2 * np.pi * t.hour.to_numpy() / 24) + 10 * np.sin(2 * np.pi * doy / 366)
    w = make_windows(v, t, WindowConfig(window=6, fractions=(0.5, 0.25, 0.25)))
    assert w.climatology["kind"] == "day-of-year" and w.climatology["description"] == CLIMATOLOGIES["day-of-year"]
    assert w.baselines["test"]["climatology"]["rmse"] < 0.1
    assert w.baselines["test"]["persistence"]["rmse"] > 0.5
    # and the climatology table is the hour-of-day x day-of-year mean
    table = climatology_table(v[: 24 * 366], t[: 24 * 366], smooth_days=0)
    np.testing.assert_allclose(table[10], 280 + 5 * np.sin(2 * np.pi * np.arange(24) / 24) + 10 * np.sin(2 * np.pi * 11 / 366))


def test_a_date_reads_the_same_climatology_row_in_leap_and_normal_years():
    """Trained on the leap year 2020, tested on 2021: each date of 2021 is forecast with 2020's same date
    (29 February with 28 February), not with the day before from March on."""
    assert list(calendar_day(pd.DatetimeIndex(["2020-02-28", "2020-02-29", "2020-03-01", "2021-03-01",
                                               "2020-12-31", "2021-12-31", "2021-01-01"]))) == [58, 58, 59, 59, 364, 364, 0]
    t = hours(24 * (366 + 365))
    v = (t.month * 100 + t.day).to_numpy().astype(float)  # a "weather" that is its date, every hour alike
    table = climatology_table(v[: 24 * 366], t[: 24 * 366], smooth_days=0)
    later = t[24 * 366:]
    want = np.where((later.month == 2) & (later.day == 28), 228.5, v[24 * 366:])  # 28 and 29 February pooled
    np.testing.assert_array_equal(table[calendar_day(later), later.hour], want)


def test_calendar_features_and_multi_point():
    t = hours(500)
    v = np.stack([np.arange(500.0), np.arange(500.0) * 2], axis=1)
    w = make_windows(v, t, WindowConfig(window=4, calendar=True))
    assert w.n_features == 5 and w.features[1:] == ["hour_sin", "hour_cos", "doy_sin", "doy_cos"]
    assert set(np.unique(w.point_index["train"])) == {0, 1}
    assert np.abs(w.x["train"][..., 1:]).max() <= 1.0 + 1e-6
    # the calendar inputs of the last input hour belong to that hour (lead 1: one hour before the target)
    for split in ("train", "test"):
        last_input = pd.DatetimeIndex(w.target_times[split]) - pd.Timedelta(hours=1)
        np.testing.assert_allclose(w.x[split][:, -1, 1], np.sin(2 * np.pi * last_input.hour / 24), atol=1e-6)
        np.testing.assert_array_equal(w.point_index[split][: w.scored[split]["count"]], 0)


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
    """Refused naming the settings as the caller gave them (the command passes its spelling)."""
    from lstmnb.rules import CLI

    with pytest.raises(ConfigError, match=r"^window=80 \(\+ lead 1 h, horizon 1 h\) is longer than the training part "
                                          r"\(70 hours\); use a shorter window or a longer time range$"):
        make_windows(np.arange(100.0), hours(100), WindowConfig(window=80))
    with pytest.raises(ConfigError, match=r"^--window 80 \(\+ lead"):
        make_windows(np.arange(100.0), hours(100), WindowConfig(window=80), say=CLI)
    with pytest.raises(ConfigError, match=r"^the val part has 15 hours, fewer than the horizon of 20; use a shorter "
                                          r"horizon or a longer time range$"):
        make_windows(np.arange(100.0), hours(100), WindowConfig(window=10, horizon=20))


def test_nan_in_series_is_named():
    v = np.arange(100.0)
    v[42] = np.nan
    with pytest.raises(DataError, match="2020-01-02 18:00"):
        make_windows(v, hours(100), WindowConfig(window=3))


def test_a_series_with_missing_hours_or_another_step_is_refused():
    """Windows, leads and horizons count steps as hours: with 6 hours missing, the sample whose last input is
    the hour before the gap had its '1 h' target 7 h later (and was scored against persistence at 7 h), and a
    6-hourly store made every '1 h' lead 6 h. Both were windowed without a word; they are refused, naming where."""
    t = hours(400)
    v = 280 + np.sin(np.arange(400) / 7.0)
    gap = t.delete(range(200, 206))
    with pytest.raises(DataError, match=r"not hourly: 2020-01-09 07:00:00 is followed by 2020-01-09 14:00:00"):
        make_windows(v[: len(gap)], gap, WindowConfig(window=4, fractions=(0.5, 0.25, 0.25)))
    with pytest.raises(DataError, match="not hourly"):
        make_windows(v, pd.date_range("2020-01-01", periods=400, freq="6h"), WindowConfig(window=4))
    assert make_windows(v, t, WindowConfig(window=4)).sizes()["test"] == 60  # hourly: as before


def test_fitted_cycles_from_weeks_keep_to_the_day_and_stay_in_range():
    """Fitted to a few weeks, the year's harmonics would follow those weeks' weather and run out of range
    months later (a random walk fitted on 30 days gave -62,000 K three months on): under a year of
    training only the day's harmonics are fitted, and the cycles carried ahead stay within the training values."""
    from lstmnb.climate import cycle_fit, cycle_values

    rng = np.random.default_rng(0)
    times = pd.date_range("2020-01-01", periods=24 * 30, freq="h")
    walk = 280 + np.cumsum(rng.normal(0, 1.0, len(times)))
    coef = cycle_fit(walk, times)
    assert coef.shape == (5, 1)  # a constant and two harmonics of the day
    later = cycle_values(coef, pd.date_range("2020-04-01", periods=24 * 30, freq="h"))[:, 0]
    assert walk.min() <= later.min() and later.max() <= walk.max()
    year = pd.date_range("2019-01-01", periods=24 * 400, freq="h")
    assert cycle_fit(280 + np.sin(np.arange(len(year)) / 500.0), year).shape == (13, 1)  # a year: annual terms too
