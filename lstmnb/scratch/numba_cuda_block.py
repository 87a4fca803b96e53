"""The ``numba-cuda-block`` version: a thread block per sample (or a few), a thread per hidden unit (``numba-cuda``: a
thread per sample). Numbers from the equations of ``loss_and_grad_numpy``, tested under the simulator; kernels compiled
at the first launch, once per (dtype, hidden, samples per block).

* Block = S samples x H threads (``blockDim = (H, S)``). Thread k of a sample computes unit k's four gate
  pre-activations (four independent dot products, side by side in its pipeline), then c_t (in its register) and h_t (to
  shared memory, double-buffered, so **one** ``cuda.syncthreads()`` per step is enough: step t reads buffer t % 2 and
  writes the other, overwritten only after every thread passed the barrier of the step that read it).
* Backward (BPTT) the same way: thread k forms unit k's four gate gradients from dh and dc (dc in its register), writes
  them to shared memory (double-buffered), one barrier, then dh_{t-1}[k] = sum_r W_hh[r, k] da_t[r] over all 4H rows.
* Then threads spread over all parameters: each gradient entry, summed over the block's samples and steps, goes to the
  block's row of a (blocks x parameters) buffer, whose rows a second kernel sums (a thread per parameter).
* Weights are read from global memory (cached), laid out for coalesced reads: W_ih^T and W_hh^T forward, W_hh backward.

Not a thread per gate row (4H per sample): c_t needs all four gates of a unit, so a second barrier per step, or warp
shuffles, which Numba's CUDA simulator (the only way to test CUDA kernels without a GPU) cannot run."""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, from_dtype

from ..errors import ConfigError
from .cuda_check import simulator_enabled
from .lstm import LSTMShape, unpack
from .numba_cuda import DeviceGrad, split_params

THREADS_TARGET = 128  # threads per block the default samples-per-block aims at
MAX_THREADS = 1024  # CUDA's limit per block
SHARED_BYTES = 48 * 1024  # static shared memory a block may use without opting in
REDUCE_THREADS = 128
WARP = 32
# Registers are given to a block per warp, in units of 256 (CUDA C Programming Guide, "Compute Capabilities" table,
# and NVIDIA's occupancy calculator: allocation unit 256, warp granularity, SM 5.0-9.0).
REGISTER_UNIT = 256


