"""Training any version: one config, one engine per version, the same batches in the same order.

Every version starts from ``init_params(shape, seed)`` and sees the batches of one seeded shuffle, so their loss
trajectories agree to rounding. Only the training data update the weights; validation is evaluated after each epoch
for monitoring, outside the timed region."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from ..machine.device import host_memory_bytes, local_rank_limit, torch_threads
from ..errors import ConfigError, DeviceError, LstmnbError
from ..rules import PYTHON, Spelling, check_fields, choice, number, ruled, whole
from ..windows import split_bounds
from .data import AIRLINE_MONTHS, DATASETS
from .lstm import (DTYPES, LSTMShape, check_batch, init_params, loss_and_grad_loops, loss_and_grad_numpy, mse,
                   resolve_dtype)
from .optim import OPTIMIZERS, clip_grad_norm
from .precision import engine_backends, engine_math

ERA5_HOURS = 547 * 24  # the default ERA5 request, 2020-01-01..2021-06-30, in hours
VERSIONS = ("loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch", "torch-cuda")
STARTABLE = ("numba-cpu", "numba-cuda", "numba-cuda-block", "torch-cuda")  # need an optional compiler or device


@dataclass
class ScratchConfig:
    """Every knob of a from-scratch run: data, network, optimiser, epochs."""

    data: str = ruled("airline", choice(DATASETS))  # 'airline' (monthly, 144 values) or 'era5' (hourly point series)
    window: int = ruled(12, whole(1))  # input steps per sample (months for airline, hours for ERA5)
    hours: int = ruled(24 * 42, whole(1))  # ERA5 only: length of the series in hours
    hidden: int = ruled(32, whole(1))
    epochs: int = ruled(30, whole(1))
    batch_size: int = ruled(16, whole(1))
    optimizer: str = ruled("adam", choice(tuple(OPTIMIZERS)))
    lr: float = ruled(0.01, number(positive=True))
    clip: float | None = 1.0  # max global gradient norm; None turns clipping off
    seed: int = ruled(0, whole(0, 2**64 - 1, says=f"a whole number in 0..{2**64 - 1}"))
    dtype: str = ruled("float64", choice(DTYPES))
    shuffle: bool = True
    threads: int | None = None  # CPU threads for numba-cpu and torch (None: the library's default)

    def validate(self, say: Spelling = PYTHON) -> None:
        """Every value before any engine starts; a refusal names it as ``say`` spells it (``--hidden 0``)."""
        check_fields(self, say)
        if self.data == "era5" and self.hours > ERA5_HOURS:
            raise say.refuse("hours", self.hours, "is more than the default ERA5 request has (2020-01-01..2021-06-30); "
                             f"give 1..{ERA5_HOURS}")
        steps = self.hours if self.data == "era5" else AIRLINE_MONTHS - 1  # the series the windows slide over
        short = min(part.stop - part.start for part in split_bounds(steps))  # prepare_series' 70/15/15 split
        if self.window >= short:
            fixes = [f"a window below {short}"] * (short > 1) + [f"more {say.key('hours')}"] * (self.data == "era5")
            raise say.refuse("window", self.window, f": the shortest part of the {self.data} series (70/15/15 of its "
                             f"{steps} steps) has {short}, too few for one sample; give {' or '.join(fixes)}")
        if self.clip is not None and number(positive=True).why(self.clip):
            raise say.refuse("clip", self.clip, "must be a positive number" + (
                " (0: no clipping)" if say.cli else f", or {say.none} (no clipping)"))
        # the weights, their gradients and Adam's two moments, before any array is made
        need = 4 * 4 * self.hidden * (self.hidden + 2) * resolve_dtype(self.dtype).itemsize
        if need > host_memory_bytes():
            raise say.refuse("hidden", self.hidden, f"needs {need / 2**30:,.0f} GiB for the weights, gradients and "
                             f"Adam state alone; this machine has {host_memory_bytes() / 2**30:,.0f} GiB")
        top = local_rank_limit()
        if self.threads is not None and not (isinstance(self.threads, (int, np.integer)) and 1 <= self.threads <= top):
            raise say.refuse("threads", self.threads, f"must be a whole number in 1..{top} or {say.none}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_version(version: str) -> str:
    """``version`` if it is one of VERSIONS, else a ConfigError naming the choices."""
    if version not in VERSIONS:
        raise ConfigError(f"version={version!r} is not known; choose one of {VERSIONS}")
    return version


@contextmanager
def cpu_threads(version: str, threads: int | None):
    """Run the block with ``threads`` CPU threads for the version's library, restoring the old count."""
    if threads is None or version not in ("numba-cpu", "torch"):
        yield
        return
    if version == "torch":
        with torch_threads(threads):
            yield
        return
    import numba

    if threads > numba.config.NUMBA_NUM_THREADS:
        raise ConfigError(f"threads={threads} is more than numba's {numba.config.NUMBA_NUM_THREADS} "
                          "(NUMBA_NUM_THREADS)")
    old = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(old)


class HostEngine:
    """Weights and optimiser on the host; ``grad_fn(theta, idx)`` supplies the batch gradient."""

    def __init__(self, grad_fn: Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]],
                 theta0: np.ndarray, config: ScratchConfig, n_samples: int):
        self.grad_fn, self.n_samples, self.clip = grad_fn, n_samples, config.clip
        self.theta = theta0.copy()
        self.opt = OPTIMIZERS[config.optimizer](lr=config.lr)

    def step(self, idx: np.ndarray) -> float:
        loss, grad = self.grad_fn(self.theta, idx)
        clip_grad_norm(grad, self.clip)
        self.opt.step(self.theta, grad)
        return loss

    def warmup(self) -> None:
        """One gradient without an update, so compilation is timed apart from training."""
        self.grad_fn(self.theta, np.arange(min(2, self.n_samples)))

    def sync(self) -> None:
        pass

    def params(self) -> np.ndarray:
        return self.theta.copy()


