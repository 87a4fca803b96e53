"""The PyTorch forecaster (a stacked LSTM or GRU over the window, a linear head for the horizon), and parameter and
FLOP counts, so throughput can be turned into model FLOPs utilisation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .rules import PYTHON, check_fields, choice, number, ruled, whole

CELLS = ("lstm", "gru")
_GATES = {"lstm": 4, "gru": 3}


@dataclass(frozen=True)
class ModelConfig:
    n_features: int = ruled(1, whole(1))
    hidden: int = ruled(64, whole(1))
    layers: int = ruled(1, whole(1))
    dropout: float = ruled(0.0, number(hi=1, open_hi=True, says="a number in [0, 1)"))
    horizon: int = ruled(1, whole(1))
    cell: str = ruled("lstm", choice(CELLS))
    residual: bool = False  # predict the change from the last observed target value (feature 0)

    def validate(self) -> None:
        check_fields(self, PYTHON)


class Forecaster(nn.Module):
    """Many-to-one recurrent forecaster: input (batch, window, features) -> (batch, horizon).

    With ``residual`` the output is the last observed target plus the head's correction, so an
    untrained model already forecasts persistence and training refines it."""

    def __init__(self, config: ModelConfig = ModelConfig()):
        super().__init__()
        config.validate()
        self.config = config
        rnn = nn.LSTM if config.cell == "lstm" else nn.GRU
        self.rnn = rnn(input_size=config.n_features, hidden_size=config.hidden, num_layers=config.layers,
                       dropout=config.dropout if config.layers > 1 else 0.0, batch_first=True)
        self.head = nn.Linear(config.hidden, config.horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda and torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16:
            # cuDNN's RNN autocast wrapper casts to float16 whatever autocast's dtype is (ATen's
            # cudnn/AutocastRNN.cpp): under bf16 autocast the recurrence would run in fp16 without a loss
            # scaler. It runs in float32 instead; the head stays under autocast.
            with torch.autocast("cuda", enabled=False):
                out, _ = self.rnn(x.float())
        else:
            out, _ = self.rnn(x)
        y = self.head(out[:, -1])
        return y + x[:, -1, :1] if self.config.residual else y


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def flops_per_sample(config: ModelConfig, window: int) -> dict[str, int]:
    """Floating-point operations for one sample of ``window`` steps: forward and training (forward+backward).

    Counted per time step and layer for a cell with G gates (LSTM 4, GRU 3), input size I and hidden H:
    the two gate matrix products 2*G*H*(I+H), the two bias additions 2*G*H, and the state update
    (LSTM: c = f*c + i*g and h = o*tanh(c), 4*H; GRU: n = tanh(.. + r*(W h)) and h = (1-z)*n + z*h, 4*H).
    Activations (sigmoid, tanh) are not counted, as is usual. The head adds 2*H*horizon + horizon once.
    Training is taken as 3x forward (the backward pass costs about twice the forward), the
    convention used for model FLOPs utilisation (Chowdhery et al. 2022, PaLM, appendix B)."""
    config.validate()
    g, h = _GATES[config.cell], config.hidden
    inputs = [config.n_features] + [h] * (config.layers - 1)  # each layer's input size
    total = window * sum(2 * g * h * (i + h) + 2 * g * h + 4 * h for i in inputs) + 2 * h * config.horizon + config.horizon
    return {"forward": int(total), "training": int(3 * total)}
