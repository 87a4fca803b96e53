"""Chronological splits, scaling fitted on train only, vectorised sliding windows, and baselines.

Rules (DESIGN.md, "Training rules"): splits are train, then validation, then test in time; no window
crosses a split boundary; scaling statistics come from the training part only; metrics are in kelvin;
every model result is shown beside persistence and climatology.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from .errors import ConfigError, DataError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class WindowConfig:
    """How series become samples: ``window`` past hours predict ``horizon`` hours from ``lead_hours`` on."""

    window: int = 24
    lead_hours: int = 1
    horizon: int = 1
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    split_dates: tuple[str, str] | None = None  # (validation start, test start); overrides fractions
    calendar: bool = False  # add hour-of-day and day-of-year as sin/cos inputs
    target: str = "2m_temperature"

    def validate(self) -> None:
        for name in ("window", "lead_hours", "horizon"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive whole number of hours (>= 1)")
        if self.split_dates is None:
            fr = tuple(float(f) for f in self.fractions)
            if len(fr) != 3 or min(fr) <= 0 or abs(sum(fr) - 1) > 1e-6:
                raise ConfigError(
                    f"fractions={self.fractions!r} must be three positive numbers (train, val, test) summing to 1"
                )


def split_bounds(n: int, fractions: Sequence[float] = (0.7, 0.15, 0.15)) -> tuple[slice, slice, slice]:
    """Chronological train/val/test slices of ``n`` time steps by fraction (train first)."""
    fr = np.asarray(fractions, dtype=float)
    if fr.shape != (3,) or (fr <= 0).any() or abs(fr.sum() - 1) > 1e-6:
        raise ConfigError(f"fractions={tuple(fractions)!r} must be three positive numbers summing to 1")
    a = int(round(n * fr[0]))
    b = int(round(n * (fr[0] + fr[1])))
    return slice(0, a), slice(a, b), slice(b, n)


def split_by_dates(times: pd.DatetimeIndex, val_start: str, test_start: str) -> tuple[slice, slice, slice]:
    """Chronological slices with validation from ``val_start`` and test from ``test_start`` on."""
    try:
        v, t = pd.Timestamp(val_start), pd.Timestamp(test_start)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"split dates {val_start!r}, {test_start!r} are not dates: {exc}") from None
    if not times[0] < v < t <= times[-1]:
        raise ConfigError(
            f"split dates must satisfy {times[0]} < validation start ({v}) < test start ({t}) <= {times[-1]}"
        )
    a = int(times.searchsorted(v))
    b = int(times.searchsorted(t))
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
        mean = v.mean(axis=0)
        std = v.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        return cls(mean=mean, std=std)

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Standardise ``x`` whose last axis holds the features (a 1-D series is feature 0)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1 or x.shape[-1] != self.mean.size:
            return (x - self.mean[0]) / self.std[0]
        return (x - self.mean) / self.std

    def inverse(self, x: np.ndarray, feature: int = 0) -> np.ndarray:
        """Back to physical units for values of one feature (default the target, feature 0)."""
        return np.asarray(x) * self.std.reshape(-1)[feature] + self.mean.reshape(-1)[feature]


def sliding_windows(
    values: np.ndarray, window: int, lead_hours: int = 1, horizon: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``X[i] = values[i:i+window]`` and targets ``y[i, k] = values[i+window-1+lead_hours+k, 0]``.

    ``values`` is (T,) or (T, F); the target is feature 0. Built from strided views (no Python loop
    over samples), then copied once into contiguous arrays. Returns X (N, window, F), y (N, horizon).
    """
    v = np.asarray(values)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise DataError(f"values must be (time,) or (time, features); got shape {v.shape}")
    span = window + lead_hours - 1 + horizon
    n = v.shape[0] - span + 1
    if n <= 0:
        raise ConfigError(
            f"window={window} h + lead_hours={lead_hours} + horizon={horizon} needs at least {span} hours; "
            f"this part of the series has {v.shape[0]}"
        )
    xs = np.lib.stride_tricks.sliding_window_view(v[: n + window - 1], window, axis=0)  # (N, F, window)
    x = np.ascontiguousarray(xs.transpose(0, 2, 1))
    first = window - 1 + lead_hours
    ys = np.lib.stride_tricks.sliding_window_view(v[first : first + n + horizon - 1, 0], horizon)
    return x, np.ascontiguousarray(ys)