def default_samples_per_block(hidden: int, batch_size: int) -> int:
    """Samples per block: enough to give a block about THREADS_TARGET threads, at most the batch."""
    return max(1, min(int(batch_size), THREADS_TARGET // int(hidden)))


def check_block(hidden: int, samples: int, dtype: np.dtype) -> None:
    """ConfigError when a block of ``samples`` x ``hidden`` threads, with its shared buffers, cannot launch."""
    if not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ConfigError(f"samples_per_block={samples!r} must be a positive whole number")
    if hidden * samples > MAX_THREADS:
        raise ConfigError(f"numba-cuda-block runs hidden x samples_per_block = {hidden} x {samples} threads per "
                          f"block; CUDA allows at most {MAX_THREADS} (hidden <= {MAX_THREADS})")
    shared = 2 * samples * 5 * hidden * np.dtype(dtype).itemsize  # h (H) and gate gradients (4H), two buffers
    if shared > SHARED_BYTES:
        raise ConfigError(f"numba-cuda-block needs {shared} bytes of shared memory per block for hidden={hidden}, "
                          f"samples_per_block={samples}, {np.dtype(dtype).name}; at most {SHARED_BYTES} "
                          f"(use a smaller hidden size or float32)")


def registers_per_block(threads: int, regs_per_thread: int) -> int:
    """Registers a block of ``threads`` threads takes when each uses ``regs_per_thread``. Pure."""
    warps = math.ceil(threads / WARP)
    return warps * math.ceil(regs_per_thread * WARP / REGISTER_UNIT) * REGISTER_UNIT


def check_registers(hidden: int, samples: int, dtype: np.dtype, regs_per_thread: int, regs_per_block: int) -> None:
    """ConfigError when the block's threads need more registers than the GPU gives one block (the launch would fail
    with 'too many resources requested'). ``regs_per_thread`` is the compiled kernel's own count (a float64 value takes
    two registers); ``regs_per_block`` the GPU's limit (``MAX_REGISTERS_PER_BLOCK``, 65536 on SM >= 5.0). Pure."""
    need = registers_per_block(hidden * samples, regs_per_thread)
    if need > regs_per_block:
        raise ConfigError(f"numba-cuda-block: a block of hidden x samples_per_block = {hidden} x {samples} threads "
                          f"using {regs_per_thread} registers each ({np.dtype(dtype).name}) needs {need} registers; "
                          f"this GPU gives a block at most {regs_per_block} (use fewer samples per block, a smaller "
                          f"hidden size or float32)")


def samples_that_fit(hidden: int, samples: int, regs_per_thread: int, regs_per_block: int) -> int:
    """The most samples per block, at most ``samples``, whose threads' registers fit in a block; 0 if none. Pure."""
    fits = (s for s in range(int(samples), 0, -1) if registers_per_block(hidden * s, regs_per_thread) <= regs_per_block)
    return next(fits, 0)


@functools.cache
def build_kernels(dtype_name: str, H: int, S: int):
    """The forward+backward kernel and the reduction kernel for one dtype, hidden size H and S samples per block
    (compile-time constants: they size the shared buffers); constants in the working dtype keep float32 in float32."""
    nb_dtype = from_dtype(np.dtype(dtype_name))
    scalar = np.dtype(dtype_name).type
    ZERO, HALF, ONE = scalar(0.0), scalar(0.5), scalar(1.0)
    G4 = 4 * H

    @cuda.jit
    def lstm_block_kernel(X, Y, idx, B, WxT, WhT, Wh, b, W_out, b_out, scale,
                          acts, cs, tcs, hs, da, err, parts):  # pragma: no cover - compiled
        """Block blk: forward, loss and BPTT of batch slots blk*S ... blk*S+S-1, then their gradient (and, last,
        their summed squared error) into parts[blk]."""
        k = cuda.threadIdx.x  # hidden unit
        sl = cuda.threadIdx.y  # sample slot inside the block
        blk = cuda.blockIdx.x
        s = blk * S + sl  # slot in the batch; slots past the batch rerun the last sample and are not summed
        n = idx[min(s, B - 1)]
        T, F, O = X.shape[1], X.shape[2], Y.shape[1]
        h_sh = cuda.shared.array((2, S, H), nb_dtype)
        da_sh = cuda.shared.array((2, S, G4), nb_dtype)
        h_sh[0, sl, k] = ZERO
        hs[s, 0, k] = ZERO
        cs[s, 0, k] = ZERO
        c = ZERO
        cur = 0
        cuda.syncthreads()
        for t in range(T):  # forward
            a_i = b[k]
            a_f = b[H + k]
            a_g = b[2 * H + k]
            a_o = b[3 * H + k]
            for j in range(F):
                xv = X[n, t, j]
                a_i += WxT[j, k] * xv
                a_f += WxT[j, H + k] * xv
                a_g += WxT[j, 2 * H + k] * xv
                a_o += WxT[j, 3 * H + k] * xv
            for m in range(H):
                hv = h_sh[cur, sl, m]
                a_i += WhT[m, k] * hv
                a_f += WhT[m, H + k] * hv
                a_g += WhT[m, 2 * H + k] * hv
                a_o += WhT[m, 3 * H + k] * hv
            i = HALF + HALF * math.tanh(HALF * a_i)  # sigmoid, written as NumPy's version writes it
            f = HALF + HALF * math.tanh(HALF * a_f)
            g = math.tanh(a_g)
            o = HALF + HALF * math.tanh(HALF * a_o)
            c = f * c + i * g
            tc = math.tanh(c)
            h = o * tc
            acts[s, t, k] = i
            acts[s, t, H + k] = f
            acts[s, t, 2 * H + k] = g
            acts[s, t, 3 * H + k] = o
            cs[s, t + 1, k] = c
            tcs[s, t, k] = tc
            hs[s, t + 1, k] = h
            h_sh[1 - cur, sl, k] = h
            cuda.syncthreads()  # the step's one barrier: all of h_t is in shared memory
            cur = 1 - cur
        for q in range(k, O, H):  # read-out: the units share the outputs
            yh = b_out[q]
            for m in range(H):
                yh += W_out[q, m] * h_sh[cur, sl, m]
            err[s, q] = yh - Y[n, q]
        cuda.syncthreads()
        dh = ZERO
        for q in range(O):
            dh += W_out[q, k] * err[s, q]
        dh *= scale
        dc = ZERO
        cur = 0
        for t in range(T - 1, -1, -1):  # backward through time
            i = acts[s, t, k]
            f = acts[s, t, H + k]
            g = acts[s, t, 2 * H + k]
            o = acts[s, t, 3 * H + k]
            tc = tcs[s, t, k]
            dc += dh * o * (ONE - tc * tc)
            d_i = dc * g * i * (ONE - i)
            d_f = dc * cs[s, t, k] * f * (ONE - f)
            d_g = dc * i * (ONE - g * g)
            d_o = dh * tc * o * (ONE - o)
            dc *= f
            da[s, t, k] = d_i
            da[s, t, H + k] = d_f
            da[s, t, 2 * H + k] = d_g
            da[s, t, 3 * H + k] = d_o
            da_sh[cur, sl, k] = d_i
            da_sh[cur, sl, H + k] = d_f
            da_sh[cur, sl, 2 * H + k] = d_g
            da_sh[cur, sl, 3 * H + k] = d_o
            cuda.syncthreads()  # the step's one barrier: all gate gradients of step t are in shared memory
            dh = ZERO
            for r in range(G4):
                dh += Wh[r, k] * da_sh[cur, sl, r]
            cur = 1 - cur
        cuda.syncthreads()  # the block's da, hs and err (global memory) are now visible to all its threads
        # the block's gradient: threads over all parameters, each summed over samples and time steps
        n_valid = min(S, B - blk * S)
        o_whh = G4 * F
        o_b = o_whh + G4 * H
        o_wout = o_b + G4
        o_bout = o_wout + O * H
        P = o_bout + O
        for p in range(sl * H + k, P + 1, S * H):
            acc = ZERO
            for u in range(n_valid):
                s2 = blk * S + u
                if p < o_whh:
                    r = p // F
                    j = p - r * F
                    n2 = idx[s2]
                    for t in range(T):
                        acc += da[s2, t, r] * X[n2, t, j]
                elif p < o_b:
                    r = (p - o_whh) // H
                    m = p - o_whh - r * H
                    for t in range(T):
                        acc += da[s2, t, r] * hs[s2, t, m]
                elif p < o_wout:
                    for t in range(T):
                        acc += da[s2, t, p - o_b]
                elif p < o_bout:
                    q = (p - o_wout) // H
                    m = p - o_wout - q * H
                    acc += scale * err[s2, q] * hs[s2, T, m]
                elif p < P:
                    acc += scale * err[s2, p - o_bout]
                else:
                    for q in range(O):
                        acc += err[s2, q] * err[s2, q]
            parts[blk, p] = acc

    @cuda.jit
    def reduce_kernel(parts, n_blocks, out):  # pragma: no cover - compiled
        """Thread p: out[p] = sum of parts[:n_blocks, p] (gradient entries and, last, the squared error)."""
        p = cuda.grid(1)
        if p < out.shape[0]:
            acc = ZERO
            for blk in range(n_blocks):
                acc += parts[blk, p]
            out[p] = acc

    return lstm_block_kernel, reduce_kernel


class NumbaCUDABlockGrad(DeviceGrad):
    """A thread block per few samples, a thread per hidden unit; ``__call__`` gives (mean loss, gradient)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, shape: LSTMShape, batch_size: int, dtype: np.dtype,
                 samples_per_block: int | None = None):
        super().__init__(X, y, shape, batch_size, dtype)
        H, P, F = self.H, self.P, shape.n_features
        self.S = samples_per_block or default_samples_per_block(H, batch_size)
        check_block(H, self.S, self.dtype)
        self.kernel, self.reduce = build_kernels(self.dtype.name, H, self.S)
        self.T = X.shape[1]
        # weights as they travel each batch: theta, then W_ih^T and W_hh^T (coalesced forward reads)
        self.host_w = np.empty(P + 4 * H * F + 4 * H * H, dtype=self.dtype)
        self.d_w = cuda.device_array(self.host_w.size, dtype=self.dtype)
        self.weights = split_params(self.d_w[:P], shape)
        self.d_WxT = self.d_w[P : P + 4 * H * F].reshape((F, 4 * H))
        self.d_WhT = self.d_w[P + 4 * H * F :].reshape((H, 4 * H))
        self.shape = shape
        self.allocate_workspaces()
        if not simulator_enabled():  # the simulator has no registers to count
            self.fit_registers(explicit=samples_per_block is not None)

    def allocate_workspaces(self) -> None:
        """Per-slot workspaces for blocks of ``self.S`` samples (every slot of every block has its own)."""
        H, O, P, T, S, dtype = self.H, self.O, self.P, self.T, self.S, self.dtype
        slots = math.ceil(self.batch_size / S) * S
        per_slot = ((T, 4 * H), (T, 4 * H), (T + 1, H), (T + 1, H), (T, H), (O,))
        self.d_acts, self.d_da, self.d_cs, self.d_hs, self.d_tcs, self.d_err = (
            cuda.device_array((slots, *shp), dtype=dtype) for shp in per_slot)
        self.d_parts = cuda.device_array((slots // S, P + 1), dtype=dtype)

    def kernel_args(self, d_idx, B: int, scale) -> tuple:
        """The block kernel's arguments for a batch of ``B`` samples (indices ``d_idx``) and loss scale."""
        return (self.d_X, self.d_y, d_idx, B, self.d_WxT, self.d_WhT, *self.weights[1:], scale, self.d_acts,
                self.d_cs, self.d_tcs, self.d_hs, self.d_da, self.d_err, self.d_parts)

    def fit_registers(self, explicit: bool) -> None:
        """Compile the kernel for this run's arguments and check its registers against the GPU's limit per block: an
        explicit ``samples_per_block`` that does not fit is a ConfigError; the default is lowered until it fits."""
        limit = cuda.get_current_device().MAX_REGISTERS_PER_BLOCK
        while True:
            args = self.kernel_args(self.d_idx, self.batch_size, self.dtype.type(1.0))
            regs = self.kernel.compile(tuple(self.kernel.typeof_pyval(a) for a in args)).regs_per_thread
            fit = samples_that_fit(self.H, self.S, regs, limit)  # with the overload later launches use
            if fit == self.S:
                return
            if explicit or fit == 0:
                check_registers(self.H, self.S if explicit else 1, self.dtype, regs, limit)
            self.S = fit
            self.kernel, self.reduce = build_kernels(self.dtype.name, self.H, self.S)
            self.allocate_workspaces()

    def launch(self, theta: np.ndarray, d_idx, B: int, scale) -> None:
        # theta and the transposed input and recurrent weights, in one copy to the device
        p, w, n = unpack(theta, self.shape), self.host_w, self.P + 4 * self.H * self.shape.n_features
        w[: self.P] = theta
        w[self.P : n] = p["W_ih"].T.ravel()
        w[n:] = p["W_hh"].T.ravel()
        self.d_w.copy_to_device(w)
        n_blocks = math.ceil(B / self.S)
        self.kernel[n_blocks, (self.H, self.S)](*self.kernel_args(d_idx, B, scale))
        self.reduce[math.ceil((self.P + 1) / REDUCE_THREADS), REDUCE_THREADS](self.d_parts, n_blocks, self.d_out)
