"""Data for the from-scratch LSTM: the airline passengers series and an ERA5 point series, both by the project's rules
(docs/architecture.md): chronological train/val/test splits, no window crossing a split boundary, scaling statistics
from the training part only. Airline passengers: monthly international airline passengers (thousands), 1949-01 to
1960-12, 144 values (Box, Jenkins and Reinsel, *Time Series Analysis: Forecasting and Control*, series G). The series
and its seasonal swing grow, so a model trained on 1949-1957 levels would have to extrapolate; hence Box and Jenkins'
remedy: the LSTM sees month-on-month changes of log passengers, turned back into passengers for the error in units."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..windows import SPLITS, Scaler, sliding_windows, split_bounds

TRANSFORMS = ("none", "logdiff")
DATASETS = ("airline", "era5")
AIRLINE_MONTHS = 144  # 1949-01 .. 1960-12; the LSTM sees the 143 changes between them


def default_window(name: str) -> int:
    """Input steps per sample when none is asked for: 24 hours for 'era5', else 12 months."""
    return 24 if name == "era5" else 12


def airline_passengers() -> pd.Series:
    """The ``AIRLINE_MONTHS`` monthly airline passenger totals (thousands), indexed by month start."""
    with resources.files("lstmnb").joinpath("datasets/airline_passengers.csv").open() as fh:
        df = pd.read_csv(fh, comment="#")
    # the index keeps the column's name, "month"
    return pd.Series(df["passengers"].to_numpy(dtype=np.float64), index=pd.to_datetime(df["month"]), name="passengers")


@dataclass
class ScratchData:
    """Scaled windows per split, and what is needed to speak in the data's own units."""

    name: str
    units: str
    X: dict[str, np.ndarray]  # split -> (N, window, 1), scaled
    y: dict[str, np.ndarray]  # split -> (N, 1), scaled
    truth: dict[str, np.ndarray]  # split -> (N,) target in units
    baselines: dict[str, dict[str, np.ndarray]]  # split -> baseline name -> (N,) prediction in units
    scaler: Scaler
    transform: str = "none"
    info: dict[str, Any] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        return {s: int(self.X[s].shape[0]) for s in SPLITS}

    def to_units(self, pred_scaled: np.ndarray, split: str) -> np.ndarray:
        """Model outputs (N, 1) in scaled units -> predictions (N,) in the data's units."""
        z = self.scaler.inverse(np.asarray(pred_scaled, dtype=np.float64)[:, 0])
        if self.transform == "logdiff":  # a change of log value, applied to the last observed value
            return self.baselines[split]["persistence"] * np.exp(z)
        return z


def check_series(values: np.ndarray, name: str = "series") -> np.ndarray:
    """A finite 1-D float64 array, or a DataError that says what is wrong and where."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise DataError(f"{name} must be one-dimensional (time,); got shape {v.shape}")
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        raise DataError(f"{name} has {bad.size} missing (NaN or inf) values, first at position {bad[0]}; "
                        "fill or drop them before training")
    return v


def prepare_series(values: np.ndarray, *, window: int, period: int, transform: str = "none",
                   fractions: tuple[float, float, float] = (0.7, 0.15, 0.15), name: str = "series", units: str = ""
                   ) -> ScratchData:
    """Split, scale and window one series for next-step forecasting. ``period`` is the seasonal period in steps (12
    months, 24 hours): the seasonal-naive baseline predicts the value one period before the target, persistence the
    last observed value. ``transform='logdiff'`` models changes of log values (positive series only)."""
    if transform not in TRANSFORMS:
        raise ConfigError(f"transform={transform!r} is not known; choose one of {TRANSFORMS}")
    v = check_series(values, name)
    if transform == "logdiff" and (v <= 0).any():
        raise DataError(f"transform='logdiff' needs a positive series; {name} has values <= 0")
    z, offset = (np.diff(np.log(v)), 1) if transform == "logdiff" else (v, 0)
    bounds = split_bounds(len(z), fractions)
    scaler = Scaler.fit(z[bounds[0]])
    zs = scaler.transform(z)
    X, y, truth, baselines = {}, {}, {}, {}
    for split, sl in zip(SPLITS, bounds):
        X[split], y[split] = sliding_windows(zs[sl], window)
        target = np.arange(sl.start + window, sl.stop) + offset  # index in ``v`` of each target y[split]
        truth[split] = v[target]
        seasonal = np.where(target >= period, v[np.maximum(target - period, 0)], np.nan)
        baselines[split] = {"persistence": v[target - 1], "seasonal_naive": seasonal}
    info = {"source": name, "length": int(len(v)), "window": int(window), "transform": transform,
            "period": int(period), "fractions": list(fractions)}
    return ScratchData(name, units, X, y, truth, baselines, scaler, transform, info)


def load_airline(window: int = 12) -> ScratchData:
    """Airline passengers, log-differenced, windows of ``window`` months, seasonal-naive baseline."""
    series = airline_passengers()
    data = prepare_series(series.to_numpy(), window=window, period=12, transform="logdiff",
                          name="airline_passengers", units="thousand passengers")
    data.info.update(time_range=[str(series.index[0].date()), str(series.index[-1].date())],
                     citation="Box, Jenkins and Reinsel, Time Series Analysis, series G")
    return data


def load_era5(window: int = 24, hours: int = 24 * 42) -> ScratchData:
    """The first ``hours`` of 2 m temperature (K) at the first point of the default ERA5 request, from the core
    pipeline (``lstmnb.data.extract``: the study's real ERA5 shipped with lstmnb). Baselines: persistence (last hour)
    and the same hour one day earlier; with a few weeks of data a training climatology would copy them."""
    from .. import data

    end = pd.Timestamp(data.Request().start) + pd.Timedelta(hours=hours)  # only the days needed (the last inclusive)
    ds = data.extract(data.Request(end=end.strftime("%Y-%m-%d")), progress=False)
    da = ds["2m_temperature"].isel(time=slice(0, hours))
    if "point" in da.dims:
        da = da.isel(point=0)
    if da.sizes["time"] < hours:
        raise ConfigError(f"hours={hours} asked for, but the default request has {da.sizes['time']} hours")
    data = prepare_series(da.values, window=window, period=24, name="era5_2m_temperature", units="K")
    times = pd.DatetimeIndex(da["time"].values)
    data.info.update(time_range=[str(times[0]), str(times[-1])], point=0)
    return data


def load_data(name: str, window: int, hours: int = 24 * 42) -> ScratchData:
    """The dataset ``name`` (one of DATASETS) with windows of ``window`` steps."""
    if name == "airline":
        return load_airline(window)
    if name == "era5":
        return load_era5(window, hours)
    raise ConfigError(f"data={name!r} is not known; choose one of {DATASETS}")
