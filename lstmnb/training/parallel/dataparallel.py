"""nn.DataParallel over the visible GPUs of one process (kept because the series measures it; DDP is
the recommended multi-GPU strategy)."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from torch import nn

from ...device import cuda_missing
from ...errors import ConfigError, DeviceError
from ..trainer import RunResult, Trainer
from .streams import own_replica_streams

_CUDNN_RNN_WARNING = "RNN module weights are not part of single contiguous chunk of memory"


def _flatten_rnn_weights(module: nn.RNNBase, args: tuple) -> None:
    module.flatten_parameters()


def flatten_for_dataparallel(core: nn.Module) -> None:
    """Keep cuDNN's RNN weights in one contiguous block on every DataParallel replica.

    DataParallel copies the weights to each GPU per forward; the copies are not one contiguous
    chunk, and cuDNN would warn on every call. A forward pre-hook (copied onto each replica) calls
    ``flatten_parameters`` first; the warning, should it still appear, is shown once.
    """
    for m in core.modules():
        if isinstance(m, nn.RNNBase):
            m.flatten_parameters()
            m.register_forward_pre_hook(_flatten_rnn_weights)
    warnings.filterwarnings("once", message=_CUDNN_RNN_WARNING)



def train_dataparallel(windows, cfg, *, data_info: dict[str, Any] | None = None,
                       on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                       state: dict[str, Any] | None = None):
    """``nn.DataParallel`` over ``cfg.nproc`` (default all) visible GPUs; batch_size is the global batch."""
    if not torch.cuda.is_available():
        raise DeviceError(cuda_missing("strategy='dataparallel'",
                                       "use strategy='ddp' (runs over gloo on CPU) or 'single'"))
    if cfg.compile:
        raise ConfigError("compile=True is not supported with strategy='dataparallel'; use strategy='ddp'")
    if (cfg.device or "auto").lower() not in ("auto", "cuda", "cuda:0"):
        raise ConfigError(f"device={cfg.device!r} with strategy='dataparallel': use auto or cuda "
                          f"(DataParallel gathers on cuda:0 and uses nproc GPUs from there)")
    count = torch.cuda.device_count()
    n = cfg.nproc or count
    if n > count:
        raise DeviceError(f"nproc={n} GPUs asked for DataParallel, but only {count} visible; use --nproc {count}")
    device = torch.device("cuda", 0)
    tr = Trainer(windows, cfg, device)
    tr.restore(state)
    own_replica_streams(cfg.seed, list(range(n)), tr.start_epoch)  # each GPU's share of a batch: its own masks
    flatten_for_dataparallel(tr.core)
    tr.model = nn.DataParallel(tr.core, device_ids=list(range(n)))
    tr.start_peak_memory()  # cuda:0, as every strategy; the other GPUs' peaks below
    for i in range(1, n):
        torch.cuda.reset_peak_memory_stats(i)
    tr.fit(f"dataparallel x{n}", on_epoch_end, world_size=n)
    info = {"strategy": "dataparallel", "world_size": n, "device_ids": list(range(n)),
            "global_batch": cfg.batch_size, "per_gpu_batch": cfg.batch_size / n,
            "peak_mb_per_gpu": [torch.cuda.max_memory_allocated(i) / 2**20 for i in range(n)]}
    record = tr.finish(data_info, world_size=n, parallel=info)
    return RunResult(record=record, model=tr.core, windows=windows, device=device, history=tr.history)

