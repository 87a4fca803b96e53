"""Model outputs and validation error, evaluated in large batches without gradients."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SKILL_SCORE = "MSE skill score: 1 - MSE_model / MSE_baseline (above 0: the model beats the baseline)"


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


def mse_skill_score(mse_model: float, mse_base: float) -> float | None:
    """The MSE skill score 1 - MSE_model / MSE_baseline (1 perfect, above 0 better than the baseline; None
    where the baseline's MSE is 0)."""
    return 1.0 - mse_model / mse_base if mse_base else None


def per_point_scores(w, pred, network=None) -> list[dict[str, Any]]:
    """Test RMSE of the reported forecast (``pred``: test forecasts in kelvin), of the network alone
    (``network``, where the reported forecast is a blend) and of both baselines per point of windows ``w``
    (kelvin), and the MSE skill scores."""
    truth = w.to_kelvin(w.y["test"])
    base = w.predictions["test"]
    forecasts = {"model": pred, "persistence": base["persistence"], "climatology": base["climatology"]}
    if network is not None:
        forecasts["network"] = network
    rows = []
    for p, name in enumerate(w.points):
        sel = w.point_index["test"] == p
        mse = {k: float(np.mean((v[sel] - truth[sel]) ** 2)) for k, v in forecasts.items()}
        row = score_row(name, w.config.lead_hours, int(sel.sum()), mse)
        if w.requested:  # the point as the user gave it (the row's point is its grid cell)
            row["requested"] = w.requested[p]
        rows.append(row)
    return rows


def score_row(point: str, lead_hours: int, targets: int, mse: dict[str, float]) -> dict[str, Any]:
    """One point's scores: RMSE (kelvin) of the model (and any other forecast in ``mse``) and both baselines
    from their MSE, and the model's MSE skill score against each (``mse_skill_score``)."""
    return {"point": point, "lead_hours": lead_hours, "targets": targets,
            **{f"{k}_rmse_k": math.sqrt(v) for k, v in mse.items()},
            **{f"mse_skill_vs_{b}": mse_skill_score(mse["model"], mse[b]) for b in ("persistence", "climatology")}}


def skill_section(w, pred, network=None, blend: dict[str, Any] | None = None) -> dict[str, Any]:
    """A record's ``skill`` section: the lead, ``per_point_scores`` (a box run's: every cell's) and the blend
    that made the reported forecast (``training.blend``)."""
    out = {"lead_hours": w.config.lead_hours, "score": SKILL_SCORE, "per_point": per_point_scores(w, pred, network)}
    if blend is not None:
        out["blend"] = blend
    return out
