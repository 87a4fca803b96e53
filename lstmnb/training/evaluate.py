"""Model outputs and validation error, evaluated in large batches without gradients."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


@torch.inference_mode()
def predict(model: nn.Module, x: np.ndarray | torch.Tensor, device: torch.device,
            batch_size: int = 8192) -> torch.Tensor:
    """Model outputs (scaled units) for all samples of ``x``, evaluated in large batches."""
    was_training = model.training
    model.eval()
    xt = torch.as_tensor(x).to(device)
    outs = [model(xt[i : i + batch_size]).float() for i in range(0, xt.shape[0], batch_size)]
    model.train(was_training)
    return torch.cat(outs) if outs else torch.empty(0, device=device)


def rmse_kelvin(model: nn.Module, x: torch.Tensor, y: torch.Tensor, target_std: float,
                batch_size: int) -> tuple[float, float]:
    """(scaled MSE, RMSE in kelvin) of ``model`` on (x, y) already on the device."""
    pred = predict(model, x, x.device, batch_size)
    mse = F.mse_loss(pred, y.float()).item()
    return mse, math.sqrt(mse) * target_std


def per_point_scores(result) -> list[dict[str, Any]]:
    """Test RMSE of the model and both baselines per point (kelvin), and the skill scores."""
    w = result.windows
    truth = w.to_kelvin(w.y["test"])
    pred = result.forecast_kelvin("test")
    base = w.predictions["test"]
    rows = []
    for p, name in enumerate(w.points):
        sel = w.point_index["test"] == p
        mse = {k: float(np.mean((v[sel] - truth[sel]) ** 2))
               for k, v in (("model", pred), ("persistence", base["persistence"]), ("climatology", base["climatology"]))}
        rows.append({"point": name, "lead_hours": w.config.lead_hours, "targets": int(sel.sum()),
                     **{f"{k}_rmse_k": float(np.sqrt(v)) for k, v in mse.items()},
                     "skill_vs_persistence": 1 - mse["model"] / mse["persistence"] if mse["persistence"] else None,
                     "skill_vs_climatology": 1 - mse["model"] / mse["climatology"] if mse["climatology"] else None})
    return rows


def skill_section(result) -> dict[str, Any]:
    """A record's ``skill`` section: the lead and ``per_point_scores`` (the per-cell scores of a box run)."""
    return {"lead_hours": result.windows.config.lead_hours, "per_point": per_point_scores(result)}
