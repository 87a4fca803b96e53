"""The ``torch`` versions: the same network as ``torch.nn.LSTM`` + ``nn.Linear``, trained by PyTorch.

Nothing written by hand: PyTorch runs each step's batched matrix products on its multithreaded CPU kernels (``torch``)
or cuDNN's fused LSTM kernels (``torch-cuda``), and autograd does BPTT. The weights come from the flat vector of every
other version (``bias_hh`` held at zero: ours has one bias per gate), so the trajectory is the same."""

from __future__ import annotations

import numpy as np
import torch

from ..machine.device import off_the_gpu
from .lstm import LSTMShape, unpack


class TorchLSTM(torch.nn.Module):
    """Many-to-one LSTM regression: last hidden state -> linear read-out."""

    def __init__(self, shape: LSTMShape):
        super().__init__()
        self.lstm = torch.nn.LSTM(shape.n_features, shape.hidden, batch_first=True)
        self.head = torch.nn.Linear(shape.hidden, shape.n_outputs)
        self.lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])

    def trainable(self) -> list[torch.nn.Parameter]:
        """Parameters in the order of the flat layout: W_ih, W_hh, b, W_out, b_out."""
        return [self.lstm.weight_ih_l0, self.lstm.weight_hh_l0, self.lstm.bias_ih_l0, self.head.weight, self.head.bias]


def torch_model(theta: np.ndarray, shape: LSTMShape, device: str = "cpu") -> TorchLSTM:
    """A ``TorchLSTM`` holding exactly the weights of ``theta`` (dtype kept)."""
    dtype = torch.float64 if theta.dtype == np.float64 else torch.float32
    model = TorchLSTM(shape).to(device=device, dtype=dtype)
    p = unpack(theta, shape)
    with torch.no_grad():
        for param, name in zip(model.trainable(), ("W_ih", "W_hh", "b", "W_out", "b_out")):
            param.copy_(torch.from_numpy(np.array(p[name])))
        model.lstm.bias_hh_l0.zero_()
    return model


def flat_params(model: TorchLSTM) -> np.ndarray:
    """The model's weights back as one flat NumPy vector in our layout."""
    return torch.cat([p.detach().reshape(-1) for p in model.trainable()]).cpu().numpy()


def torch_loss_and_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: LSTMShape) -> tuple[float, np.ndarray]:
    """Loss and gradient by PyTorch autograd for the given weights and batch (on CPU)."""
    model = torch_model(theta, shape)
    xb, yb = (torch.from_numpy(np.ascontiguousarray(a)) for a in (X, y))
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    return loss.item(), torch.cat([p.grad.reshape(-1) for p in model.trainable()]).numpy()  # our flat layout


TORCH_OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


class TorchEngine:
    """Training state on the device: resident data, model, torch optimiser; one ``step`` per batch."""

    def __init__(self, version: str, shape: LSTMShape, X: np.ndarray, y: np.ndarray, theta0: np.ndarray,
                 optimizer: str, lr: float, clip: float | None):
        self.device = "cuda" if version == "torch-cuda" else "cpu"  # torch-cuda: make_engine found a GPU
        if self.device == "cuda":
            from ..machine.cuda import prepare_cuda

            prepare_cuda()  # cuDNN off where torch's cuDNN refuses these GPUs (P100/V100 with cuDNN >= 9.11)
        self.model = torch_model(theta0, shape, self.device)
        # copied once (torch.tensor always copies; the arrays may be read-only views) and resident on the device
        self.X, self.y = (torch.tensor(a, dtype=self.model.head.weight.dtype, device=self.device) for a in (X, y))
        # the name is one of optim.OPTIMIZERS (ScratchConfig.validate checks it)
        self.opt = off_the_gpu(TORCH_OPTIMIZERS[optimizer](self.model.trainable(), lr=lr), torch.device(self.device))
        self.clip = clip

    def step(self, idx: np.ndarray) -> float:
        index = torch.as_tensor(idx, device=self.device)
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.X[index]), self.y[index])
        loss.backward()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.trainable(), self.clip)
        self.opt.step()
        return loss.item()  # one device -> host copy per step, as the other versions report their loss

    def warmup(self) -> None:
        """One forward/backward without an update: CUDA context, cuDNN plans, allocator."""
        index = torch.arange(min(2, len(self.X)), device=self.device)
        loss = torch.nn.functional.mse_loss(self.model(self.X[index]), self.y[index])
        loss.backward()
        self.opt.zero_grad(set_to_none=True)
        self.sync()

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def params(self) -> np.ndarray:
        return flat_params(self.model)
