"""Model outputs and validation error, evaluated in large batches without gradients."""

from __future__ import annotations

import math

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
