"""The ``numba-cuda`` version: one CUDA thread per sample, gradients reduced on the device.

The per-sample kernel of ``numba-cpu`` on a GPU. The training data stay resident on the device; per batch only the
weights (a few thousand numbers) and the sample indices go over the bus. Each thread writes its gradient into its own
column of a (parameters x batch) buffer, and the workspaces have the batch as the last (fastest) axis, so neighbouring
threads touch neighbouring addresses (coalesced). A second kernel, a thread per parameter, sums the columns, and P + 1
numbers (gradient, then loss) come back. Tested without a GPU under Numba's CUDA simulator (``cuda_check``)."""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ..errors import DeviceError
from .cuda_check import quiet_launches
from .lstm import LSTMShape
from .numba_cpu import sample_loss_grad, workspace_shapes

THREADS_PER_BLOCK = 64

sample_loss_grad_dev = cuda.jit(device=True)(sample_loss_grad)


@cuda.jit
def per_sample_kernel(X, Y, idx, W_ih, W_hh, b, W_out, b_out, grad, gW_ih, gW_hh, gb, gW_out, gb_out, losses,
                      acts, cs, hs, tcs, work, scale, one):  # pragma: no cover - compiled
    """Thread s: forward + BPTT of sample idx[s] into column s of ``grad`` (P, batch), which the g* arrays view.
    ``scale`` and ``one`` come in the working dtype, so float32 data is computed in float32."""
    s = cuda.grid(1)
    if s < idx.shape[0]:
        for p in range(grad.shape[0]):  # the sample's column starts at zero: sample_loss_grad adds to it
            grad[p, s] = one - one
        n = idx[s]
        losses[s] = sample_loss_grad_dev(
            X[n], Y[n], W_ih, W_hh, b, W_out, b_out, gW_ih[:, :, s], gW_hh[:, :, s], gb[:, s], gW_out[:, :, s],
            gb_out[:, s], acts[:, :, s], cs[:, :, s], hs[:, :, s], tcs[:, :, s], work[:, :, s], scale, one,
        )


@cuda.jit
def reduce_kernel(parts, B, out, zero):  # pragma: no cover - compiled
    """Thread p: out[p] = sum of parts[p, :B] (gradient entries, then the loss), from the working dtype's ``zero``."""
    p = cuda.grid(1)
    if p < out.shape[0]:
        total = zero
        for s in range(B):
            total += parts[p, s]
        out[p] = total


def split_params(flat, shape: LSTMShape) -> tuple:
    """Views of W_ih, W_hh, b, W_out, b_out (``LSTMShape.offsets``) inside a flat vector, or inside the rows of a
    (P, ...) array whose trailing axes (here the batch) are kept."""
    rest = tuple(flat.shape[1:])
    return tuple(flat[start : start + math.prod(shp)].reshape(shp + rest) for start, shp in shape.offsets().values())


class DeviceGrad:
    """What both CUDA versions share: resident data, the batch's indices and the P + 1 numbers back; a version's
    ``launch`` uploads the weights and runs its kernels. ``fit.make_engine`` has asked ``cuda_check`` first."""

    def __init__(self, X: np.ndarray, y: np.ndarray, shape: LSTMShape, batch_size: int, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        self.H, self.O, self.P = shape.hidden, shape.n_outputs, shape.n_params
        self.batch_size = int(batch_size)
        # read-only data: copied once, resident for the whole training run
        self.d_X, self.d_y = (cuda.to_device(np.ascontiguousarray(a, dtype=self.dtype)) for a in (X, y))
        self.d_idx = cuda.device_array(self.batch_size, dtype=np.int64)  # the batch's sample indices, first B used
        self.d_out = cuda.device_array(self.P + 1, dtype=self.dtype)

    def __call__(self, theta: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        B = len(idx)
        if B > self.batch_size:
            raise DeviceError(f"batch of {B} samples is larger than the {self.batch_size} the buffers were sized for")
        d_idx = self.d_idx[:B]
        d_idx.copy_to_device(np.ascontiguousarray(idx, dtype=np.int64))
        with quiet_launches():  # a small batch is a small grid: Numba warns of low occupancy, on purpose here
            self.launch(theta, d_idx, B, self.dtype.type(2.0 / (B * self.O)))  # scale in the working dtype
        out = self.d_out.copy_to_host()  # gradient and squared error: P + 1 numbers back per batch
        return float(out[self.P]) / (B * self.O), out[: self.P].astype(theta.dtype, copy=False)


class NumbaCUDAGrad(DeviceGrad):
    """One thread per sample; ``__call__`` gives (mean loss, gradient) for a batch."""

    def __init__(self, X: np.ndarray, y: np.ndarray, shape: LSTMShape, batch_size: int, dtype: np.dtype):
        super().__init__(X, y, shape, batch_size, dtype)
        H, T, B = self.H, X.shape[1], self.batch_size
        self.d_theta = cuda.device_array(self.P, dtype=self.dtype)
        # per-sample gradients (rows 0..P-1) and losses (row P), batch along the fast axis
        self.d_parts = cuda.device_array((self.P + 1, B), dtype=self.dtype)
        self.d_work = [cuda.device_array((*shp, B), dtype=self.dtype) for shp in workspace_shapes(T, H)]
        self.weights = split_params(self.d_theta, shape)
        self.grads = split_params(self.d_parts[: self.P], shape)
        self.losses = self.d_parts[self.P]

    def launch(self, theta: np.ndarray, d_idx, B: int, scale) -> None:
        self.d_theta.copy_to_device(np.ascontiguousarray(theta))  # weights: once per batch
        kind = self.dtype.type  # constants in the working dtype (see numba_cpu.sample_loss_grad)
        per_sample_kernel[math.ceil(B / THREADS_PER_BLOCK), THREADS_PER_BLOCK](
            self.d_X, self.d_y, d_idx, *self.weights, self.d_parts[: self.P], *self.grads, self.losses,
            *self.d_work, scale, kind(1.0),
        )
        reduce_kernel[math.ceil((self.P + 1) / 128), 128](self.d_parts, B, self.d_out, kind(0.0))
