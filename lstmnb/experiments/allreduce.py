"""All-reduce bandwidth: ``torch.distributed.all_reduce`` timed per buffer size over local ranks,
with the model's gradient size among the points (algbw and busbw as nccl-tests define them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..machine.device import clock, host_memory_bytes, local_rank_limit
from ..errors import ConfigError
from ..models import Forecaster, count_parameters
from ..records import new_record
from ..rules import PYTHON, Spelling, check_fields, number, ruled, whole
from ..training.config import knob_problem
from ..training.parallel import DistEnv, barrier, spawn


def gradient_bytes(cfg, n_features: int | None = None) -> int:
    """Bytes of gradient DDP all-reduces per step for the model ``cfg`` describes (float32 gradients), on
    ``n_features`` inputs (default: what ``cfg`` gives one variable: 2 m temperature, its calendar and cycle)."""
    return 4 * count_parameters(Forecaster(cfg.model_config(n_features or cfg.window_config().n_inputs())))


def size_ladder(min_bytes: int, max_bytes: int, factor: int = 4, extra: tuple[int, ...] = ()) -> list[int]:
    """Buffer sizes from ``min_bytes`` to ``max_bytes`` by ``factor``, plus ``extra`` sizes; whole float32s."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ConfigError(f"all-reduce sizes need 4 <= min_bytes ({min_bytes}) <= max_bytes ({max_bytes}) and "
                          f"factor >= 2 ({factor})")
    sizes, s = set(), min_bytes
    while s <= max_bytes:
        sizes.add(s // 4 * 4)
        s *= factor
    sizes.update(e // 4 * 4 for e in extra if e >= 4)
    return sorted(sizes)


def _allreduce_job(env: DistEnv, sizes: list[int], budget_s: float, min_iters: int, max_iters: int) -> list[dict]:
    rows = []
    for nbytes in sizes:
        buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=env.device)
        for _ in range(2):
            dist.all_reduce(buf)
        t0 = clock(env.device)
        dist.all_reduce(buf)
        est = torch.tensor([clock(env.device) - t0], dtype=torch.float64, device=env.device)
        dist.all_reduce(est, op=dist.ReduceOp.MAX)  # every rank agrees on the iteration count
        iters = int(min(max_iters, max(min_iters, budget_s / max(est.item(), 1e-7))))
        barrier(env)
        t0 = clock(env.device)
        for _ in range(iters):
            dist.all_reduce(buf)
        t = torch.tensor([(clock(env.device) - t0) / iters], dtype=torch.float64, device=env.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        sec, n = t.item(), env.world_size
        algbw = nbytes / sec / 1e9
        rows.append({"bytes": nbytes, "world_size": n, "backend": env.backend, "device": str(env.device),
                     "iters": iters, "time_us": sec * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (n - 1) / n})
    return rows


@dataclass
class AllreduceConfig:
    """An all-reduce bandwidth sweep: float32 buffers from ``min_bytes`` to ``max_bytes`` by ``factor``."""

    world_size: int = 2
    device: str = "auto"
    min_bytes: int = ruled(1024, whole(4, 2**53, says="at least 4 (one float32)"))
    max_bytes: int = ruled(64 * 2**20, whole(4, 2**53))  # this machine's memory bounds it (below)
    factor: int = ruled(4, whole(2, note="each buffer is the last one times it"))
    # seconds of timed all-reduces per size (iterations follow from it)
    budget_s: float = ruled(0.2, number(positive=True, says="a positive number of seconds"))
    min_iters: int = ruled(5, whole(1))
    max_iters: int = ruled(1000, whole(1))
    timeout_s: float = ruled(120.0, number(positive=True, says="a positive number of seconds"))

    def validate(self, say: Spelling = PYTHON) -> None:
        """Every value before any rank starts; a refusal names the value as ``say`` spells it (``--min-bytes 2``,
        ``min_bytes=2``) and says what is allowed."""
        top = local_rank_limit()
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or not 2 <= self.world_size <= top:
            raise say.refuse("world_size", self.world_size, f"must be a whole number in 2..{top}")
        if knob_problem("device", self.device):
            raise say.refuse("device", self.device, knob_problem("device", self.device))
        check_fields(self, say)
        if self.max_bytes < self.min_bytes:
            raise say.refuse("max_bytes", self.max_bytes, f"is below {say('min_bytes', self.min_bytes)}; give a "
                             "largest buffer at least the smallest")
        memory = host_memory_bytes()
        if 2 * self.max_bytes * self.world_size > memory:
            raise say.refuse("max_bytes", self.max_bytes, f"on {self.world_size} ranks needs more than this machine's "
                             f"{memory / 2**30:,.0f} GiB of memory; give a smaller one")
        if self.min_iters > self.max_iters:
            raise say.refuse("min_iters", self.min_iters, f"is above {say('max_iters', self.max_iters)}; give a "
                             "smallest count of timed all-reduces at most the largest")


def allreduce(cfg, acfg=None, n_features: int | None = None) -> dict[str, Any]:
    """Time ``all_reduce`` per buffer size over ``acfg`` (an ``AllreduceConfig``): algbw = bytes / time, busbw = algbw
    x 2(n-1)/n. The gradient of the model ``cfg`` describes (on ``n_features`` inputs) is measured as its own size,
    flagged ``gradient_size``, so one can read off what an all-reduce of one step's gradients costs on this link.
    Returns {"rows": [...], "gradient_bytes": int}."""
    acfg = acfg or AllreduceConfig()
    acfg.validate()
    grad = gradient_bytes(cfg, n_features)
    rows = spawn(_allreduce_job, acfg.world_size, device=acfg.device, timeout_s=acfg.timeout_s,
                 kwargs={"sizes": size_ladder(acfg.min_bytes, acfg.max_bytes, acfg.factor, (grad,)),
                         "budget_s": acfg.budget_s, "min_iters": acfg.min_iters, "max_iters": acfg.max_iters})
    for r in rows:
        r["gradient_size"] = r["bytes"] == grad // 4 * 4
    return {"rows": rows, "gradient_bytes": grad}


def allreduce_record(out: dict[str, Any], acfg, cfg) -> dict[str, Any]:
    """The run record of an all-reduce sweep (``experiment='allreduce'``)."""
    kind = out["rows"][0]["device"] if out["rows"] else acfg.device
    return new_record("allreduce", device=kind.split(":")[0], profile=cfg.profile, world_size=acfg.world_size,
                      allreduce={"rows": out["rows"], "gradient_bytes": out["gradient_bytes"],
                                 "backend": out["rows"][0]["backend"] if out["rows"] else None,
                                 "config": asdict(acfg)},
                      config=asdict(cfg))
