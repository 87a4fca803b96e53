"""Gradient clipping, mini-batch SGD and Adam on flat parameter vectors, giving the same numbers as
``torch.nn.utils.clip_grad_norm_``, ``torch.optim.SGD`` and ``torch.optim.Adam`` (Kingma and Ba, 2015), so the PyTorch
version follows the same trajectory."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def clip_grad_norm(grad: np.ndarray, max_norm: float | None) -> float:
    """Scale ``grad`` in place so its global 2-norm is at most ``max_norm``; return the norm before. PyTorch's rule:
    multiply by min(1, max_norm / (norm + 1e-6)). Keeps one exploding BPTT step from throwing the weights away."""
    norm = float(np.sqrt(np.dot(grad, grad)))
    if max_norm is not None and (coef := max_norm / (norm + 1e-6)) < 1.0:
        grad *= coef
    return norm


@dataclass
class SGD:
    """Plain mini-batch stochastic gradient descent: theta -= lr * grad."""

    lr: float = 0.01

    def step(self, theta: np.ndarray, grad: np.ndarray) -> None:
        theta -= self.lr * grad


@dataclass
class Adam:
    """Adam with bias correction; state (m, v, t) lives here, parameters are updated in place."""

    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: np.ndarray | None = field(default=None, repr=False)
    v: np.ndarray | None = field(default=None, repr=False)

    def step(self, theta: np.ndarray, grad: np.ndarray) -> None:
        if self.m is None:
            self.m, self.v = np.zeros_like(theta), np.zeros_like(theta)
        self.t += 1
        self.m += (1.0 - self.beta1) * (grad - self.m)
        self.v *= self.beta2
        self.v += (1.0 - self.beta2) * grad * grad
        bc1 = 1.0 - self.beta1**self.t
        bc2 = 1.0 - self.beta2**self.t
        denom = np.sqrt(self.v) / np.sqrt(bc2) + self.eps
        theta -= (self.lr / bc1) * self.m / denom


OPTIMIZERS = {"sgd": SGD, "adam": Adam}  # by name; ScratchConfig.validate refuses any other
