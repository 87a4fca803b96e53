"""Experiments built from runs: strong and weak scaling (with compute vs communication), all-reduce
bandwidth, and the batch-size sweep. Each point is a run record; ``lstmnb.report`` makes the tables.
"""

from __future__ import annotations

import gc
import math
import re
import resource
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterator

import torch

from .errors import ConfigError

SCALING_MODES = ("strong", "weak")


# --- scaling ----------------------------------------------------------------------------------------

@dataclass
class ScalingConfig:
    """World sizes to run and how the batch follows them.

    strong: the global batch stays ``global_batch`` (default: the run's batch_size) and each of N
    ranks takes global_batch / N; weak: each rank keeps the run's batch_size, so the global batch
    grows with N.
    """

    world_sizes: tuple[int, ...] = (1, 2)
    mode: str = "strong"
    global_batch: int | None = None
    comm_split_steps: int = 20  # steps timed with and without the gradient all-reduce per world size

    def per_device_batch(self, cfg, world_size: int) -> int:
        if self.mode == "weak":
            return cfg.batch_size
        return (self.global_batch or cfg.batch_size) // world_size

    def validate(self, cfg) -> None:
        if self.mode not in SCALING_MODES:
            raise ConfigError(f"mode={self.mode!r} is not one of {', '.join(SCALING_MODES)}")
        sizes = list(self.world_sizes)
        if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
            raise ConfigError(f"world_sizes={self.world_sizes!r} must be whole numbers >= 1")
        if self.comm_split_steps < 0:
            raise ConfigError(f"comm_split_steps={self.comm_split_steps} must be >= 0")
        if self.mode == "strong":
            g = self.global_batch or cfg.batch_size
            bad = [n for n in sizes if g % n]
            if bad:
                lcm = math.lcm(*sizes)
                raise ConfigError(
                    f"strong scaling keeps the global batch fixed, but global batch {g} is not divisible by "
                    f"world size(s) {bad}; use a multiple of {lcm} (e.g. {lcm * max(1, round(g / lcm))})")


