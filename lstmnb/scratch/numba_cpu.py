"""The ``numba-cpu`` version: the scalar per-sample kernel compiled by Numba, samples split over threads.

Parallel idea: the samples of a mini-batch are independent until their gradients are summed. The batch is cut into one
contiguous part per thread (``prange``); each thread runs forward + BPTT for its samples into its own private gradient
row, so no two threads write the same memory, and a second parallel loop reduces the rows into one gradient. Compiled
functions are cached on disk (``cache=True``): only the first run on a machine pays the compile time.

``sample_loss_grad`` is plain Python on purpose: ``numba.njit`` compiles it here and ``numba.cuda.jit(device=True)``
into the per-thread work of the CUDA version, one source for both. It lives next to its cached callers because Numba's
on-disk cache checks only the modification time of the cached function's own file."""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from .lstm import LSTMShape


def sample_loss_grad(x, y, W_ih, W_hh, b, W_out, b_out, gW_ih, gW_hh, gb, gW_out, gb_out,
                     acts, cs, hs, tcs, work, scale, one):  # pragma: no cover - compiled
    """Squared error of one sample (summed over outputs); adds ``scale`` x its gradient into the g* arrays. x (T, F)
    inputs; y (O,) targets; weights as in ``LSTMShape.offsets`` and gradient arrays of the same shapes; workspaces
    acts (T, 4H), cs and hs (T+1, H), tcs (T, H) for tanh(c_t), work (3, 4H) for dh, dc and the gate gradients.
    ``scale`` is 2 / (batch x outputs), the derivative of the MSE. tanh and sigmoid are written with ``exp``: a compiled
    scalar ``exp`` costs a quarter of a scalar ``tanh``, and each step needs 5H of them. ``one`` is 1 in the working
    dtype, and every constant is made from it (``scale`` comes in that dtype too): from an untyped literal such as
    ``0.0``, a float64, Numba would carry everything in float64 (on a T4, 1/32 of the float32 rate)."""
    zero, two = one - one, one + one
    T, F = x.shape
    O, H = y.shape[0], W_hh.shape[1]
    G4 = 4 * H
    for k in range(H):
        hs[0, k] = zero
        cs[0, k] = zero
    # forward: gate pre-activations (one dot product per row of the weights), then c_t and h_t
    for t in range(T):
        for r in range(G4):
            s = zero  # a fresh accumulator lets the compiler vectorise the sum
            for k in range(H):
                s += W_hh[r, k] * hs[t, k]
            for j in range(F):
                s += W_ih[r, j] * x[t, j]
            s += b[r]
            if 2 * H <= r < 3 * H:
                acts[t, r] = two / (one + math.exp(-two * s)) - one  # tanh(s)
            else:
                acts[t, r] = one / (one + math.exp(-s))  # sigmoid(s)
        for k in range(H):
            c = acts[t, H + k] * cs[t, k] + acts[t, k] * acts[t, 2 * H + k]
            cs[t + 1, k] = c
            tc = two / (one + math.exp(-two * c)) - one  # tanh(c), kept for the backward pass
            tcs[t, k] = tc
            hs[t + 1, k] = acts[t, 3 * H + k] * tc
    # read-out and loss; dh = W_out^T dy starts the backward pass
    for k in range(H):
        work[0, k] = zero  # dh
        work[1, k] = zero  # dc
    loss = zero
    for q in range(O):
        s = zero
        for k in range(H):
            s += W_out[q, k] * hs[T, k]
        e = s + b_out[q] - y[q]
        loss += e * e
        dy = scale * e
        gb_out[q] += dy
        for k in range(H):
            gW_out[q, k] += dy * hs[T, k]
            work[0, k] += dy * W_out[q, k]
    # backward through time
    for t in range(T - 1, -1, -1):
        for k in range(H):
            i = acts[t, k]
            f = acts[t, H + k]
            gg = acts[t, 2 * H + k]
            o = acts[t, 3 * H + k]
            tc = tcs[t, k]
            dh = work[0, k]
            dc = work[1, k] + dh * o * (one - tc * tc)
            work[2, k] = dc * gg * i * (one - i)
            work[2, H + k] = dc * cs[t, k] * f * (one - f)
            work[2, 2 * H + k] = dc * i * (one - gg * gg)
            work[2, 3 * H + k] = dh * tc * o * (one - o)
            work[1, k] = dc * f
            work[0, k] = zero
        for r in range(G4):
            a = work[2, r]
            gb[r] += a
            for j in range(F):
                gW_ih[r, j] += a * x[t, j]
            for k in range(H):
                gW_hh[r, k] += a * hs[t, k]
        for r in range(G4):  # dh_{t-1} = W_hh^T da_t
            a = work[2, r]
            for k in range(H):
                work[0, k] += W_hh[r, k] * a
    return loss


