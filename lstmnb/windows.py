"""Chronological splits by target time, scaling fitted on train only, vectorised windows, and baselines.

Rules (DESIGN.md, "Training rules"): train, validation and test follow in time. A sample belongs to the split that
holds all its target hours (samples whose targets would straddle a boundary are dropped); its inputs may reach back
into the previous split, being observations known at forecast time (WeatherBench 2's protocol). So validation and
test score the same target hours at every lead; the training part's first ``window + lead_hours - 1`` hours have no
inputs, so its targets start there. Scaling statistics and the climatology come from the training part only; metrics
are in kelvin; every model result is shown beside persistence and climatology (``climate``), scored on the same targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .climate import calendar_day, calendar_features, climatology_statement, climatology_table, cycle_fit, cycle_values
from .errors import ConfigError, DataError
from .rules import PYTHON, Spelling, check_fields, ruled, whole

SPLITS = ("train", "val", "test")
CALENDAR_FEATURES = ("hour_sin", "hour_cos", "doy_sin", "doy_cos")  # the calendar inputs, after the variables
CYCLE_FEATURE = "cycle"  # the fitted seasonal and diurnal cycle at the target hour (``cycles``), last


@dataclass(frozen=True)
class WindowConfig:
    """How series become samples: ``window`` past hours predict ``horizon`` hours from ``lead_hours`` on."""

    window: int = ruled(24, whole(1, note="hours"))
    lead_hours: int = ruled(1, whole(1, note="hours"))
    horizon: int = ruled(1, whole(1, note="hours"))
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    split_dates: tuple[str, str] | None = None  # (validation start, test start), overrides fractions; equal: no validation
    calendar: bool = False  # add hour-of-day and day-of-year as sin/cos inputs
    cycles: bool = False  # add the fitted seasonal and diurnal cycles at each input hour + lead (climate.cycle_fit)
    target: str = "2m_temperature"

    def n_inputs(self, n_variables: int = 1) -> int:
        """Inputs per hour of a window: the variables, then the four calendar inputs and the fitted cycle where on."""
        return n_variables + (len(CALENDAR_FEATURES) if self.calendar else 0) + (1 if self.cycles else 0)

    def validate(self, say: Spelling = PYTHON) -> None:
        """The window's hours; ``fractions`` are checked where they split the series (``split_bounds``)."""
        check_fields(self, say)


def split_bounds(n: int, fractions: Sequence[float] = (0.7, 0.15, 0.15)) -> tuple[slice, slice, slice]:
    """Chronological train/val/test slices of ``n`` time steps by fraction (train first)."""
    fr = np.asarray(fractions, dtype=float)
    if fr.shape != (3,) or (fr <= 0).any() or abs(fr.sum() - 1) > 1e-6:
        raise ConfigError(f"fractions={tuple(fractions)!r} must be three positive numbers summing to 1")
    a, b = int(round(n * fr[0])), int(round(n * (fr[0] + fr[1])))
    return slice(0, a), slice(a, b), slice(b, n)


def split_by_dates(times: pd.DatetimeIndex, val_start: str, test_start: str) -> tuple[slice, slice, slice]:
    """Chronological slices with validation from ``val_start`` and test from ``test_start`` on; the same date
    twice gives no validation part (an empty slice), as the published setting has none."""
    try:
        v, t = pd.Timestamp(val_start), pd.Timestamp(test_start)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"split dates {val_start!r}, {test_start!r} are not dates: {exc}") from None
    if not times[0] < v <= t <= times[-1]:
        raise ConfigError(f"split dates must satisfy {times[0]} < validation start ({v}) <= test start ({t}) <= "
                          f"{times[-1]} (the same date twice: no validation part)")
    a, b = int(times.searchsorted(v)), int(times.searchsorted(t))
    return slice(0, a), slice(a, b), slice(b, len(times))


