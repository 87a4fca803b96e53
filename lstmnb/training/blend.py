"""The forecast a run reports: per point (a box run: per cell), the convex blend of the network's forecast
with persistence (and climatology) that fits that point's validation part best.

Persistence alone is one of the blends a point can get, so at no point and no lead does the reported
forecast lose to persistence on the validation part; where the network is worse than persistence at a
point (a smooth ocean point, whose small errors weigh nothing in a loss pooled over stormy land points),
that point's forecast leans on persistence instead. At long leads climatology earns weight too: errors
of persistence and climatology are only partly correlated, so a blend beats both. The weights are
fitted on validation only, never on test; the record keeps them (``skill.blend``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..errors import ConfigError

SOURCES = ("model", "persistence", "climatology")  # the network's forecast and the two baselines
# what each choice of TrainConfig.blend may combine
BLENDS = {"off": ("model",), "persistence": ("model", "persistence"), "baselines": SOURCES}
DESCRIPTIONS = {
    "off": "the network's forecast as it is",
    "persistence": "per point, the convex blend of the network and persistence that fits the validation part best (MSE)",
    "baselines": ("per point, the convex blend of the network, persistence and climatology that fits the validation "
                  "part best (MSE)"),
}


def convex_weights(forecasts: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Weights (k,), >= 0 and summing to 1, of the columns of ``forecasts`` (n, k) whose combination has the
    least squared error against ``truth`` (n,): exact, by trying every set of columns (k is at most 3).
    A single column is always a candidate, so the result is never worse than the best single column."""
    f = np.asarray(forecasts, dtype=np.float64)
    y = np.asarray(truth, dtype=np.float64)
    k = f.shape[1]
    best, best_sse = None, np.inf
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            sub = f[:, cols]
            # minimise |sub w - y| with sum(w) = 1: w = (1 - sum z, z) around the first column
            z = np.linalg.lstsq(sub[:, 1:] - sub[:, :1], y - sub[:, 0], rcond=None)[0] if size > 1 else np.zeros(0)
            w = np.concatenate([[1.0 - z.sum()], z])
            if (w < 0).any():
                continue
            sse = float(np.sum((sub @ w - y) ** 2))
            if sse < best_sse:
                best, best_sse = np.zeros(k), sse
                best[list(cols)] = w
    return best


def _stack(windows, split: str, network: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """(samples, horizon, sources) forecasts in kelvin of ``split``: the network's and the baselines'."""
    pred = windows.predictions[split]
    return np.stack([network if n == "model" else pred[n] for n in names], axis=-1)


def fit_blend(windows, network_val: np.ndarray, blend: str) -> np.ndarray:
    """Per point, the weights (points, 3) of the network, persistence and climatology (``SOURCES``) fitted on
    the validation part; ``network_val``: the network's validation forecasts in kelvin."""
    if blend not in BLENDS:
        raise ConfigError(f"blend={blend!r} is not one of {', '.join(BLENDS)}")
    names = BLENDS[blend]
    use = [SOURCES.index(n) for n in names]
    truth = windows.to_kelvin(windows.y["val"])
    stack = _stack(windows, "val", network_val, names)
    weights = np.zeros((len(windows.points), len(SOURCES)))
    for p in range(len(windows.points)):
        sel = windows.point_index["val"] == p
        weights[p, use] = convex_weights(stack[sel].reshape(-1, len(names)), truth[sel].reshape(-1))
    return weights


def apply_blend(windows, split: str, network: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The reported forecast (samples, horizon) in kelvin of ``split``: each sample's point's blend."""
    stack = _stack(windows, split, network, SOURCES)
    return np.einsum("nhs,ns->nh", stack, weights[windows.point_index[split]])


def blend_section(windows, blend: str, network_val: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """The record's ``skill.blend``: which blend, what it means, and per point its weights and the validation
    RMSE (K) of the reported forecast, the network alone and persistence (the reported one is never above
    persistence's)."""
    truth = windows.to_kelvin(windows.y["val"])
    forecasts = {"reported": apply_blend(windows, "val", network_val, weights), "network": network_val,
                 "persistence": windows.predictions["val"]["persistence"]}
    points = []
    for p, name in enumerate(windows.points):
        sel = windows.point_index["val"] == p
        points.append({"point": name, "weights": dict(zip(SOURCES, map(float, weights[p]))),
                       **{f"val_{k}_rmse_k": float(np.sqrt(np.mean((f[sel] - truth[sel]) ** 2))) if sel.any() else None
                          for k, f in forecasts.items()}})
    return {"blend": blend, "description": DESCRIPTIONS[blend], "fitted_on": "val", "sources": list(SOURCES),
            "per_point": points}


def blend_weights(section: dict[str, Any]) -> np.ndarray:
    """The (points, 3) weights of a record's ``skill.blend`` section, as ``fit_blend`` gave them."""
    return np.array([[row["weights"][name] for name in SOURCES] for row in section["per_point"]], dtype=np.float64)
