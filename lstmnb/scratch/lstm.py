"""The LSTM from its equations: parameter layout, NumPy forward pass and backpropagation through time.

One layer, many-to-one: the hidden state after the last input step goes through a linear read-out. Gates in PyTorch's
order (input i, forget f, cell candidate g, output o), so weights map one to one onto ``torch.nn.LSTM`` (its second
bias ``bias_hh`` held at zero)::

    a_t = W_ih x_t + W_hh h_{t-1} + b            (4H pre-activations)
    i, f, o = sigmoid(a_i), sigmoid(a_f), sigmoid(a_o);  g = tanh(a_g)
    c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t)
    y_hat = W_out h_T + b_out;   loss = mean((y_hat - y)^2)

All parameters live in one flat vector ``theta`` (``LSTMShape.offsets``); every version takes and returns flat vectors,
so optimisers, clipping and comparisons are written once."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, DataError

DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class LSTMShape:
    """Sizes of the network: input features F, hidden units H, outputs O (the forecast horizon)."""

    n_features: int = 1
    hidden: int = 32
    n_outputs: int = 1

    def __post_init__(self) -> None:
        for name in ("n_features", "hidden", "n_outputs"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive whole number")

    @property
    def n_params(self) -> int:
        F, H, O = self.n_features, self.hidden, self.n_outputs
        return 4 * H * F + 4 * H * H + 4 * H + O * H + O

    def offsets(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Start offset and shape of each parameter inside ``theta`` (row-major, PyTorch layout)."""
        F, H, O = self.n_features, self.hidden, self.n_outputs
        shapes = {"W_ih": (4 * H, F), "W_hh": (4 * H, H), "b": (4 * H,), "W_out": (O, H), "b_out": (O,)}
        starts = itertools.accumulate((math.prod(shp) for shp in shapes.values()), initial=0)
        return {name: (start, shp) for (name, shp), start in zip(shapes.items(), starts)}


def unpack(theta: np.ndarray, shape: LSTMShape) -> dict[str, np.ndarray]:
    """Views (no copies) of the parameters inside the flat vector ``theta``."""
    if theta.ndim != 1 or theta.size != shape.n_params:
        raise ConfigError(f"theta has shape {theta.shape}; an LSTM with {shape} needs a flat vector of "
                          f"{shape.n_params}")
    return {name: theta[start : start + math.prod(shp)].reshape(shp) for name, (start, shp) in shape.offsets().items()}


def resolve_dtype(dtype: str | np.dtype) -> np.dtype:
    """The NumPy dtype for a name in DTYPES; anything else is a ConfigError naming the choices."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is not supported; choose one of {DTYPES}")
    return np.dtype(name)


def init_params(shape: LSTMShape, seed: int = 0, dtype: str = "float64") -> np.ndarray:
    """Initial weights as PyTorch draws them, U(-1/sqrt(H), 1/sqrt(H)), with a forget-gate bias of 1 (Jozefowicz et
    al., 2015: the cell state carries information early in training). Every version starts from this vector."""
    rng = np.random.default_rng(seed)
    k = 1.0 / np.sqrt(shape.hidden)
    theta = rng.uniform(-k, k, size=shape.n_params)
    unpack(theta, shape)["b"][shape.hidden : 2 * shape.hidden] = 1.0  # the forget gate's bias
    return theta.astype(resolve_dtype(dtype))


def check_batch(X: np.ndarray, y: np.ndarray, shape: LSTMShape) -> None:
    """Shape and finiteness checks with messages a user can act on (before any compiled code runs)."""
    if not isinstance(X, np.ndarray) or X.ndim != 3:
        raise DataError(f"X must be an array (samples, window, features); got shape {np.shape(X)}")
    if X.shape[2] != shape.n_features:
        raise DataError(f"X has {X.shape[2]} features per step; the LSTM was built for {shape.n_features}")
    if not isinstance(y, np.ndarray) or y.ndim != 2 or y.shape[1] != shape.n_outputs:
        raise DataError(f"y must be (samples, {shape.n_outputs}); got shape {np.shape(y)}")
    if y.shape[0] != X.shape[0]:
        raise DataError(f"X has {X.shape[0]} samples but y has {y.shape[0]}; they must match")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise DataError(f"X has shape {X.shape}: need at least one sample and one time step")
    for name, arr in (("X", X), ("y", y)):
        if not np.isfinite(arr).all():
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise DataError(f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)})")


def sigmoid(a: np.ndarray) -> np.ndarray:
    """Logistic function written with tanh: no overflow warnings for large |a|."""
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def forward(theta: np.ndarray, X: np.ndarray, shape: LSTMShape) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Predictions (B, O) for a batch X (B, T, F), and the activations BPTT needs. The input projection of all time
    steps is one matrix product; only the recurrent ``h_{t-1} W_hh^T`` stays inside the loop over time."""
    p = unpack(theta, shape)
    B, T, _ = X.shape
    H = shape.hidden
    xproj = X @ p["W_ih"].T + p["b"]  # (B, T, 4H)
    acts = np.empty((T, B, 4 * H), dtype=theta.dtype)  # gate activations after their nonlinearity
    cs = np.zeros((T + 1, B, H), dtype=theta.dtype)
    hs = np.zeros((T + 1, B, H), dtype=theta.dtype)
    W_hh_T = p["W_hh"].T
    for t in range(T):
        a = xproj[:, t] + hs[t] @ W_hh_T
        acts[t] = sigmoid(a)
        acts[t, :, 2 * H : 3 * H] = np.tanh(a[:, 2 * H : 3 * H])
        i, f, g, o = acts[t, :, :H], acts[t, :, H : 2 * H], acts[t, :, 2 * H : 3 * H], acts[t, :, 3 * H :]
        cs[t + 1] = f * cs[t] + i * g
        hs[t + 1] = o * np.tanh(cs[t + 1])
    y_hat = hs[T] @ p["W_out"].T + p["b_out"]
    return y_hat, {"acts": acts, "cs": cs, "hs": hs}