@dataclass
class Scaler:
    """Per-feature standardisation whose mean and std come from the training part only."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, train_values: np.ndarray) -> "Scaler":
        v = np.asarray(train_values, dtype=np.float64)
        v = v.reshape(-1, v.shape[-1]) if v.ndim > 1 else v.reshape(-1, 1)
        std = v.std(axis=0)
        return cls(mean=v.mean(axis=0), std=np.where(std > 0, std, 1.0))

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Standardise ``x`` whose last axis holds the features (a 1-D series is feature 0)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1 or x.shape[-1] != self.mean.size:
            return (x - self.mean[0]) / self.std[0]
        return (x - self.mean) / self.std

    def inverse(self, x: np.ndarray, feature: int = 0) -> np.ndarray:
        """Back to physical units for values of one feature (default the target, feature 0)."""
        return np.asarray(x) * self.std.reshape(-1)[feature] + self.mean.reshape(-1)[feature]


def sliding_windows(values: np.ndarray, window: int, lead_hours: int = 1, horizon: int = 1
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``X[i] = values[i:i+window]`` and targets ``y[i, k] = values[i+window-1+lead_hours+k, 0]``.

    ``values`` is (T,) or (T, F); returns X (N, window, F), y (N, horizon), from strided views copied once."""
    v = np.asarray(values)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise DataError(f"values must be (time,) or (time, features); got shape {v.shape}")
    span = window + lead_hours - 1 + horizon
    n = v.shape[0] - span + 1
    if n <= 0:
        raise ConfigError(f"window={window} h + lead_hours={lead_hours} + horizon={horizon} needs at least {span} "
                          f"hours; this part of the series has {v.shape[0]}")
    xs = np.lib.stride_tricks.sliding_window_view(v[: n + window - 1], window, axis=0)  # (N, F, window)
    x = np.ascontiguousarray(xs.transpose(0, 2, 1))
    first = window - 1 + lead_hours
    ys = np.lib.stride_tricks.sliding_window_view(v[first : first + n + horizon - 1, 0], horizon)
    return x, np.ascontiguousarray(ys)


def error_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """RMSE and MAE (same units as the inputs) over all samples and horizon steps."""
    err = np.asarray(pred, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err)))}


@dataclass
class Windows:
    """Model-ready samples (scaled, float32) per split, plus what is needed to speak in kelvin. ``scored[split]``
    states what every model and baseline is scored on there: the first and last first target hour (``first``,
    ``last``), how many target hours per point (``count``), the points and the pooled ``samples``. ``climatology``
    says which climatology the baseline is (``climatology_statement``; its ``line`` is what a command prints once);
    this module never prints."""

    config: WindowConfig
    x: dict[str, np.ndarray]  # split -> (N, window, F)
    y: dict[str, np.ndarray]  # split -> (N, horizon), scaled target
    target_times: dict[str, np.ndarray]  # split -> (N,) time of the first target hour
    point_index: dict[str, np.ndarray]  # split -> (N,) which point each sample comes from
    scaler: Scaler
    baselines: dict[str, dict[str, dict[str, Any]]]  # split -> {"persistence": {rmse, mae}, "climatology": ...}
    features: list[str]
    points: list[str]
    split_times: dict[str, tuple[str, str]] = field(default_factory=dict)  # split -> (first hour, last hour)
    scored: dict[str, dict[str, Any]] = field(default_factory=dict)
    climatology: dict[str, Any] = field(default_factory=dict)
    requested: list[str] | None = None  # each point as the user gave it ("40,-80"), where points were asked for
    # split -> {"persistence": (N, horizon), "climatology": (N, horizon)}: the baselines' forecasts in kelvin,
    # sample by sample (per-point scores, skill across leads)
    predictions: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    series: np.ndarray | None = None  # keyed windows only: the (time, point, features) inputs x's keys index

    @property
    def n_features(self) -> int:
        return int(self.series.shape[-1] if self.series is not None else self.x["train"].shape[-1])

    def sizes(self) -> dict[str, int]:
        return {s: int(self.x[s].shape[0]) for s in SPLITS}

    def identity(self) -> dict[str, Any]:
        """What these windows were made from, as a checkpoint keeps it so that a resumed run continues on
        the same data: the points, inputs, each split's hours and samples, and a digest of the training
        targets (tells two sources apart at the same points and hours)."""
        import hashlib

        return {"points": list(self.points), "features": list(self.features),
                "hours": {s: list(t) for s, t in self.split_times.items()}, "samples": self.sizes(),
                "train_targets": hashlib.sha256(np.ascontiguousarray(self.y["train"]).tobytes()).hexdigest()[:16]}

    def to_kelvin(self, y_scaled: np.ndarray) -> np.ndarray:
        return self.scaler.inverse(y_scaled, feature=0)


def scored_ranges(bounds: Sequence[slice], config: WindowConfig, say: Spelling = PYTHON) -> list[tuple[int, int]]:
    """Per split, the first-target hours ``[lo, hi)`` (indices into the series) under the target-time rule; a part
    too short for the window or horizon is refused naming them as ``say`` spells them.

    A sample with first target hour ``j`` has inputs ``j - lead - window + 1 .. j - lead`` and targets
    ``j .. j + horizon - 1``; all its targets lie in the split of ``j``, its inputs may lie before it."""
    need = config.window + config.lead_hours - 1  # hours of inputs before the first possible target
    out = []
    for name, sl in zip(SPLITS, bounds):
        lo, hi = max(sl.start, need), sl.stop - config.horizon + 1
        if name == "val" and sl.stop == sl.start:  # no validation part (split dates equal): no samples
            lo = hi = sl.start
        elif hi <= lo:
            hours = sl.stop - sl.start
            if name == "train":
                raise ConfigError(f"{say('window', config.window)} (+ lead {config.lead_hours} h, horizon "
                                  f"{config.horizon} h) is longer than the training part ({hours} hours); use a "
                                  "shorter window or a longer time range")
            raise ConfigError(f"the {name} part has {hours} hours, fewer than the {say.key('horizon')} of "
                              f"{config.horizon}; use a shorter horizon or a longer time range")
        out.append((lo, hi))
    return out


