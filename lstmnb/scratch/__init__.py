"""The from-scratch LSTM: the equations in NumPy with backpropagation through time, then parallel versions
(``fit.VERSIONS``; docs/architecture.md maps the modules), all from the same weights on the same batches, so all give
the same numbers. Numba and torch are imported only when their version is used; a GPU version that cannot start here
(``cuda_check``) is a reason, never a stopped run."""

from .data import DATASETS, ScratchData, airline_passengers, load_airline, load_data, prepare_series
from .fit import VERSIONS, FitResult, ScratchConfig, check_version, fit
from .lstm import LSTMShape, forward, init_params, loss_and_grad_loops, loss_and_grad_numpy, mse, predict, unpack
from .optim import Adam, SGD, clip_grad_norm

__all__ = [
    "VERSIONS", "DATASETS", "ScratchConfig", "FitResult", "fit", "check_version", "LSTMShape", "init_params", "unpack",
    "forward", "predict", "mse", "loss_and_grad_numpy", "loss_and_grad_loops", "SGD", "Adam", "clip_grad_norm",
    "ScratchData", "airline_passengers", "load_airline", "load_data", "prepare_series",
]
