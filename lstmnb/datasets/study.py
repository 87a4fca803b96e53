"""The study's real ERA5: hourly 2 m temperature at its two points, shipped inside lstmnb, as a store.

The values are the ones the replicated study trained and tested on (its public repository's ``subset_temperature.csv``,
which its notebook extracted from ARCO-ERA5 v2): 40N 280E (land, the Appalachians) and 20N 280E (open sea between Cuba
and Jamaica), every hour from 2020-01-01 00:00 to 2021-06-30 23:00 UTC, float32 kelvin as the store holds them (81 KB
compressed, ``era5_t2m_study_points.npz`` beside this module, with its notice). On first use they become a store in the
ARCO-ERA5 layout in the user cache (``arco_layout``), checked against the SHA-256 of the values, so every run reads them
through the path the cloud store takes. It is the default source of the point experiments (``--source study``).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..rules import PYTHON, Spelling, cli_text
from .arco_layout import built_store, write_store

STUDY = "study"  # the source name
STUDY_NAME = "study-era5-t2m-v1.zarr"  # the store's folder in the user cache
STUDY_FILE = "era5_t2m_study_points.npz"
STUDY_SHA256 = "78f2275d9b29976ecebc7305f9e7e2ee4b7c97b6e7a0a725625f9a93c57a3cc7"  # of the (time, point) float32 values
STUDY_POINTS: tuple[tuple[float, float], ...] = ((40.0, 280.0), (20.0, 280.0))
STUDY_TIMES = ("2020-01-01T00", "2021-06-30T23")
STUDY_TEST_START = "2021-01-01"  # the study trained on 2020 and tested on 2021-01..06
STUDY_VARIABLES = ("2m_temperature",)
ATTRIBUTION = ("Contains modified Copernicus Climate Change Service information 2020-2021. Neither the European "
               "Commission nor ECMWF is responsible for any use that may be made of the Copernicus information or "
               "data it contains.")
CITATION = ("Hersbach et al. (2020), The ERA5 global reanalysis, Q. J. R. Meteorol. Soc. 146, 1999-2049, "
            "doi:10.1002/qj.3803")
DESCRIPTION = "real ERA5 at the study's two points (40N 280E land, 20N 280E sea), 2020-01-01..2021-06-30"


@lru_cache(maxsize=1)
def study_values() -> tuple[pd.DatetimeIndex, np.ndarray, np.ndarray, np.ndarray]:
    """(times, latitude, longitude, values (time, point) float32) from the file shipped with lstmnb, checked."""
    try:
        with resources.files(__package__).joinpath(STUDY_FILE).open("rb") as fh:
            with np.load(fh) as npz:
                values, lat, lon = npz["t2m"], npz["latitude"], npz["longitude"]
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"the study's ERA5 file {STUDY_FILE} shipped with lstmnb cannot be read ({exc}); reinstall "
                        "lstmnb") from None
    values = np.ascontiguousarray(values, dtype="<f4")
    if hashlib.sha256(values.tobytes()).hexdigest() != STUDY_SHA256:
        raise DataError(f"the study's ERA5 file {STUDY_FILE} shipped with lstmnb does not match its checksum; "
                        "reinstall lstmnb")
    return pd.date_range(*STUDY_TIMES, freq="h"), lat.astype(np.float32), lon.astype(np.float32), values


def write_study(path: str | Path) -> Path:
    """Write the study's values at ``path`` as a store in the ARCO layout: each point its own latitude row at
    longitude 280 (the two rows hold the points; no other cells)."""
    times, lat, lon, values = study_values()
    if len(set(lon.tolist())) != 1:
        raise DataError("the study's points are expected at one longitude")
    attrs = {"title": "ERA5 2 m temperature at the study's two points (real data)",
             "source": "ECMWF ERA5 via ARCO-ERA5 (gs://gcp-public-data-arco-era5), as the study extracted it",
             "attribution": ATTRIBUTION, "citation": CITATION}
    field = values[:, :, None]  # (time, latitude, longitude): latitude 40 then 20, as ARCO orders them
    return write_store(path, times, lat, lon[:1], {"2m_temperature": field}, attrs,
                       marker={"values_sha256": STUDY_SHA256})


def study_store() -> Path:
    """The study's store in the user cache, built on first use (about a second) and checked."""
    return built_store(STUDY_NAME, write_study, "the study's ERA5 store (real data)")


def check_study_request(points, box, start: pd.Timestamp, end: pd.Timestamp, variables, say: Spelling = PYTHON) -> None:
    """A request the study's data cannot serve (another point, a box, hours outside its range, another
    variable) fails here in one line naming what it holds and where more is, each source spelled by ``say``."""
    holds = (f"{say('source', STUDY)} holds {DESCRIPTION} (2m_temperature only); for other points, boxes or dates use "
             f"{say('source', 'arco-v3')} (the public ERA5 in the cloud) or {say('source', 'sample')} (synthetic, "
             "19-41N 279-281.75E)")
    if box is not None:
        raise ConfigError(f"a box needs an area; {holds}")
    other = [tuple(p) for p in points if not any(abs(float(p[0]) - la) < 1e-6 and abs(float(p[1]) % 360.0 - lo) < 1e-6
                                                 for la, lo in STUDY_POINTS)]
    if other:
        raise ConfigError(f"{say.prefix}{say.key('points')} {cli_text(other[0])}: not in the study's data; {holds}")
    lo, hi = (pd.Timestamp(t) for t in STUDY_TIMES)
    if start < lo or end > hi:
        raise ConfigError(f"time range {start:%Y-%m-%dT%H}..{end:%Y-%m-%dT%H} is outside the study's data; {holds}")
    if unknown := [v for v in variables if v not in STUDY_VARIABLES]:
        raise ConfigError(f"{say.prefix}{say.key('variables')} {cli_text(unknown[0])}: not in the study's data; {holds}")
