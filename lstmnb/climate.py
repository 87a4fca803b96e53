"""What the weather of a place is expected to be at a time of day and year, from the training part only: the
climatology baseline (``climatology_table``, of the kind ``climatology_kind`` says) and the fitted cycles that the
forecaster may take as an input (``cycle_fit``/``cycle_values``): a few harmonics of the year and the day (and their
product: a diurnal cycle that changes with the season), fitted by least squares. Unlike the day-of-year table, which
with one year of training holds that year's weather smoothed over two weeks, the fit has too few degrees of freedom
to carry the training part's weather, so what a network learns from it on the training part it will also find at
forecast time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

SMOOTH_DAYS = 7  # the day-of-year climatology pools +-7 days around each day
CLIMATOLOGIES = {  # what each kind of climatology is, as records and outputs state it
    "day-of-year": f"hour-of-day x day-of-year mean of the training part, smoothed over +-{SMOOTH_DAYS} days",
    "hour-of-day": "hour-of-day mean of the training part",
}
YEAR_DAYS = 365  # the climatology's rows: the days of a year without 29 February (``calendar_day``)


def calendar_day(times: pd.DatetimeIndex) -> np.ndarray:
    """Each time's row in the climatology: its day of a 365-day year (0 = 1 January, 364 = 31 December), so that a
    date has the same row in every year: 29 February shares 28 February's row, and a leap year's days from 1 March on
    are one less than their day of the year (by the plain day of the year, 1 March 2021 would read the row of 29
    February 2020, and 31 December of a leap year a row no other year fills)."""
    times = pd.DatetimeIndex(times)
    doy = times.day_of_year.to_numpy() - 1
    return doy - (times.is_leap_year & (doy >= 59))  # 59: 29 February of a leap year


def training_days(times: pd.DatetimeIndex) -> float:
    """Days from the first to the last hour of ``times``, plus that last hour."""
    times = pd.DatetimeIndex(times)
    return float((times[-1] - times[0] + pd.Timedelta(hours=1)) / pd.Timedelta(days=1)) if len(times) else 0.0


def covers_a_year(times: pd.DatetimeIndex) -> bool:
    """Whether a training part spans a year: the day-of-year climatology and the year's fitted harmonics need it."""
    return training_days(times) >= 365


def climatology_kind(train_times: pd.DatetimeIndex) -> str:
    """The standard climatology for a training part: ``day-of-year`` where it covers a year, else ``hour-of-day`` (a
    day-of-year table from less than a year leaves most days to a fallback, weaker than the hour-of-day mean)."""
    return "day-of-year" if covers_a_year(train_times) else "hour-of-day"


def climatology_table(values: np.ndarray, times: pd.DatetimeIndex, smooth_days: int = SMOOTH_DAYS) -> np.ndarray:
    """The climatology (365 days x 24 hours, a row per ``calendar_day``) of one series' training part, of the kind
    ``climatology_kind`` gives: with a year of data the hour-of-day x day-of-year mean averaged over +-``smooth_days``
    days (circular in the year; pooling neighbouring days makes it a mean, not a copy of last year's weather),
    otherwise the hour-of-day mean on every day."""
    times = pd.DatetimeIndex(times)
    values = np.asarray(values, dtype=np.float64)
    hour = times.hour.to_numpy()
    hour_mean = np.bincount(hour, weights=values, minlength=24) / np.maximum(np.bincount(hour, minlength=24), 1)
    if climatology_kind(times) == "hour-of-day":
        return np.broadcast_to(hour_mean, (YEAR_DAYS, 24)).copy()
    cell = (calendar_day(times), hour)
    total, count = np.zeros((YEAR_DAYS, 24)), np.zeros((YEAR_DAYS, 24))
    np.add.at(total, cell, values)
    np.add.at(count, cell, 1)
    days = np.arange(-smooth_days, smooth_days + 1)  # each cell pooled with its neighbours, circular in the year
    total, count = (sum(np.roll(a, k, axis=0) for k in days) for a in (total, count))
    return np.where(count > 0, total / np.maximum(count, 1), hour_mean[None, :])  # a year leaves no cell empty


def climatology_statement(train_times: pd.DatetimeIndex) -> dict[str, Any]:
    """Which climatology a run's baseline is, for the record and the one line a command prints."""
    kind, days = climatology_kind(train_times), training_days(train_times)
    why = "a year or more of training data" if kind == "day-of-year" else "less than a year of training data"
    return {"kind": kind, "description": CLIMATOLOGIES[kind], "training_days": round(days, 2),
            "line": f"climatology: {CLIMATOLOGIES[kind]} (the training part covers {days:.1f} days: {why})"}


def calendar_features(times: pd.DatetimeIndex) -> np.ndarray:
    """Hour of day and day of year as sin/cos pairs (T, 4): the calendar inputs, the fitted cycles' first harmonics."""
    return _harmonics(times)[:, [2, 1, 4, 3]]


def _harmonics(times: pd.DatetimeIndex, annual: bool = True) -> np.ndarray:
    """Regressors of the fitted cycles at ``times``: a constant and two harmonics of the day (5 columns);
    with ``annual`` also two harmonics of the year and the day's first harmonic times the year's (a diurnal
    cycle whose size follows the season; 13 columns)."""
    times = pd.DatetimeIndex(times)
    hour = times.hour.to_numpy() + times.minute.to_numpy() / 60.0
    year = 2 * np.pi * (times.day_of_year.to_numpy() - 1 + hour / 24.0) / 365.25
    day = 2 * np.pi * hour / 24.0
    cols = [np.ones(len(times))]
    for k in (1, 2):
        cols += [np.cos(k * day), np.sin(k * day)] + ([np.cos(k * year), np.sin(k * year)] if annual else [])
    if annual:
        cols += [a * b for a in (np.cos(day), np.sin(day)) for b in (np.cos(year), np.sin(year))]
    return np.stack(cols, axis=1)


def cycle_fit(values: np.ndarray, times: pd.DatetimeIndex) -> np.ndarray:
    """Coefficients (13 or 5, points) of the fitted cycles of ``values`` (time,) or (time, points) at
    ``times``. The year's harmonics only where ``times`` cover a year: fitted to a few weeks they follow
    those weeks' weather and, carried months ahead, leave any range the network was trained on."""
    v = np.asarray(values, dtype=np.float64)
    return np.linalg.lstsq(_harmonics(times, covers_a_year(times)), v.reshape(len(v), -1), rcond=None)[0]


def cycle_values(coef: np.ndarray, times: pd.DatetimeIndex) -> np.ndarray:
    """The fitted cycles (time, points) with coefficients ``coef`` (``cycle_fit``) at ``times``."""
    return _harmonics(times, annual=coef.shape[0] > 5) @ coef
