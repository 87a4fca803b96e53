"""The from-scratch LSTM: the equations in NumPy with backpropagation through time, then parallel versions.

Versions (all start from the same weights and see the same batches, so they give the same numbers):
``loops`` (one sample, one step at a time), ``numpy`` (vectorised over the mini-batch), ``numba-cpu``
(compiled, samples over threads with a gradient reduction), ``numba-cuda`` (one CUDA thread per
sample), ``numba-cuda-block`` (a CUDA thread block per few samples, a thread per hidden unit, one
barrier per time step), ``torch`` and ``torch-cuda`` (the same network in PyTorch). Numba and torch are
imported only when their version is used; a GPU version that cannot start here (``cuda_check``) is a
reason, never a stopped run.
"""

from .data import DATASETS, ScratchData, airline_passengers, load_airline, load_data, prepare_series
from .fit import VERSIONS, FitResult, ScratchConfig, check_version, fit
from .lstm import LSTMShape, forward, init_params, loss_and_grad_loops, loss_and_grad_numpy, mse, predict, unpack
from .optim import Adam, SGD, clip_grad_norm

__all__ = [
    "VERSIONS", "DATASETS", "ScratchConfig", "FitResult", "fit", "check_version",
    "LSTMShape", "init_params", "unpack", "forward", "predict", "mse", "loss_and_grad_numpy", "loss_and_grad_loops",
    "SGD", "Adam", "clip_grad_norm",
    "ScratchData", "airline_passengers", "load_airline", "load_data", "prepare_series",
]