def predict(theta: np.ndarray, X: np.ndarray, shape: LSTMShape) -> np.ndarray:
    """Predictions (B, O) for X (B, T, F)."""
    return forward(theta, X, shape)[0]


def mse(theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: LSTMShape) -> float:
    """Mean squared error over samples and outputs, in the scaled units the model sees."""
    return float(np.mean((predict(theta, X, shape) - y) ** 2))


def loss_and_grad_numpy(theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: LSTMShape) -> tuple[float, np.ndarray]:
    """MSE loss and its gradient (flat, like theta) by backpropagation through time, batched. Backward in time carries
    dh (from the read-out and from step t+1) and dc; each weight gradient is then one product over (time x batch)."""
    p = unpack(theta, shape)
    B, T, F = X.shape
    H = shape.hidden
    y_hat, cache = forward(theta, X, shape)
    acts, cs, hs = cache["acts"], cache["cs"], cache["hs"]
    err = y_hat - y
    loss = float(np.mean(err**2))
    dy = (2.0 / err.size) * err  # (B, O)

    grad = np.zeros_like(theta)
    g = unpack(grad, shape)
    g["W_out"][...] = dy.T @ hs[T]
    g["b_out"][...] = dy.sum(axis=0)
    dh = dy @ p["W_out"]  # (B, H)
    dc = np.zeros((B, H), dtype=theta.dtype)
    da = np.empty((T, B, 4 * H), dtype=theta.dtype)
    W_hh = p["W_hh"]
    for t in range(T - 1, -1, -1):
        i, f, gg, o = acts[t, :, :H], acts[t, :, H : 2 * H], acts[t, :, 2 * H : 3 * H], acts[t, :, 3 * H :]
        tc = np.tanh(cs[t + 1])
        dc = dc + dh * o * (1.0 - tc * tc)
        da[t, :, :H] = dc * gg * i * (1.0 - i)
        da[t, :, H : 2 * H] = dc * cs[t] * f * (1.0 - f)
        da[t, :, 2 * H : 3 * H] = dc * i * (1.0 - gg * gg)
        da[t, :, 3 * H :] = dh * tc * o * (1.0 - o)
        dc = dc * f
        dh = da[t] @ W_hh
    da2 = da.reshape(T * B, 4 * H)
    g["W_ih"][...] = da2.T @ X.transpose(1, 0, 2).reshape(T * B, F)
    g["W_hh"][...] = da2.T @ hs[:T].reshape(T * B, H)
    g["b"][...] = da2.sum(axis=0)
    return loss, grad


def loss_and_grad_loops(theta: np.ndarray, X: np.ndarray, y: np.ndarray, shape: LSTMShape) -> tuple[float, np.ndarray]:
    """The same loss and gradient, one sample and one time step at a time (the slow reference): Python loops over
    samples and time, NumPy only for the per-sample matrix-vector products. This is what "serial" means later."""
    p = unpack(theta, shape)
    B, T, _ = X.shape
    H, O = shape.hidden, shape.n_outputs
    W_ih, W_hh, b, W_out, b_out = p["W_ih"], p["W_hh"], p["b"], p["W_out"], p["b_out"]
    grad = np.zeros_like(theta)
    g = unpack(grad, shape)
    scale = 2.0 / (B * O)
    total = 0.0
    for n in range(B):
        x = X[n]
        h, c, gates = [np.zeros(H, dtype=theta.dtype)], [np.zeros(H, dtype=theta.dtype)], []
        for t in range(T):
            a = W_ih @ x[t] + W_hh @ h[t] + b
            i, f, gg, o = sigmoid(a[:H]), sigmoid(a[H : 2 * H]), np.tanh(a[2 * H : 3 * H]), sigmoid(a[3 * H :])
            c.append(f * c[t] + i * gg)
            h.append(o * np.tanh(c[t + 1]))
            gates.append((i, f, gg, o))
        err = W_out @ h[T] + b_out - y[n]
        total += float(err @ err)
        dy = scale * err
        g["W_out"] += np.outer(dy, h[T])
        g["b_out"] += dy
        dh = W_out.T @ dy
        dc = np.zeros(H, dtype=theta.dtype)
        for t in range(T - 1, -1, -1):
            i, f, gg, o = gates[t]
            tc = np.tanh(c[t + 1])
            dc = dc + dh * o * (1.0 - tc * tc)
            da = np.concatenate([dc * gg * i * (1 - i), dc * c[t] * f * (1 - f), dc * i * (1 - gg * gg),
                                 dh * tc * o * (1 - o)])
            g["W_ih"] += np.outer(da, x[t])
            g["W_hh"] += np.outer(da, h[t])
            g["b"] += da
            dc = dc * f
            dh = W_hh.T @ da
    return total / (B * O), grad
