"""A four-thread kernel using what the CUDA engines use (shared memory, a block barrier, exp and tanh, float32),
launched once by ``cuda_check.numba_cuda_reason`` to learn whether numba.cuda works here. Its own module, imported only
by that check, because Numba's CUDA simulator swaps a kernel module's global ``cuda`` for its fake."""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32


@cuda.jit
def probe_kernel(x, out):  # pragma: no cover - compiled
    i = cuda.threadIdx.x
    buf = cuda.shared.array(4, dtype=float32)
    buf[i] = math.tanh(x[i])
    cuda.syncthreads()
    out[i] = buf[3 - i] + math.exp(x[i])


def launch_probe_kernel(quiet) -> None:
    """Compile and launch the probe (inside the context manager ``quiet``), check its numbers; raises any failure."""
    x = np.linspace(-1.0, 1.0, 4, dtype=np.float32)
    d_x = cuda.to_device(x)
    d_out = cuda.device_array(4, dtype=np.float32)
    with quiet():
        probe_kernel[1, 4](d_x, d_out)
    got = d_out.copy_to_host()
    want = np.tanh(x[::-1]) + np.exp(x)
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        raise RuntimeError(f"the probe kernel returned {got.tolist()} instead of {want.tolist()}")
