"""The embedded sample's weather: synthetic hourly 2 m temperature and surface pressure on a lat/lon grid,
as hard for persistence as real mid-latitude weather (see ``lstmnb.datasets.sample`` for what it contains and
why). Deterministic for a seed; ``sample`` writes the fields into the ARCO-ERA5 layout."""

from __future__ import annotations

import numpy as np
import pandas as pd

KM_PER_DEG = 111.2  # km per degree of latitude
_TRACK_DT = 0.25  # hours: time step of the air-mass tracks, which each cell reads with its own delay
# where the fronts go, in degrees counter-clockwise from east: each track draws its heading from this range,
# east-south-east to south-east (region mode splits cells by it: those the weather reaches first or last)
FRONT_HEADINGS_DEG = (-45.0, -15.0)
COAST_LON = 281.125  # degrees east: the sample's coast; east of it is sea
COAST_WIDTH = 0.2  # degrees: how far out from the coast the land still shows in the air over the sea
SEA_LAG_DAYS = 35.0  # the water's seasonal cycle lags the land's
SEA_SMOOTH_HOURS = 12.0  # air-mass changes over the sea are smoothed over about half a day


def _smooth_noise(rng: np.random.Generator, n_time: int, shape: tuple[int, ...], tau_hours: float,
                  smooth_hours: float = 0.0) -> np.ndarray:
    """Unit-variance red noise along axis 0 (e-folding ``tau_hours``), low-passed once more over
    ``smooth_hours``: smooth from hour to hour, as temperature is, rather than kinked like a random walk."""
    phi = np.exp(-1.0 / tau_hours)
    psi = np.exp(-1.0 / smooth_hours) if smooth_hours > 0 else 0.0
    shocks = rng.standard_normal((n_time, *shape)) * np.sqrt(1.0 - phi**2)
    out = np.empty((n_time, *shape))
    x = rng.standard_normal(shape)
    y = x.copy()
    for t in range(n_time):  # sequential by nature; vectorised over the series, so fast enough
        x = phi * x + shocks[t]
        y = psi * y + (1.0 - psi) * x
        out[t] = y
    return out / max(float(out.std()), 1e-12)


def _step(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(x))