def calendar_features(times: pd.DatetimeIndex) -> np.ndarray:
    """Hour of day and day of year as sin/cos pairs, shape (T, 4)."""
    hour = times.hour.to_numpy() + times.minute.to_numpy() / 60.0
    doy = times.day_of_year.to_numpy() - 1 + hour / 24.0
    h = 2 * np.pi * hour / 24.0
    d = 2 * np.pi * doy / 365.25
    return np.stack([np.sin(h), np.cos(h), np.sin(d), np.cos(d)], axis=1)


def climatology_table(values: np.ndarray, times: pd.DatetimeIndex, smooth_days: int = 7) -> np.ndarray:
    """Hour-of-day x day-of-year mean (366 x 24) of one series, averaged over +-``smooth_days`` days.

    With one or two years of training data each (day, hour) cell holds one or two values; pooling a
    window of neighbouring days (circular in the year) gives a climatology that is a mean, not a copy
    of last year's weather. Cells with no data at all fall back to that hour's mean.
    """
    doy = times.day_of_year.to_numpy() - 1
    hour = times.hour.to_numpy()
    total = np.zeros((366, 24))
    count = np.zeros((366, 24))
    np.add.at(total, (doy, hour), values)
    np.add.at(count, (doy, hour), 1)
    if smooth_days > 0:
        kernel_days = np.arange(-smooth_days, smooth_days + 1)
        total = sum(np.roll(total, k, axis=0) for k in kernel_days)
        count = sum(np.roll(count, k, axis=0) for k in kernel_days)
    hour_mean = np.bincount(hour, weights=values, minlength=24) / np.maximum(np.bincount(hour, minlength=24), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        table = np.where(count > 0, total / np.maximum(count, 1), hour_mean[None, :])
    return table


def error_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """RMSE and MAE (same units as the inputs) over all samples and horizon steps."""
    err = np.asarray(pred, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    return {"rmse": float(np.sqrt(np.mean(err**2))), "mae": float(np.mean(np.abs(err)))}


@dataclass
class Windows:
    """Model-ready samples (scaled, float32) per split, plus what is needed to speak in kelvin."""

    config: WindowConfig
    x: dict[str, np.ndarray]  # split -> (N, window, F)
    y: dict[str, np.ndarray]  # split -> (N, horizon), scaled target
    target_times: dict[str, np.ndarray]  # split -> (N,) time of the first target hour
    point_index: dict[str, np.ndarray]  # split -> (N,) which point each sample comes from
    scaler: Scaler
    baselines: dict[str, dict[str, dict[str, float]]]  # split -> {"persistence": {rmse, mae}, ...}
    features: list[str]
    points: list[str]
    split_times: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return self.x["train"].shape[-1]

    def sizes(self) -> dict[str, int]:
        return {s: int(self.x[s].shape[0]) for s in SPLITS}

    def to_kelvin(self, y_scaled: np.ndarray) -> np.ndarray:
        return self.scaler.inverse(y_scaled, feature=0)


def make_windows(
    values: np.ndarray,
    times: pd.DatetimeIndex | Sequence,
    config: WindowConfig = WindowConfig(),
    *,
    features: Sequence[str] | None = None,
    points: Sequence[str] | None = None,
) -> Windows:
    """Split, scale and window a (time,), (time, point) or (time, point, variable) array in kelvin.

    Feature 0 is the target. Each point is windowed on its own and the samples are pooled, so one
    model serves all points. Baselines are computed on exactly the same target samples.
    """
    config.validate()
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None, None]
    elif v.ndim == 2:
        v = v[:, :, None]
    if v.ndim != 3:
        raise DataError(f"values must be (time,), (time, point) or (time, point, variable); got {v.shape}")
    times = pd.DatetimeIndex(times)
    if len(times) != v.shape[0]:
        raise DataError(f"{len(times)} times for {v.shape[0]} time steps")
    if np.isnan(v).any():
        bad = times[np.isnan(v).any(axis=(1, 2))]
        raise DataError(f"the series has {len(bad)} missing (NaN) hours, first at {bad[0]}; pick a range with data")
    n_t, n_p, n_v = v.shape
    features = list(features) if features is not None else [config.target] + [f"var{i}" for i in range(1, n_v)]
    points = list(points) if points is not None else [f"point{i}" for i in range(n_p)]

    if config.split_dates is not None:
        bounds = split_by_dates(times, *config.split_dates)
    else:
        bounds = split_bounds(n_t, config.fractions)
    train_part = v[bounds[0]]
    span = config.window + config.lead_hours - 1 + config.horizon
    if train_part.shape[0] < span:
        raise ConfigError(
            f"window={config.window} h (+ lead {config.lead_hours} h, horizon {config.horizon} h) is longer than "
            f"the training part ({train_part.shape[0]} hours); use a shorter window or a longer time range"
        )
    scaler = Scaler.fit(train_part.reshape(-1, n_v))
    scaled = scaler.transform(v)
    cal = calendar_features(times) if config.calendar else None
    if cal is not None:
        features = features + ["hour_sin", "hour_cos", "doy_sin", "doy_cos"]
        # calendar inputs are already in [-1, 1]; extend the scaler with identity entries
        scaler = Scaler(np.concatenate([scaler.mean, np.zeros(4)]), np.concatenate([scaler.std, np.ones(4)]))

    clim = [climatology_table(train_part[:, p, 0], times[bounds[0]]) for p in range(n_p)]

    xs: dict[str, np.ndarray] = {}
    ys: dict[str, np.ndarray] = {}
    tts: dict[str, np.ndarray] = {}
    pidx: dict[str, np.ndarray] = {}
    baselines: dict[str, dict[str, dict[str, float]]] = {}
    split_times: dict[str, tuple[str, str]] = {}
    first = config.window - 1 + config.lead_hours
    for name, sl in zip(SPLITS, bounds):
        t_part = times[sl]
        if len(t_part) < span:
            raise ConfigError(
                f"the {name} part has {len(t_part)} hours, fewer than window + lead + horizon = {span}; "
                f"use a shorter window or a longer time range"
            )
        split_times[name] = (str(t_part[0]), str(t_part[-1]))
        # every point of a split shares its hours: the sample count, the target times and their
        # climatology lookups (day of year, hour) are computed once per split, not per point
        n = len(t_part) - span + 1  # samples per point, as sliding_windows makes them
        ttimes = np.lib.stride_tricks.sliding_window_view(np.arange(first, first + n + config.horizon - 1),
                                                          config.horizon)
        tt = t_part[ttimes.reshape(-1)]
        tt_doy, tt_hour = tt.day_of_year.to_numpy() - 1, tt.hour.to_numpy()
        first_target_times = t_part[first : first + n].to_numpy()
        px, py, ppers, pclim, ptimes, pid = [], [], [], [], [], []
        for p in range(n_p):
            part = scaled[sl, p, :]
            if cal is not None:
                part = np.concatenate([part, cal[sl]], axis=1)
            x, y = sliding_windows(part, config.window, config.lead_hours, config.horizon)
            raw = v[sl, p, 0]
            target_k = np.lib.stride_tricks.sliding_window_view(raw[first : first + n + config.horizon - 1], config.horizon)
            last_k = raw[config.window - 1 : config.window - 1 + n]
            ppers.append((np.repeat(last_k[:, None], config.horizon, axis=1), target_k))
            clim_pred = clim[p][tt_doy, tt_hour].reshape(n, config.horizon)
            pclim.append((clim_pred, target_k))
            px.append(x.astype(np.float32))
            py.append(y.astype(np.float32))
            ptimes.append(first_target_times)
            pid.append(np.full(n, p, dtype=np.int16))
        xs[name] = np.concatenate(px)
        ys[name] = np.concatenate(py)
        tts[name] = np.concatenate(ptimes)
        pidx[name] = np.concatenate(pid)
        baselines[name] = {
            "persistence": error_metrics(np.concatenate([a for a, _ in ppers]), np.concatenate([b for _, b in ppers])),
            "climatology": error_metrics(np.concatenate([a for a, _ in pclim]), np.concatenate([b for _, b in pclim])),
        }
    return Windows(
        config=config, x=xs, y=ys, target_times=tts, point_index=pidx, scaler=scaler,
        baselines=baselines, features=features, points=points, split_times=split_times,
    )


def windows_from_dataset(ds, config: WindowConfig = WindowConfig()) -> Windows:
    """``make_windows`` for a point Dataset from ``lstmnb.era5.extract`` (dims time, point)."""
    if config.target not in ds.data_vars:
        raise ConfigError(
            f"target variable {config.target!r} is not in the data; it has {sorted(ds.data_vars)}"
        )
    names = [config.target] + [v for v in ds.data_vars if v != config.target]
    if "point" not in ds.dims:
        raise DataError(f"windows need a point series (dims time, point); got dims {dict(ds.sizes)}")
    arr = np.stack([ds[n].transpose("time", "point").values for n in names], axis=-1)
    if arr.shape[0] == 0:
        raise DataError("the selection is empty: no hours in the requested time range")
    return make_windows(
        arr, ds["time"].values, config, features=names, points=[str(p) for p in ds["point"].values]
    )
