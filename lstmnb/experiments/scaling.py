"""Scaling experiments: DDP strong and weak scaling over world sizes (with the measured compute vs
communication split), DataParallel over 1..N GPUs with the same batch rule, and the uneven-shards
demonstration. Each point is a run record."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from ..errors import ConfigError
from ..machine.device import local_rank_limit
from ..records import Recorder
from ..rules import PYTHON, Spelling, check_fields, choice, ruled, whole
from ..training import parallel, train, with_overrides
from ..training.guards import stop_if_diverged

SCALING_MODES = ("strong", "weak")
MAX_COMM_STEPS = 10_000  # the compute vs communication split: far more than a stable median needs


@dataclass
class ScalingConfig:
    """World sizes to run and how the batch follows them. strong: the global batch stays ``global_batch`` (default: the
    run's batch_size) and each of N ranks takes global_batch / N; weak: each rank keeps the run's batch_size, so the
    global batch grows with N."""

    world_sizes: tuple[int, ...] = (1, 2)
    mode: str = ruled("strong", choice(SCALING_MODES))
    global_batch: int | None = ruled(None, whole(1))
    # steps timed with and without the gradient all-reduce per world size (its batches are all held while timed)
    comm_split_steps: int = ruled(20, whole(0, MAX_COMM_STEPS, says=f"0..{MAX_COMM_STEPS} (0: not measured)"))

    def per_device_batch(self, cfg, world_size: int) -> int:
        return cfg.batch_size if self.mode == "weak" else (self.global_batch or cfg.batch_size) // world_size

    def validate(self, cfg, say: Spelling = PYTHON) -> None:
        check_fields(self, say)
        sizes, top = list(self.world_sizes) if isinstance(self.world_sizes, (list, tuple)) else [], local_rank_limit()
        if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= top for n in sizes):
            raise say.refuse("world_sizes", self.world_sizes, f"must be whole numbers in 1..{top}")
        if self.mode == "strong":
            g = self.global_batch or cfg.batch_size
            bad = [n for n in sizes if g % n]
            if bad:
                lcm = math.lcm(*sizes)
                raise ConfigError(
                    f"strong scaling keeps the global batch fixed, but global batch {g} is not divisible by "
                    f"world size(s) {bad}; use a multiple of {lcm} (e.g. {lcm * max(1, round(g / lcm))})")


def scaling(windows, cfg, sc: ScalingConfig = ScalingConfig(), *, data_info: dict[str, Any] | None = None,
            results=None, on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
    """One DDP run per world size (local processes: GPUs, or gloo ranks on CPU); returns their records. Each record
    carries ``world_size``, the batch per device and globally, per-epoch validation loss and cumulative seconds (for
    convergence vs epoch and vs wall time), and ``parallel.comm_split``: the same steps timed with the gradient
    all-reduce and under ``no_sync``."""
    sc.validate(cfg)
    parallel.check_world_size(parallel.ddp_device_kind(cfg.device), max(sc.world_sizes), "world_sizes")
    recorder = Recorder(results, on_point)
    for n in sc.world_sizes:
        per = sc.per_device_batch(cfg, n)
        point = replace(cfg, strategy="ddp", nproc=n, batch_size=per, checkpoint=None, resume=False,
                        experiment=f"scaling-{sc.mode}")
        rec = parallel.launch_train(windows, point, n, data_info=data_info,
                                    options=parallel.RankOptions(comm_split_steps=sc.comm_split_steps)).record
        rec["scaling"] = {"mode": sc.mode, "world_sizes": list(sc.world_sizes), "per_device_batch": per,
                          "global_batch": per * n}
        stop_if_diverged(rec, results)
        recorder.add(rec)
    return recorder.records


def dataparallel_scaling(windows, data_info: dict[str, Any], base_cfg, world_sizes: Iterable[int], *,
                         mode: str = "weak", results=None) -> list[dict[str, Any]]:
    """``nn.DataParallel`` runs over 1..N GPUs, batches sized by ``ScalingConfig`` as DDP's are. weak: each GPU keeps
    ``batch_size`` (DataParallel's global batch is batch_size x N); strong: the global batch stays ``batch_size``.
    Records carry ``world_size`` like the DDP scaling records."""
    world_sizes = [int(n) for n in world_sizes]
    sc = ScalingConfig(world_sizes=tuple(world_sizes), mode=mode, comm_split_steps=0)
    sc.validate(base_cfg)
    recorder = Recorder(results)
    for n in world_sizes:
        per = sc.per_device_batch(base_cfg, n)
        cfg = with_overrides(base_cfg, strategy="dataparallel", nproc=n, batch_size=per * n,
                             experiment=f"scaling-{mode}", checkpoint=None, resume=False)
        record = train(windows, cfg, data_info=data_info).record
        record["scaling"] = {"mode": mode, "world_sizes": world_sizes, "per_device_batch": per, "global_batch": per * n}
        stop_if_diverged(record, results)
        recorder.add(record)
    return recorder.records


def uneven_demo(windows, cfg, slow_rank: int = 1, seconds_per_sample: float = 2e-4, world_size: int = 2,
                deadline_s: float | None = None) -> dict[str, dict[str, Any]]:
    """The same DDP run with one rank made slower, with even shards and with throughput-sized shards:
    {"even": record, "balanced": record}. The slowdown is a fixed sleep per training sample on ``slow_rank`` (a device
    that much slower); the balanced run measures it in its first epoch."""
    opts = parallel.RankOptions(slowdown_s_per_sample={slow_rank: seconds_per_sample})
    out = {}
    for name, uneven in (("even", False), ("balanced", True)):
        run_cfg = replace(cfg, strategy="ddp", nproc=world_size, uneven_shards=uneven, checkpoint=None,
                          resume=False, experiment=f"uneven-{name}")
        rec = parallel.launch_train(windows, run_cfg, world_size, options=opts, deadline_s=deadline_s).record
        rec["uneven_demo"] = {"slow_rank": slow_rank, "seconds_per_sample": seconds_per_sample}
        out[name] = rec
    return out
