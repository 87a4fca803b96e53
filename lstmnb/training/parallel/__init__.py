"""Multi-device training, one strategy picked by ``train_parallel``: DataParallel over one process's GPUs (here;
kept because the series measures it, DDP is recommended), and DistributedDataParallel, one process per device
(NCCL on GPUs, gloo on CPU), each rank driving the same ``Trainer`` as a single-device run (``ddp``: with each
rank's share of a batch and its own dropout stream), under torchrun or started as local processes (``launcher``);
``groups`` joins them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ...errors import ConfigError, DeviceError
from ...machine.device import cuda_missing
from ...rules import PYTHON, Spelling
from ..evaluate import RunResult
from ..trainer import Trainer
from .ddp import (RankOptions, ShareBalancer, balanced_sizes, comm_split, own_replica_streams, train_rank,
                  weighted_allreduce_hook)
from .groups import (DistEnv, DistributedError, barrier, check_world_size, close_distributed, ddp_device_kind,
                     init_distributed, is_rank_zero, under_launcher)
from .launcher import launch_train, spawn


class _InDtype(nn.Module):
    """A replica that enters the run's autocast (``adtype``; None: off) in its own forward, whichever thread runs it."""

    def __init__(self, replica: nn.Module, adtype: torch.dtype | None):
        super().__init__()
        self.replica, self.adtype = replica, adtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(args[0].device.type, dtype=self.adtype, enabled=self.adtype is not None):
            return self.replica(*args, **kwargs)


class ReplicaDataParallel(nn.DataParallel):
    """``nn.DataParallel`` that prepares its replicas, and only them, as it makes them each forward.

    Autocast: torch's worker threads re-enter autocast without a dtype, which is per thread, CUDA's default float16
    (``torch/nn/parallel/parallel_apply.py``; pytorch#60706), so each replica enters the run's dtype in its own
    forward (else a bf16 run trains in float16 with no loss scaler). cuDNN would warn and copy the replicas' weights
    (not one contiguous chunk) per call, so each is flattened once when made. The original module, flat from
    ``.to(device)``, is never hooked: flattening copies every time (``RNNBase.flatten_parameters``), slowing the
    one-GPU path, evaluation and any later use of the model."""

    def __init__(self, module: nn.Module, device_ids: list[int], adtype: torch.dtype | None):
        super().__init__(module, device_ids=device_ids)
        self.adtype = adtype

    def replicate(self, module: nn.Module, device_ids: Sequence[int | torch.device]) -> list[nn.Module]:
        replicas = super().replicate(module, device_ids)
        for rnn in (m for r in replicas for m in r.modules() if isinstance(m, nn.RNNBase)):
            rnn.flatten_parameters()
        return [_InDtype(r, self.adtype) for r in replicas]


def train_dataparallel(windows, cfg, *, data_info: dict[str, Any] | None = None,
                       on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                       state: dict[str, Any] | None = None, say: Spelling = PYTHON):
    """``nn.DataParallel`` over ``cfg.nproc`` (default all) visible GPUs; batch_size is the global batch. Refusals
    name settings as ``say`` spells them."""
    dp = say("strategy", "dataparallel")
    if not torch.cuda.is_available():
        raise DeviceError(cuda_missing(dp, f"use {say('strategy', 'ddp')} (runs over gloo on CPU) or "
                                           f"{say('strategy', 'single')}"))
    if cfg.compile:
        raise ConfigError(f"{say('compile', True)} is not supported with {dp}; use {say('strategy', 'ddp')}")
    if (cfg.device or "auto").lower() not in ("auto", "cuda", "cuda:0"):
        raise ConfigError(f"{say('device', cfg.device)} with {dp}: use auto or cuda "
                          f"(DataParallel gathers on cuda:0 and uses {say.key('nproc')} GPUs from there)")
    count = torch.cuda.device_count()
    n = cfg.nproc or count
    if n > count:
        raise DeviceError(f"{say('nproc', n)} GPUs asked for DataParallel, but only {count} visible; use "
                          f"{say('nproc', count)}")
    device = torch.device("cuda", 0)
    tr = Trainer(windows, cfg, device, say=say)
    tr.restore(state)
    own_replica_streams(cfg.seed, list(range(n)), tr.start_epoch)  # each GPU's share of a batch: its own masks
    tr.model = ReplicaDataParallel(tr.core, list(range(n)), tr.adtype)
    tr.machine.start_peak()  # cuda:0, as every strategy; the other GPUs' peaks below
    for i in range(1, n):
        torch.cuda.reset_peak_memory_stats(i)
    tr.fit(f"dataparallel x{n}", on_epoch_end, world_size=n)
    info = {"strategy": "dataparallel", "world_size": n, "device_ids": list(range(n)),
            "global_batch": cfg.batch_size, "per_gpu_batch": cfg.batch_size / n,
            "peak_mb_per_gpu": [torch.cuda.max_memory_allocated(i) / 2**20 for i in range(n)]}
    record = tr.finish(data_info, world_size=n, parallel=info)
    return RunResult(record=record, model=tr.core, windows=windows, device=device, history=tr.history)


def train_parallel(windows, cfg, *, data_info: dict[str, Any] | None = None,
                   on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                   options: RankOptions | None = None, state: dict[str, Any] | None = None, say: Spelling = PYTHON):
    """``train.train`` for strategies other than single: DataParallel here, DDP as a rank or by launching ranks.
    Under torchrun (or in a process group the caller made) this process is one rank; otherwise ``cfg.nproc``
    (default 1) local processes are started. ``state``: the checkpoint the caller already loaded for ``cfg.resume``;
    ``say``: how refusals name settings (``nproc=4``, ``--nproc 4``)."""
    if cfg.strategy == "dataparallel":
        return train_dataparallel(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end, state=state, say=say)
    if (dist.is_available() and dist.is_initialized()) or under_launcher():
        if cfg.nproc and under_launcher() and cfg.nproc != int(os.environ["WORLD_SIZE"]):
            raise ConfigError(f"{say('nproc', cfg.nproc)} but the launcher started WORLD_SIZE="
                              f"{os.environ['WORLD_SIZE']} ranks; under torchrun leave {say.key('nproc')} out "
                              "(torchrun's --nproc-per-node sets it)")
        env = init_distributed(cfg.device, cfg.dist_timeout_s, cfg.threads)
        result = train_rank(windows, cfg, env, data_info=data_info, on_epoch_end=on_epoch_end, options=options,
                            state=state, say=say)
        close_distributed(env)
        return result
    return launch_train(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end, options=options, state=state,
                        say=say)


__all__ = [
    "DistEnv", "DistributedError", "RankOptions", "ShareBalancer", "balanced_sizes", "barrier", "check_world_size",
    "close_distributed", "comm_split", "ddp_device_kind", "init_distributed", "is_rank_zero", "launch_train",
    "spawn", "train_dataparallel", "train_parallel", "train_rank", "under_launcher", "weighted_allreduce_hook",
]