def _regime_track(rng: np.random.Generator, t0: float, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The weather of one air-mass track at its reference point on ``n`` steps of ``_TRACK_DT`` hours from hour ``t0``:
    temperature anomaly (unit variance), cloudiness (a unit-variance index; positive is overcast), pressure troughs.
    Regimes last days (gamma distributed, mean 60 h) with independent temperature levels; a change to a colder one is a
    cold front (tanh width about 1 h), to a warmer one a warm front (width 3-8 h). Each regime has its own cloud cover,
    mostly clear or mostly overcast, arriving a few hours before the front, with a cloud band and a pressure trough at
    the front. Cloudiness is an index, not a cover fraction, so that blending tracks between latitudes does not turn
    clear and overcast days into half-cloudy ones."""
    t = t0 + _TRACK_DT * np.arange(n)
    t_k = t0 + np.cumsum(rng.gamma(2.5, 24.0, size=int(n * _TRACK_DT / 30) + 10))
    t_k = t_k[t_k < t[-1]]
    k = len(t_k)
    level, cover = rng.standard_normal(k + 1), rng.standard_normal(k + 1)
    d_level, d_cover = np.diff(level), np.diff(cover)
    width = np.where(d_level < 0, rng.uniform(0.7, 1.5, k), rng.uniform(3.0, 8.0, k))
    anom, cloud = np.full(n, level[0]), np.full(n, cover[0])
    band, trough = np.zeros(n), np.zeros(n)
    half = int(60 / _TRACK_DT)  # each front is shaped within +-60 h; beyond, it is a plain step
    for j in range(k):
        c = int((t_k[j] - t0) / _TRACK_DT)
        lo, hi = max(c - half, 0), min(c + half, n)
        anom[hi:] += d_level[j]
        cloud[hi:] += d_cover[j]
        s = t[lo:hi] - t_k[j]
        anom[lo:hi] += d_level[j] * _step(s / width[j])
        cloud[lo:hi] += d_cover[j] * _step((s + 4.0) / 3.0)
        band[lo:hi] += np.abs(d_level[j]) * np.exp(-0.5 * ((s + 2.0) / 4.0) ** 2)
        trough[lo:hi] -= np.abs(d_level[j]) * np.exp(-0.5 * (s / 14.0) ** 2)
    return anom, cloud + band, trough


def _showers(rng: np.random.Generator, hours: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Rain-cooled air (K, <= 0) at (time, lat, lon) nodes: afternoon showers that cool within the hour
    and recover over about three hours; frequent in the tropics, in mid-latitudes mostly in summer."""
    lat2, lon2 = np.meshgrid(lat, lon, indexing="ij")
    mid = np.clip((lat2 - 19.0) / 21.0, 0.0, 1.0)
    summer = _summer(hours)[:, None, None]
    solar = (hours[:, None, None] % 24.0 + lon2[None] / 15.0) % 24.0
    rate = (0.04 * (1 - mid) + 0.03 * mid * (1 + summer) / 2) * np.exp(-0.5 * ((solar - 15.0) / 2.5) ** 2)
    shape = (hours.size, *lat2.shape)
    drop = np.where(rng.random(shape) < rate, rng.exponential(0.8 + 0.7 * mid, shape), 0.0)
    out, y = np.empty(shape), np.zeros(lat2.shape)
    for t in range(hours.size):
        y = 0.7 * y + drop[t]
        out[t] = -y
    return out


def _interp_matrix(nodes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Linear interpolation from ascending ``nodes`` to ``values`` as a (values, nodes) matrix."""
    m = np.zeros((values.size, nodes.size))
    i = np.clip(np.searchsorted(nodes, values) - 1, 0, nodes.size - 2)
    f = (values - nodes[i]) / (nodes[i + 1] - nodes[i])
    m[np.arange(values.size), i] = 1 - f
    m[np.arange(values.size), i + 1] = f
    return m


def _summer(hours: np.ndarray) -> np.ndarray:
    """-1 in late January, +1 in late July (hours since 2000-01-01)."""
    season = 2 * np.pi * ((hours / 24.0) % 365.2425) / 365.2425
    return -np.cos(season - 2 * np.pi * 20 / 365.2425)


def _weather(hours: np.ndarray, lat: np.ndarray, lon: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """(time, cells) float32 weather: fronts, cloudiness, troughs, waves, mesoscale anomalies, showers."""
    lat2, lon2 = np.meshgrid(lat.astype(np.float64), lon.astype(np.float64), indexing="ij")
    lat_f, lon_f = lat2.ravel(), lon2.ravel()
    nt, nc = hours.size, lat_f.size
    rng = np.random.default_rng([seed, 1])
    out = {k: np.zeros((nt, nc), np.float32) for k in ("front", "cloud", "trough")}

    # air-mass tracks every 10 degrees of latitude, blended with Gaussian weights (5 degrees) that keep unit variance;
    # each moves east-south-east to south-east at its own speed, and a cell reads it with its own delay
    centres = np.arange(-80.0, 81.0, 10.0)
    w = np.exp(-0.5 * ((lat_f[None, :] - centres[:, None]) / 5.0) ** 2)
    w /= np.sqrt((w**2).sum(axis=0))
    x_km = (lon_f - lon_f.mean()) * KM_PER_DEG * np.cos(np.deg2rad(lat_f))
    per_hour = int(round(1 / _TRACK_DT))
    for j, centre in enumerate(centres):
        near = np.flatnonzero(w[j] > 1e-3)  # cells run latitude by latitude, so these are contiguous
        if near.size == 0:
            continue
        cells = slice(near[0], near[-1] + 1)
        r = np.random.default_rng([seed, 2, j])
        heading = np.deg2rad(r.uniform(*FRONT_HEADINGS_DEG))
        speed = r.uniform(25.0, 45.0)  # km/h
        delay = (x_km[cells] * np.cos(heading) + (lat_f[cells] - centre) * KM_PER_DEG * np.sin(heading)) / speed
        shift = np.rint(delay / _TRACK_DT).astype(np.int64)
        lag = shift.max() - shift  # steps from the track's start to what the cell sees at the first hour
        n = (nt - 1) * per_hour + int(lag.max()) + 1
        tracks = _regime_track(r, hours[0] - shift.max() * _TRACK_DT, n)
        for name, track in zip(("front", "cloud", "trough"), tracks):
            # hour t of a cell is the track's step t * per_hour + lag: a strided view, then one gather
            view = np.lib.stride_tricks.as_strided(
                track.astype(np.float32), shape=(nt, int(lag.max()) + 1),
                strides=(per_hour * 4, 4), writeable=False)
            out[name][:, cells] += view[:, lag] * w[j, cells].astype(np.float32)

    # travelling synoptic waves, periods 2-7 days, amplitudes waxing and waning over days
    n_waves = 8
    period = rng.uniform(48.0, 168.0, n_waves)
    wavenumber = 2 * np.pi / rng.uniform(2500.0, 6000.0, n_waves)  # per km
    heading = np.deg2rad(rng.uniform(-30.0, 30.0, n_waves))
    x, y = lon_f * KM_PER_DEG * np.cos(np.deg2rad(lat_f)), lat_f * KM_PER_DEG
    theta = wavenumber[:, None] * (np.cos(heading)[:, None] * x + np.sin(heading)[:, None] * y)
    theta += rng.uniform(0, 2 * np.pi, n_waves)[:, None]
    omega_t = 2 * np.pi * hours[:, None] / period[None, :]
    env = _smooth_noise(rng, nt, (n_waves,), 120.0) * np.sqrt(2.0 / n_waves)
    out["waves"] = ((env * np.cos(omega_t)) @ np.cos(theta) + (env * np.sin(omega_t)) @ np.sin(theta)).astype(np.float32)

    # mesoscale weather on 1-degree nodes, interpolated to the cells (coherent over about a degree)
    lat_n = np.arange(np.floor(lat_f.min()) - 1, np.ceil(lat_f.max()) + 2, 1.0)
    lon_n = np.arange(np.floor(lon_f.min()) - 1, np.ceil(lon_f.max()) + 2, 1.0)
    nodes = np.stack([_smooth_noise(rng, nt, (lat_n.size, lon_n.size), 4.0, 2.0),  # local anomalies
                      _smooth_noise(rng, nt, (lat_n.size, lon_n.size), 6.0, 1.5),  # passing cloud
                      _showers(rng, hours, lat_n, lon_n)]).astype(np.float32)  # (3, time, lat_n, lon_n)
    my = _interp_matrix(lat_n, lat.astype(np.float64)).astype(np.float32)
    mx = _interp_matrix(lon_n, lon.astype(np.float64)).astype(np.float32)
    # two plain matrix products (longitude, then latitude), each over one long axis
    along_lon = (nodes.reshape(-1, lon_n.size) @ mx.T).reshape(3 * nt, lat_n.size, lon.size)
    along_lat = my @ along_lon.transpose(1, 0, 2).reshape(lat_n.size, -1)  # (lat, 3 * time * lon)
    meso = along_lat.reshape(lat.size, 3, nt, lon.size).transpose(1, 2, 0, 3).reshape(3, nt, nc)
    for k in range(2):  # interpolation lowers the variance between nodes; each cell back to unit variance
        meso[k] /= meso[k].std(axis=0) + 1e-12
    out["meso"], out["meso_cloud"], out["showers"] = meso
    return out


def _lowpass(x: np.ndarray, tau_hours: float) -> np.ndarray:
    """``x`` (time, ...) through a first-order low-pass filter with time constant ``tau_hours``."""
    psi = np.exp(-1.0 / tau_hours)
    out, y = np.empty_like(x), x[0].copy()
    for t in range(x.shape[0]):
        y = psi * y + (1.0 - psi) * x[t]
        out[t] = y
    return out


def _node_noise(rng: np.random.Generator, nt: int, lat: np.ndarray, lon: np.ndarray, tau_hours: float,
                smooth_hours: float) -> np.ndarray:
    """(time, cells) smooth red noise on 1-degree nodes, interpolated to the cells and back to unit variance
    (coherent over about a degree)."""
    lat_n = np.arange(np.floor(lat.min()) - 1, np.ceil(lat.max()) + 2, 1.0)
    lon_n = np.arange(np.floor(lon.min()) - 1, np.ceil(lon.max()) + 2, 1.0)
    nodes = _smooth_noise(rng, nt, (lat_n.size, lon_n.size), tau_hours, smooth_hours)
    my, mx = _interp_matrix(lat_n, lat.astype(np.float64)), _interp_matrix(lon_n, lon.astype(np.float64))
    cells = np.einsum("tij,ai,bj->tab", nodes, my, mx, optimize=True).reshape(nt, -1)  # as matrix products
    return cells / (cells.std(axis=0) + 1e-12)


def _surface(hours: np.ndarray, lat: np.ndarray, lon: np.ndarray, wx: dict[str, np.ndarray],
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(time, cells) 2 m temperature (K) and surface pressure (Pa) over land from the weather ``wx``."""
    lat2, lon2 = np.meshgrid(lat.astype(np.float64), lon.astype(np.float64), indexing="ij")
    lat_f, lon_f = lat2.ravel().astype(np.float32), lon2.ravel().astype(np.float32)
    mid = np.clip((lat_f - 19.0) / 21.0, 0.0, 1.0)  # 0 in the tropics, 1 at 40N and beyond
    summer = _summer(hours).astype(np.float32)[:, None]
    solar = ((hours[:, None] % 24.0 + lon_f[None, :] / 15.0) % 24.0).astype(np.float32)  # local solar time

    # climate that depends on latitude: warmer, less seasonal and calmer towards the tropics
    t_mean = 302.0 - 0.0112 * lat_f**2
    a_season = 0.6 + 0.0075 * lat_f**2
    a_clear = 2.8 + 3.6 * mid  # diurnal amplitude under a clear sky
    cloud = 1.0 / (1.0 + np.exp(-2.5 * (wx["cloud"] + 0.5 * wx["meso_cloud"])))  # cover, 0..1
    diurnal = np.cos(2 * np.pi / 24 * (solar - 15.0)) + 0.25 * np.cos(4 * np.pi / 24 * (solar - 13.0))
    t2m = a_clear * (1.0 + 0.2 * summer) * (1.0 - 0.8 * cloud) * diurnal  # overcast: a flat day
    t2m += (1.0 - 0.2 * summer) * ((0.6 + 2.0 * mid) * wx["front"] + (0.4 + 1.2 * mid) * wx["waves"])
    t2m += (0.3 + 0.25 * mid) * wx["meso"] + wx["showers"]
    t2m += 0.05 * rng.standard_normal(t2m.shape, dtype=np.float32) + t_mean + a_season * summer
    sp = 101300.0 + 700.0 * np.exp(-(((lat_f - 32.0) / 9.0) ** 2)) + 90.0 * np.cos(4 * np.pi / 24 * (solar - 10.0))
    sp -= (300.0 + 600.0 * mid) * wx["trough"] + (150.0 + 300.0 * mid) * wx["waves"] - 40.0 * wx["meso"]
    return t2m, sp


def _land(hours: np.ndarray, lat: np.ndarray, lon: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(time, cells) 2 m temperature and surface pressure of land cells."""
    return _surface(hours, lat, lon, _weather(hours, lat, lon, seed), np.random.default_rng([seed, 3]))


def _sea(hours: np.ndarray, lat: np.ndarray, lon: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(time, cells) 2 m temperature and surface pressure of sea cells: the air follows the water, so its diurnal
    cycle is small, its seasonal cycle half as large and a month late, and the land's air masses reach it slowly and
    weakened (small, smooth hourly changes: 1 h persistence about 0.1 K, as at a real ocean point)."""
    coast = np.array([COAST_LON - 0.125], dtype=np.float32)  # the last land column
    wx = _weather(hours, lat, coast, seed)
    land_t2m, land_sp = _surface(hours, lat, coast, wx, np.random.default_rng([seed, 4]))
    rng = np.random.default_rng([seed, 5])
    lat2, lon2 = np.meshgrid(lat.astype(np.float64), lon.astype(np.float64), indexing="ij")
    lat_f, lon_f = lat2.ravel().astype(np.float32), lon2.ravel().astype(np.float32)
    row = np.repeat(np.arange(lat.size), lon.size)  # each cell's latitude row (cells run latitude by latitude)
    mid = np.clip((lat_f - 19.0) / 21.0, 0.0, 1.0)
    solar = ((hours[:, None] % 24.0 + lon_f[None, :] / 15.0) % 24.0).astype(np.float32)
    lagged = _summer(hours - SEA_LAG_DAYS * 24.0).astype(np.float32)[:, None]

    t_mean = 302.0 - 0.0112 * lat_f**2
    a_season = 0.5 * (0.6 + 0.0075 * lat_f**2)
    # the air masses that crossed the coast, slowed down (a day) and smoothed, and the water's own slow anomalies
    arrived = _lowpass((wx["front"] + wx["waves"]).astype(np.float64), SEA_SMOOTH_HOURS)[:, row]
    arrived /= arrived.std(axis=0) + 1e-12
    own = _node_noise(rng, hours.size, lat, lon, 120.0, SEA_SMOOTH_HOURS)
    weather_sea = (0.5 + 0.9 * mid) * (0.6 * arrived + 0.8 * own)
    diurnal = 0.2 * np.cos(2 * np.pi / 24 * (solar - 14.0))
    sea = t_mean + a_season * lagged + diurnal + weather_sea + 0.01 * rng.standard_normal(weather_sea.shape)
    near = np.exp(-(lon_f - COAST_LON) / COAST_WIDTH)  # 1 at the coast, falling off over a few tenths of a degree
    t2m = near * land_t2m[:, row] + (1.0 - near) * sea
    return t2m.astype(np.float32), land_sp[:, row]


def fields(times: pd.DatetimeIndex, lat: np.ndarray, lon: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Synthesize (time, lat, lon) float32 fields at ``times`` on the grid ``lat`` x ``lon`` of 2 m
    temperature (K) and surface pressure (Pa): land west of ``COAST_LON``, sea east of it."""
    hours = np.asarray((times - pd.Timestamp("2000-01-01")) / pd.Timedelta(hours=1), dtype=np.float64)
    sea = (lon % 360.0) > COAST_LON  # longitudes ascend, so the land columns come first
    parts = [make(hours, lat, lon[cols], seed) for make, cols in ((_land, ~sea), (_sea, sea)) if cols.any()]
    t2m, sp = (np.concatenate([p[k].reshape(len(times), len(lat), -1) for p in parts], axis=2) for k in (0, 1))
    # ERA5 values come from 16-bit GRIB packing; quantising likewise keeps the chunks compressible.
    return {"2m_temperature": (np.round(t2m * 512.0) / 512.0).astype(np.float32),
            "surface_pressure": (np.round(sp * 8.0) / 8.0).astype(np.float32)}
