"""How much each training sample counts in the loss.

With one model for many points, a plain MSE is ruled by the points whose weather changes most: at a smooth
ocean point an hour's persistence error is a tenth of a kelvin, against a kelvin over land, so its samples
weigh a hundredth as much and the network may end up worse than persistence there while the pooled figure
looks fine. Weighing each point's samples by one over its persistence MSE on the training part makes the
loss the mean of the points' (1 - MSE skill score against persistence): every point counts by how much the
network beats persistence there, not by the size of its errors.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

POINT_WEIGHTS = {
    "none": "every sample counts the same (plain MSE)",
    "persistence": "each point's samples weigh 1 / that point's persistence MSE on the training part (mean 1)",
}


def sample_weights(windows, how: str) -> np.ndarray | None:
    """Per training sample its loss weight (float32, mean 1), or None for a plain MSE (``how`` = none)."""
    if how not in POINT_WEIGHTS:
        raise ConfigError(f"point_weights={how!r} is not one of {', '.join(POINT_WEIGHTS)}")
    if how == "none":
        return None
    pid = windows.point_index["train"]
    err = windows.predictions["train"]["persistence"] - windows.to_kelvin(windows.y["train"])
    per_point = np.bincount(pid, weights=np.mean(err.astype(np.float64) ** 2, axis=1), minlength=len(windows.points))
    counts = np.bincount(pid, minlength=len(windows.points))
    mse = per_point / np.maximum(counts, 1)
    inverse = 1.0 / np.maximum(mse, 1e-6 * max(float(mse.max()), 1e-12))  # a point persistence gets exactly: capped
    weights = inverse[pid]
    return (weights / weights.mean()).astype(np.float32)