def series_array(values, times) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """A (time,), (time, point) or (time, point, variable) array as float64 (time, point, variable),
    with its times, checked: one time per step, the steps one hour apart (windows, leads and horizons count
    steps as hours: across a gap a '1 h' lead would be longer), no missing (NaN) hour."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim in (1, 2):  # (time,) -> (time, 1, 1), (time, point) -> (time, point, 1)
        v = v.reshape(v.shape + (1,) * (3 - v.ndim))
    if v.ndim != 3:
        raise DataError(f"values must be (time,), (time, point) or (time, point, variable); got {v.shape}")
    times = pd.DatetimeIndex(times)
    if len(times) != v.shape[0]:
        raise DataError(f"{len(times)} times for {v.shape[0]} time steps")
    off = np.flatnonzero(np.asarray(times[1:] - times[:-1]) != np.timedelta64(1, "h"))
    if off.size:
        i = int(off[0])
        raise DataError(f"the series is not hourly: {times[i]} is followed by {times[i + 1]} "
                        f"({off.size} step{'s' if off.size != 1 else ''} other than 1 h); windows and leads count "
                        "hours, so pick a range without missing hours or a store of hourly data")
    if np.isnan(v).any():
        bad = times[np.isnan(v).any(axis=(1, 2))]
        raise DataError(f"the series has {len(bad)} missing (NaN) hours, first at {bad[0]}; pick a range with data")
    return v, times


def split_parts(times: pd.DatetimeIndex, config: WindowConfig) -> tuple[slice, slice, slice]:
    """The training, validation and test parts of ``times``: at ``config.split_dates`` when given, else
    by ``config.fractions``."""
    if config.split_dates is not None:
        return split_by_dates(times, *config.split_dates)
    return split_bounds(len(times), config.fractions)


def make_windows(values: np.ndarray, times: pd.DatetimeIndex | Sequence, config: WindowConfig = WindowConfig(), *,
                 features: Sequence[str] | None = None, points: Sequence[str] | None = None, keys: bool = False,
                 say: Spelling = PYTHON) -> Windows:
    """Split by target time, scale and window a (time,), (time, point) or (time, point, variable) array in kelvin.

    Feature 0 is the target. Each point is windowed on its own and the samples pooled, so one model serves all
    points; baselines are scored on exactly the same target samples. With ``keys``, ``x[split]`` holds each sample's
    (point, last input hour) as (N, 2) int64 and ``series`` the scaled inputs they index: the same samples, for a
    model that gathers windows itself (region mode). ``say``: how a refusal names the window settings."""
    config.validate(say)
    v, times = series_array(values, times)
    n_t, n_p, n_v = v.shape
    features = list(features) if features is not None else [config.target] + [f"var{i}" for i in range(1, n_v)]
    points = list(points) if points is not None else [f"point{i}" for i in range(n_p)]

    bounds = split_parts(times, config)
    ranges = scored_ranges(bounds, config, say)
    train_part, train_times = v[bounds[0]], times[bounds[0]]
    scaler = Scaler.fit(train_part.reshape(-1, n_v))
    W, L, H = config.window, config.lead_hours, config.horizon
    inputs = [scaler.transform(v)]  # (time, point, F): the variables, then the calendar and the cycle where on
    if config.calendar:
        inputs.append(np.broadcast_to(calendar_features(times)[:, None], (n_t, n_p, len(CALENDAR_FEATURES))))
        features = features + list(CALENDAR_FEATURES)
    if config.cycles:  # each hour's fitted cycle L hours later (at the last input hour: the target's), scaled as the target
        cycle = cycle_values(cycle_fit(train_part[:, :, 0], train_times), times + pd.Timedelta(hours=L))
        inputs.append(((cycle - scaler.mean[0]) / scaler.std[0])[:, :, None])
        features = features + [CYCLE_FEATURE]
    series = np.concatenate(inputs, axis=2)
    # the calendar inputs are already in [-1, 1] and the cycle is scaled: identity entries in the scaler
    extra = series.shape[2] - n_v
    scaler = Scaler(np.concatenate([scaler.mean, np.zeros(extra)]), np.concatenate([scaler.std, np.ones(extra)]))
    clim = [climatology_table(train_part[:, p, 0], train_times) for p in range(n_p)]

    xs, ys, tts, pidx, baselines, split_times, scored, predictions = {}, {}, {}, {}, {}, {}, {}, {}
    for name, sl, (lo, hi) in zip(SPLITS, bounds, ranges):
        if hi == lo:  # an empty part (no validation part): no samples, no baseline figures
            xs[name] = np.zeros((0, 2) if keys else (0, W, series.shape[2]), np.int64 if keys else np.float32)
            ys[name], tts[name] = np.zeros((0, H), np.float32), np.zeros(0, "datetime64[ns]")
            pidx[name] = np.zeros(0, np.int16)
            split_times[name], scored[name] = None, {"first": None, "last": None, "count": 0, "points": n_p, "samples": 0}
            predictions[name] = {"persistence": np.zeros((0, H)), "climatology": np.zeros((0, H))}
            baselines[name] = {b: {"rmse": None, "mae": None} for b in ("persistence", "climatology")}
            continue
        n = hi - lo  # samples per point; first target hours lo .. hi-1
        split_times[name] = (str(times[sl.start]), str(times[sl.stop - 1]))
        scored[name] = {"first": str(times[lo]), "last": str(times[hi - 1]), "count": n,
                        "points": n_p, "samples": n * n_p}
        # every point of a split shares its hours: the target times and their climatology cells
        # (day of year, hour) are looked up once per split, not per point
        tt = times[lo : hi - 1 + H]
        cell = (calendar_day(tt), tt.hour.to_numpy())
        cell_of = np.lib.stride_tricks.sliding_window_view(np.arange(len(tt)), H)  # (n, H) -> index into tt
        # one contiguous stretch of the series holds the inputs and targets of every sample of the split
        span = slice(lo - L - W + 1, hi - 1 + H)
        px, py, pers, clim_pred, truth = [], [], [], [], []
        for p in range(n_p):
            if keys:  # the window ending at hour lo - L + i, and its targets from hour lo + i on
                x = np.stack([np.full(n, p), np.arange(lo - L, hi - L)], axis=1)
                y = np.lib.stride_tricks.sliding_window_view(series[lo : hi - 1 + H, p, 0], H)
            else:
                x, y = sliding_windows(series[span, p, :], W, L, H)
            raw = v[:, p, 0]
            truth.append(np.lib.stride_tricks.sliding_window_view(raw[lo : hi - 1 + H], H))
            pers.append(np.repeat(raw[lo - L : hi - L, None], H, axis=1))
            clim_pred.append(clim[p][cell][cell_of])
            px.append(x if keys else x.astype(np.float32))
            py.append(y.astype(np.float32))
        xs[name], ys[name] = np.concatenate(px), np.concatenate(py)
        tts[name] = np.tile(times[lo:hi].to_numpy(), n_p)
        pidx[name] = np.repeat(np.arange(n_p, dtype=np.int16), n)
        truth_k = np.concatenate(truth)
        predictions[name] = {"persistence": np.concatenate(pers), "climatology": np.concatenate(clim_pred)}
        baselines[name] = {b: error_metrics(pred, truth_k) for b, pred in predictions[name].items()}
    return Windows(config=config, x=xs, y=ys, target_times=tts, point_index=pidx, scaler=scaler,
                   baselines=baselines, features=features, points=points, split_times=split_times, scored=scored,
                   climatology=climatology_statement(train_times), predictions=predictions,
                   series=series.astype(np.float32) if keys else None)


def windows_from_dataset(ds, config: WindowConfig = WindowConfig(), *, keys: bool = False,
                         say: Spelling = PYTHON) -> Windows:
    """``make_windows`` for a point Dataset from ``lstmnb.era5.extract`` (dims time, point)."""
    if config.target not in ds.data_vars:
        raise ConfigError(f"target variable {config.target!r} is not in the data; it has {sorted(ds.data_vars)}")
    names = [config.target] + [v for v in ds.data_vars if v != config.target]
    if "point" not in ds.dims:
        raise DataError(f"windows need a point series (dims time, point); got dims {dict(ds.sizes)}")
    arr = np.stack([ds[n].transpose("time", "point").values for n in names], axis=-1)
    if arr.shape[0] == 0:
        raise DataError("the selection is empty: no hours in the requested time range")
    w = make_windows(arr, ds["time"].values, config, features=names, points=[str(p) for p in ds["point"].values],
                     keys=keys, say=say)
    if "requested_latitude" in ds.coords:  # points (not a box's cells): as the user gave them
        w.requested = [f"{float(a):g},{float(b):g}" for a, b in
                       zip(ds["requested_latitude"].values, ds["requested_longitude"].values)]
    return w