def make_engine(version: str, shape: LSTMShape, X: np.ndarray, y: np.ndarray, theta0: np.ndarray,
                config: ScratchConfig):
    """The training engine of one version on the training data X (N, T, F), y (N, O); a ConfigError for an unknown
    version, a DeviceError when it cannot start here (``numba-cuda*`` whose probe kernel fails: no GPU, no driver, a
    broken compiler; ``torch-cuda`` without a GPU)."""
    check_version(version)
    from .cuda_check import numba_cuda_reason, torch_cuda_reason

    # before numba.cuda is imported: an import that fails is a reason too
    reason = (numba_cuda_reason() if version.startswith("numba-cuda") else
              torch_cuda_reason() if version == "torch-cuda" else None)
    if reason is not None:
        raise DeviceError(reason)
    dtype = resolve_dtype(config.dtype)
    X, y = (np.ascontiguousarray(a, dtype=dtype) for a in (X, y))
    theta0 = theta0.astype(dtype)
    if version in ("loops", "numpy"):
        batch_grad = loss_and_grad_loops if version == "loops" else loss_and_grad_numpy
        return HostEngine(lambda th, idx: batch_grad(th, X[idx], y[idx], shape), theta0, config, len(X))
    if version.startswith("torch"):
        from .torch_lstm import TorchEngine

        return TorchEngine(version, shape, X, y, theta0, config.optimizer, config.lr, config.clip)
    if version == "numba-cpu":
        from .numba_cpu import NumbaCPUGrad as Grad
    elif version == "numba-cuda":
        from .numba_cuda import NumbaCUDAGrad as Grad
    else:
        from .numba_cuda_block import NumbaCUDABlockGrad as Grad
    return HostEngine(Grad(X, y, shape, config.batch_size, dtype), theta0, config, len(X))


@contextmanager
def engine_start(version: str):
    """Building an engine and its first call (compilation, device start-up): for the versions in STARTABLE any failure
    other than the project's own errors becomes a DeviceError naming the exception and the library versions (e.g.
    numba-cuda whose compiler breaks under a newer NumPy), so a versions table records it as skipped and goes on."""
    try:
        yield
    except LstmnbError:
        raise
    except Exception as exc:
        if version not in STARTABLE:
            raise
        from .cuda_check import NUMBA_LIBS, TORCH_LIBS, start_failure

        libs = TORCH_LIBS if version.startswith("torch") else NUMBA_LIBS if "cuda" in version else NUMBA_LIBS[:2]
        raise DeviceError(start_failure(version, exc, libs)) from exc


@dataclass
class FitResult:
    """What one training run of one version produced."""

    theta: np.ndarray
    compile_s: float
    epoch_s: list[float]
    step_losses: list[float]
    train_losses: list[float]  # mean batch loss per epoch (weights changing during the epoch)
    val_losses: list[float]  # validation MSE after each epoch (never used for updates)
    backends: dict[str, Any] | None = None  # the math it ran in (precision.engine_backends)

    @property
    def run_s(self) -> float:
        return float(sum(self.epoch_s))


def batches(n: int, batch_size: int, epochs: int, seed: int, shuffle: bool = True):
    """Per epoch, the list of index arrays of its mini-batches (one seeded shuffle per epoch)."""
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(n) if shuffle else np.arange(n)
        yield [order[i : i + batch_size] for i in range(0, n, batch_size)]


def fit(version: str, shape: LSTMShape, X_train: np.ndarray, y_train: np.ndarray, config: ScratchConfig, *,
        X_val: np.ndarray | None = None, y_val: np.ndarray | None = None) -> FitResult:
    """Train ``version`` for ``config.epochs`` epochs and time it: compile_s is the warm-up call (JIT compilation or
    cache load, CUDA context); epoch_s the wall time of each epoch's steps, the device synchronised before each read."""
    config.validate()
    check_version(version)
    check_batch(X_train, y_train, shape)
    if X_val is not None:
        check_batch(X_val, y_val, shape)
        X_val = np.asarray(X_val, dtype=np.float64)  # cast once: validation is evaluated in float64 each epoch
    theta0 = init_params(shape, config.seed, config.dtype)
    with cpu_threads(version, config.threads), engine_math(version):  # torch-cuda: IEEE float32, as the others
        with engine_start(version):
            engine = make_engine(version, shape, X_train, y_train, theta0, config)
            t0 = time.perf_counter()
            engine.warmup()
            engine.sync()
            result = FitResult(theta0, time.perf_counter() - t0, [], [], [], [])

        for epoch_batches in batches(len(X_train), config.batch_size, config.epochs, config.seed, config.shuffle):
            t0 = time.perf_counter()
            losses = [engine.step(idx) for idx in epoch_batches]
            engine.sync()
            result.epoch_s.append(time.perf_counter() - t0)
            result.step_losses.extend(losses)
            result.train_losses.append(float(np.mean(losses)))
            if X_val is not None:
                result.val_losses.append(mse(engine.params().astype(np.float64), X_val, y_val, shape))
        result.theta = engine.params()
        result.backends = engine_backends(version, theta0.dtype)
    return result
