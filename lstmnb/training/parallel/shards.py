"""Uneven shards for DDP: each rank's share of the global batch sized from its measured throughput, so a slower
device does not hold back the fast ones; the comm hook that weights gradients by share."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from ...machine.device import clock
from ...errors import ConfigError
from .groups import DistEnv

def balanced_sizes(global_batch: int, throughputs: list[float]) -> list[int]:
    """Split ``global_batch`` samples among ranks in proportion to their samples/s (each >= 1), by largest-remainder
    rounding: the sizes add up to the global batch, so the steps per epoch do not change when the shares do."""
    n = len(throughputs)
    if global_batch < n:
        raise ConfigError(f"global batch {global_batch} is smaller than world_size={n}; each rank needs a sample")
    thr = [max(float(t), 0.0) if math.isfinite(t) else 0.0 for t in throughputs]
    total = sum(thr)
    if total <= 0:
        thr, total = [1.0] * n, float(n)
    spare = global_batch - n  # one sample per rank first, the rest by share
    raw = [spare * t / total for t in thr]
    sizes = [1 + int(r) for r in raw]
    left = global_batch - sum(sizes)
    for i in sorted(range(n), key=lambda i: raw[i] - int(raw[i]), reverse=True)[:left]:
        sizes[i] += 1
    return sizes


class ShareBalancer:
    """DDP comm-hook state for uneven shards: weights gradients by batch share and times local compute. Rank r's
    gradient is a mean over its b_r samples; scaled by b_r / B before a SUM all-reduce it gives the mean over the
    global batch B, as one process would. While ``measuring``, a step's compute time runs from the forward pre-hook
    to the last gradient bucket ready (before any wait for other ranks), so the throughput is the rank's own."""

    def __init__(self, env: DistEnv, weight: float):
        self.env, self.weight, self.measuring = env, weight, True
        self.compute_s, self.samples = 0.0, 0
        self._start: float | None = None
        self._ready: float | None = None

    def close_step(self) -> None:
        if self._start is not None and self._ready is not None:
            self.compute_s += self._ready - self._start
        self._start = self._ready = None

    def on_forward(self, module: nn.Module, args: tuple) -> None:
        if not (module.training and self.measuring):
            return
        self.close_step()
        self.samples += int(args[0].shape[0])
        self._start = clock(self.env.device)

    def throughput(self) -> float:
        self.close_step()
        return self.samples / self.compute_s if self.compute_s > 0 else 0.0


def weighted_allreduce_hook(state, bucket):
    """DDP communication hook (state: ShareBalancer, bucket: dist.GradBucket -> Future[Tensor]): scale the
    bucket by this rank's batch share, then SUM across ranks. No annotations: DDP checks them as objects,
    and this module's postponed annotations would be strings."""
    if state.measuring:
        state._ready = clock(state.env.device)
    buf = bucket.buffer()
    buf.mul_(state.weight)
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def share_batches(tr, x: torch.Tensor, y: torch.Tensor, sizes: list[int], rank: int):
    """Rank ``rank``'s slice of every global batch of ``sum(sizes)`` samples (same permutation on all ranks)."""
    total, lo, b = sum(sizes), sum(sizes[:rank]), sizes[rank]
    perm = torch.randperm(tr.n_train, generator=tr.gen).to(x.device)
    for i in range(tr.n_train // total):
        idx = perm[i * total + lo : i * total + lo + b]
        yield x.index_select(0, idx), y.index_select(0, idx)