def workspace_shapes(T: int, H: int) -> tuple[tuple[int, int], ...]:
    """The shapes of ``sample_loss_grad``'s workspaces for one sample of T steps: acts, cs, hs, tcs, work."""
    return (T, 4 * H), (T + 1, H), (T + 1, H), (T, H), (3, 4 * H)


# Reassociation lets LLVM vectorise the dot products (sums in a different order: same numbers to rounding).
# No 'nnan'/'ninf' flags: exp(-s) may legitimately overflow to inf for saturated gates.
FASTMATH = {"reassoc", "contract", "arcp", "nsz"}

sample_loss_grad_nb = njit(cache=True, nogil=True, fastmath=FASTMATH)(sample_loss_grad)


@njit(cache=True, nogil=True)
def unpack_nb(v, F, H, O):  # pragma: no cover - compiled
    """Views of W_ih, W_hh, b, W_out, b_out inside a flat vector (the layout of ``LSTMShape``)."""
    G4 = 4 * H
    a = G4 * F
    b = a + G4 * H
    c = b + G4
    d = c + O * H
    return v[:a].reshape((G4, F)), v[a:b].reshape((G4, H)), v[b:c], v[c:d].reshape((O, H)), v[d : d + O]


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def batch_loss_grad(X, Y, idx, theta, H, scale, one, parts, acts, cs, hs, tcs, work):  # pragma: no cover - compiled
    """(sum of squared errors, gradient of the mean) over the samples ``idx``, both reduced. parts (n_parts, P) are the
    threads' private gradients; acts, cs, hs, tcs, work hold one workspace per part."""
    F = X.shape[2]
    O = Y.shape[1]
    n_parts = parts.shape[0]
    B = idx.shape[0]
    P = theta.shape[0]
    W_ih, W_hh, b, W_out, b_out = unpack_nb(theta, F, H, O)
    losses = np.zeros(n_parts)
    for c in prange(n_parts):  # one part of the batch per thread
        gc = parts[c]
        gc[:] = 0.0
        gW_ih, gW_hh, gb, gW_out, gb_out = unpack_nb(gc, F, H, O)
        for s in range(c * B // n_parts, (c + 1) * B // n_parts):
            n = idx[s]
            losses[c] += sample_loss_grad_nb(
                X[n], Y[n], W_ih, W_hh, b, W_out, b_out, gW_ih, gW_hh, gb, gW_out, gb_out,
                acts[c], cs[c], hs[c], tcs[c], work[c], scale, one,
            )
    grad = np.empty(P, dtype=theta.dtype)
    for p in prange(P):  # the reduction over threads
        total = 0.0
        for c in range(n_parts):
            total += parts[c, p]
        grad[p] = total
    return losses.sum(), grad


class NumbaCPUGrad:
    """Workspaces sized once for a batch size; ``__call__`` gives (mean loss, gradient) for a batch."""

    def __init__(self, X: np.ndarray, y: np.ndarray, shape: LSTMShape, batch_size: int, dtype: np.dtype):
        self.X, self.y = (np.ascontiguousarray(a, dtype=dtype) for a in (X, y))
        self.H = int(shape.hidden)
        self.n_parts = max(1, min(get_num_threads(), batch_size))
        self.parts = np.zeros((self.n_parts, shape.n_params), dtype=dtype)
        self.work = [np.zeros((self.n_parts, *shp), dtype=dtype) for shp in workspace_shapes(X.shape[1], self.H)]

    def __call__(self, theta: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        n_out = self.y.shape[1]
        kind = self.X.dtype.type  # constants in the working dtype (see sample_loss_grad)
        sse, grad = batch_loss_grad(
            self.X, self.y, np.asarray(idx, np.int64), theta, self.H, kind(2.0 / (len(idx) * n_out)), kind(1.0),
            self.parts, *self.work,
        )
        return float(sse) / (len(idx) * n_out), grad
