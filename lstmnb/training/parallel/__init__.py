"""Multi-device training: DataParallel (``dataparallel``), and DistributedDataParallel, one process per device
(NCCL on GPUs, gloo on CPU), each rank driving the same ``Trainer`` as a single-device run (``ddp``), under
torchrun or started as local processes (``launcher``); ``groups`` joins them, ``shards`` sizes uneven shares
and ``streams`` gives each its own dropout."""

from __future__ import annotations

import os
from typing import Any, Callable

import torch.distributed as dist

from ...errors import ConfigError
from .dataparallel import train_dataparallel
from .ddp import RankOptions, comm_split, train_rank
from .groups import (DistEnv, DistributedError, barrier, check_world_size, close_distributed, ddp_device_kind,
                     init_distributed, is_rank_zero, under_launcher)
from .launcher import launch_train, spawn
from .shards import ShareBalancer, balanced_sizes, weighted_allreduce_hook


def train_parallel(windows, cfg, *, data_info: dict[str, Any] | None = None,
                   on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                   options: RankOptions | None = None, state: dict[str, Any] | None = None):
    """``train.train`` for strategies other than single: DataParallel here, DDP as a rank or by launching ranks.
    Under torchrun (or in a process group the caller made) this process is one rank; otherwise ``cfg.nproc``
    (default 1) local processes are started. ``state``: the checkpoint the caller already loaded for ``cfg.resume``."""
    if cfg.strategy == "dataparallel":
        return train_dataparallel(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end, state=state)
    if (dist.is_available() and dist.is_initialized()) or under_launcher():
        if cfg.nproc and under_launcher() and cfg.nproc != int(os.environ["WORLD_SIZE"]):
            raise ConfigError(f"nproc={cfg.nproc} but the launcher started WORLD_SIZE={os.environ['WORLD_SIZE']} "
                              f"ranks; under torchrun leave --nproc out (torchrun's --nproc-per-node sets it)")
        env = init_distributed(cfg.device, cfg.dist_timeout_s, cfg.threads)
        result = train_rank(windows, cfg, env, data_info=data_info, on_epoch_end=on_epoch_end, options=options,
                            state=state)
        close_distributed(env)
        return result
    return launch_train(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end, options=options, state=state)


__all__ = [
    "DistEnv", "DistributedError", "RankOptions", "ShareBalancer", "balanced_sizes", "barrier", "check_world_size",
    "close_distributed", "comm_split", "ddp_device_kind", "init_distributed", "is_rank_zero", "launch_train",
    "spawn", "train_dataparallel", "train_parallel", "train_rank", "under_launcher", "weighted_allreduce_hook",
]