def scaling(windows, cfg, sc: ScalingConfig = ScalingConfig(), *, data_info: dict[str, Any] | None = None,
            results: str | None = None, on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
    """One DDP run per world size (local processes: GPUs, or gloo ranks on CPU); returns their records.

    Each record carries ``world_size``, the batch per device and globally, per-epoch validation loss
    and cumulative seconds (for convergence vs epoch and vs wall time), and ``parallel.comm_split``:
    the same steps timed with the gradient all-reduce and under ``no_sync``.
    """
    from . import parallel
    from .records import append_record

    sc.validate(cfg)
    parallel.check_world_size(parallel.ddp_device_kind(cfg.device), max(sc.world_sizes))
    records = []
    for n in sc.world_sizes:
        per = sc.per_device_batch(cfg, n)
        point = replace(cfg, strategy="ddp", nproc=n, batch_size=per, checkpoint=None, resume=False,
                        experiment=f"scaling-{sc.mode}")
        result = parallel.launch_train(windows, point, n, data_info=data_info,
                                       options=parallel.RankOptions(comm_split_steps=sc.comm_split_steps))
        rec = result.record
        rec["scaling"] = {"mode": sc.mode, "world_sizes": list(sc.world_sizes), "per_device_batch": per,
                          "global_batch": per * n}
        if results is not None:
            append_record(rec, results)
        if on_point is not None:
            on_point(rec)
        records.append(rec)
    return records


# --- all-reduce ------------------------------------------------------------------------------------

def allreduce(cfg, acfg=None, n_features: int = 1) -> dict[str, Any]:
    """All-reduce bandwidth over ``acfg`` (a ``parallel.AllreduceConfig``) with the model's gradient size.

    Returns {"rows": [...], "gradient_bytes": int}; the gradient size is one of the measured points.
    """
    from . import parallel

    acfg = acfg or parallel.AllreduceConfig()
    grad = parallel.gradient_bytes(cfg, n_features)
    return {"rows": parallel.allreduce_bandwidth(acfg, grad_bytes=grad), "gradient_bytes": grad}


def allreduce_record(out: dict[str, Any], acfg, cfg) -> dict[str, Any]:
    """The run record of an all-reduce sweep (``experiment='allreduce'``)."""
    from .records import new_record

    kind = out["rows"][0]["device"] if out["rows"] else acfg.device
    return new_record("allreduce", device=kind.split(":")[0], profile=cfg.profile, world_size=acfg.world_size,
                      allreduce={"rows": out["rows"], "gradient_bytes": out["gradient_bytes"],
                                 "backend": out["rows"][0]["backend"] if out["rows"] else None,
                                 "config": asdict(acfg)},
                      config=asdict(cfg))


# --- batch-size sweep -------------------------------------------------------------------------------

@dataclass
class SweepConfig:
    """Batch sizes start, start x factor, ... up to ``max_batch`` (default: the training set), stopping at OOM.

    ``memory_cap_mb`` limits memory during each point: on a GPU through the caching allocator's
    per-process fraction, on CPU through the process's data-segment limit (RLIMIT_DATA) set to what
    it uses now plus the cap. Either way an allocation past the cap really fails, so the sweep's OOM
    handling is what a real device limit exercises.
    """

    start: int = 32
    factor: int = 4
    max_batch: int | None = None
    memory_cap_mb: float | None = None

    def validate(self) -> None:
        if self.start < 1 or self.factor < 2:
            raise ConfigError(f"batch sweep needs start >= 1 ({self.start}) and factor >= 2 ({self.factor})")
        if self.max_batch is not None and self.max_batch < self.start:
            raise ConfigError(f"max_batch={self.max_batch} is below start={self.start}")
        if self.memory_cap_mb is not None and not self.memory_cap_mb > 0:
            raise ConfigError(f"memory_cap_mb={self.memory_cap_mb} must be a positive number of MB")


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory failure: CUDA's or the CPU allocator's (a failed malloc)."""
    if isinstance(exc, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _vm_data_bytes() -> int:
    with open("/proc/self/status") as fh:
        m = re.search(r"VmData:\s+(\d+) kB", fh.read())
    return int(m.group(1)) * 1024 if m else 0


@contextmanager
def memory_cap(cap_mb: float | None, device: torch.device) -> Iterator[None]:
    """Let the block allocate at most ``cap_mb`` more MB on ``device``; past it, allocations fail."""
    if cap_mb is None:
        yield
        return
    cap = int(cap_mb * 2**20)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_allocated(device) + cap) / total),
                                                   device)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
        return
    if device.type != "cpu":
        raise ConfigError(f"memory_cap_mb works on cpu and cuda devices, not {device.type}")
    # Thread stacks count against the data limit, and a Python thread that cannot get its stack hangs
    # its starter: keep new threads' stacks small and tqdm's monitor thread off while capped.
    import threading

    from tqdm import tqdm

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    old_stack, old_monitor = threading.stack_size(), tqdm.monitor_interval
    threading.stack_size(512 * 1024)
    tqdm.monitor_interval = 0
    limit = _vm_data_bytes() + cap
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
        threading.stack_size(old_stack)
        tqdm.monitor_interval = old_monitor


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _warm_up(windows, cfg, device: torch.device) -> None:
    """One tiny step outside any cap, so torch's lazy imports and kernels load before memory is capped
    (a capped import failing would read as the model running out of memory)."""
    from .train import Trainer

    tr = Trainer(windows, replace(cfg, strategy="single", checkpoint=None, resume=False), device)
    x = torch.from_numpy(windows.x["train"][:2]).to(device)
    y = torch.from_numpy(windows.y["train"][:2]).to(device)
    tr.step(x, y)
    del tr
    _free(device)


def batch_sweep(windows, cfg, sweep: SweepConfig = SweepConfig(), *, data_info: dict[str, Any] | None = None,
                results: str | None = None,
                on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train at batch sizes start, start x factor, ... on one device until out of memory or ``max_batch``.

    A point that runs out of memory is recorded with status ``oom`` and ends the sweep; memory is freed
    between points. Each ok record has time per epoch and the final validation RMSE, so speed and
    quality can be read side by side.
    """
    from .records import append_record, new_record
    from .train import resolve_device, train

    sweep.validate()
    device = resolve_device(cfg.device)
    n_train = windows.x["train"].shape[0]
    top = min(sweep.max_batch or n_train, n_train)
    if sweep.memory_cap_mb is not None:
        _warm_up(windows, cfg, device)
    records: list[dict[str, Any]] = []
    b = sweep.start
    while b <= top:
        point = replace(cfg, strategy="single", batch_size=b, checkpoint=None, resume=False, experiment="batch-sweep")
        info = {"batch_size": b, "start": sweep.start, "factor": sweep.factor, "memory_cap_mb": sweep.memory_cap_mb}
        try:
            with memory_cap(sweep.memory_cap_mb, device):
                rec = train(windows, point, data_info=data_info).record
            rec["sweep"] = info
        except Exception as exc:  # noqa: BLE001 - only out-of-memory is a result; anything else propagates
            if not is_oom(exc):
                raise
            first = str(exc).strip().splitlines()[0]
            first = first[first.find("DefaultCPUAllocator"):] if "DefaultCPUAllocator" in first else first
            first = first[:300]
            rec = new_record("batch-sweep", status="oom", device=str(device), profile=cfg.profile,
                             reason=f"out of memory at batch_size={b}"
                                    + (f" under a {sweep.memory_cap_mb:g} MB cap" if sweep.memory_cap_mb else "")
                                    + f": {first}",
                             config=asdict(point), data=data_info, sweep=info)
        finally:
            _free(device)
        if results is not None:
            append_record(rec, results)
        if on_point is not None:
            on_point(rec)
        records.append(rec)
        if rec["status"] == "oom":
            break
        b *= sweep.factor
    return records


def uneven_demo(windows, cfg, slow_rank: int = 1, seconds_per_sample: float = 2e-4, world_size: int = 2,
                deadline_s: float | None = None) -> dict[str, dict[str, Any]]:
    """The same DDP run with one rank made slower, with even shards and with throughput-sized shards.

    Returns {"even": record, "balanced": record}. The slowdown is a fixed sleep per training sample
    on ``slow_rank`` (a device that much slower); the balanced run measures it in its first epoch.
    """
    from . import parallel

    opts = parallel.RankOptions(slowdown_s_per_sample={slow_rank: seconds_per_sample})
    out = {}
    for name, uneven in (("even", False), ("balanced", True)):
        run_cfg = replace(cfg, strategy="ddp", nproc=world_size, uneven_shards=uneven, checkpoint=None,
                          resume=False, experiment=f"uneven-{name}")
        rec = parallel.launch_train(windows, run_cfg, world_size, options=opts, deadline_s=deadline_s).record
        rec["uneven_demo"] = {"slow_rank": slow_rank, "seconds_per_sample": seconds_per_sample}
        out[name] = rec
    return out
