"""Multi-device training: DataParallel, DistributedDataParallel (torchrun or self-launched), all-reduce bandwidth.

DDP runs one process per device: NCCL on GPUs, gloo on CPU. Every rank drives the same ``Trainer`` as a
single-device run (so step, timing and checkpoint logic exist once); this module wraps its model, gives
each rank its share of every global batch, reduces the epoch metrics across ranks and lets only rank 0
write. ``uneven_shards`` sizes each rank's share from its measured first-epoch throughput, so a slow
device does not hold back the fast ones. Outside ``torchrun`` the ranks are started here, as local
processes, and rank 0 hands its result back to the caller.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import math
import os
import shutil
import signal
import socket
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from . import errors
from .errors import ConfigError, DeviceError, LstmnbError

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_CUDNN_RNN_WARNING = "RNN module weights are not part of single contiguous chunk of memory"
# a RuntimeError whose message contains one of these came from a collective, not from the model
_COMM_FAILURE_HINTS = ("connection closed", "connection reset", "broken pipe", "timed out", "timeout",
                       "gloo", "nccl", "processgroup", "socket", "peer")


class DistributedError(LstmnbError):
    """A rank failed, or lost contact with the others, during a distributed run."""


# --- process groups ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job: its rank, the world, its device and the backend."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: torch.device
    owns_group: bool  # True when this module created the process group (and so destroys it)

    @property
    def is_writer(self) -> bool:
        return self.rank == 0


def under_launcher() -> bool:
    """True inside a process started by torchrun (or anything that sets RANK, WORLD_SIZE, MASTER_*)."""
    return all(k in os.environ for k in LAUNCH_ENV)


def is_rank_zero() -> bool:
    """True in a single process and on rank 0 of a distributed job: the one that writes."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return int(os.environ.get("RANK", "0")) == 0


def cpu_cores() -> int:
    """CPU cores this process may run on (affinity-aware, so SLURM and taskset limits count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def ddp_device_kind(device: str) -> str:
    """'cuda' or 'cpu' for a DDP run asked for on ``device``; errors name what is allowed."""
    name = (device or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"strategy='ddp' with device='cuda' needs CUDA GPUs, but none is visible here (torch "
                f"{torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use --device cpu (gloo ranks)"
            )
        return "cuda"
    raise ConfigError(f"device={device!r} with strategy='ddp': use auto, cpu (gloo ranks) or cuda "
                      f"(NCCL, rank r of a node on cuda:LOCAL_RANK)")


def visible_devices(kind: str) -> int:
    """How many devices of ``kind`` one node offers to DDP ranks: GPUs, or CPU cores for gloo ranks."""
    return torch.cuda.device_count() if kind == "cuda" else cpu_cores()


def check_world_size(kind: str, local_world_size: int) -> None:
    """Refuse more ranks on this node than it has devices (one GPU, or at least one core, per rank)."""
    if local_world_size < 1:
        raise ConfigError(f"world_size={local_world_size} must be >= 1")
    have = visible_devices(kind)
    if local_world_size > have:
        what = (f"{have} CUDA GPU(s) visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
                if kind == "cuda" else f"{have} CPU core(s) available to this process, and each gloo rank needs one")
        raise DeviceError(f"world_size={local_world_size} ranks on this node, but only {what}; "
                          f"use --nproc {have} or fewer")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device: str = "auto", timeout_s: float = 300.0, threads: int | None = None) -> DistEnv:
    """Join the job described by the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

    NCCL and ``cuda:LOCAL_RANK`` on GPUs, gloo on CPU. Collectives that wait longer than ``timeout_s``
    fail instead of hanging. CPU ranks get ``threads`` intra-op threads (default: the node's cores
    divided among its ranks, so ranks do not fight over cores).
    """
    kind = ddp_device_kind(device)
    if dist.is_initialized():  # the caller (a notebook, a test) created the group
        rank, world = dist.get_rank(), dist.get_world_size()
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        backend, owns = dist.get_backend(), False
    else:
        missing = [k for k in LAUNCH_ENV if k not in os.environ]
        if missing:
            raise ConfigError(f"strategy='ddp' needs a launcher: run under torchrun, or give nproc / --nproc N "
                              f"to start local processes (missing environment: {', '.join(missing)})")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        check_world_size(kind, local_world)
        backend, owns = ("nccl" if kind == "cuda" else "gloo"), True
        if kind == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend, timeout=_dt.timedelta(seconds=timeout_s))
    if kind == "cpu":
        torch.set_num_threads(threads or max(1, cpu_cores() // local_world))
    dev = torch.device("cuda", local_rank) if kind == "cuda" else torch.device("cpu")
    return DistEnv(rank, world, local_rank, local_world, backend, dev, owns)


def close_distributed(env: DistEnv) -> None:
    """Destroy the process group if this module created it."""
    if env.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def _barrier(env: DistEnv) -> None:
    if env.backend == "nccl":
        dist.barrier(device_ids=[env.local_rank])
    else:
        dist.barrier()


def _is_comm_failure(exc: BaseException) -> bool:
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    return isinstance(exc, RuntimeError) and any(h in str(exc).lower() for h in _COMM_FAILURE_HINTS)


def _comm_failure(exc: BaseException, env: DistEnv, timeout_s: float, where: str) -> DistributedError:
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return DistributedError(
        f"rank {env.rank}/{env.world_size} lost contact with the other ranks during {where} ({first}); "
        f"another rank failed or waited longer than dist_timeout_s={timeout_s:g}; nothing more was written"
    )


# --- wrapping the model -----------------------------------------------------------------------------

def wrap_ddp(core: nn.Module, cfg, env: DistEnv) -> nn.parallel.DistributedDataParallel:
    """``core`` as DDP with the run's bucket size, bucket-view and static-graph settings."""
    return nn.parallel.DistributedDataParallel(
        core, device_ids=[env.device.index] if env.device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=cfg.grad_as_bucket_view,
        static_graph=cfg.static_graph,
    )


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


# --- uneven shards ----------------------------------------------------------------------------------

def balanced_sizes(global_batch: int, throughputs: list[float]) -> list[int]:
    """Split ``global_batch`` samples among ranks in proportion to their samples/s (each >= 1, exact sum).

    Largest-remainder rounding, so the sizes add up to the global batch and the step count per epoch
    does not change when the shares do.
    """
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
    """DDP comm-hook state for uneven shards: weights gradients by batch share and times local compute.

    Rank r's gradient is a mean over its b_r samples; scaling it by b_r / B before a SUM all-reduce
    gives the mean over the whole global batch B, as one process on that batch would compute. While
    ``measuring``, each step's local compute time runs from the forward pre-hook to the moment the last
    gradient bucket is ready (before any wait for other ranks), so the throughput is the rank's own.
    """

    def __init__(self, env: DistEnv, weight: float):
        self.env, self.weight = env, weight
        self.measuring = True
        self.compute_s, self.samples = 0.0, 0
        self._start: float | None = None
        self._ready: float | None = None

    def _now(self) -> float:
        if self.env.device.type == "cuda":
            torch.cuda.synchronize(self.env.device)
        return time.perf_counter()

    def close_step(self) -> None:
        if self._start is not None and self._ready is not None:
            self.compute_s += self._ready - self._start
        self._start = self._ready = None

    def on_forward(self, module: nn.Module, args: tuple) -> None:
        if not (module.training and self.measuring):
            return
        self.close_step()
        self.samples += int(args[0].shape[0])
        self._start = self._now()

    def throughput(self) -> float:
        self.close_step()
        return self.samples / self.compute_s if self.compute_s > 0 else 0.0


def weighted_allreduce_hook(state, bucket):
    """DDP communication hook (state: ShareBalancer, bucket: dist.GradBucket -> Future[Tensor]): scale the
    bucket by this rank's batch share, then SUM across ranks. No annotations: DDP checks them as objects,
    and this module's postponed annotations would be strings."""
    if state.measuring:
        state._ready = state._now()
    buf = bucket.buffer()
    buf.mul_(state.weight)
    fut = dist.all_reduce(buf, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def _share_batches(tr, x: torch.Tensor, y: torch.Tensor, sizes: list[int], rank: int):
    """Rank ``rank``'s slice of every global batch of ``sum(sizes)`` samples (same permutation on all ranks)."""
    total, lo, b = sum(sizes), sum(sizes[:rank]), sizes[rank]
    perm = torch.randperm(tr.n_train, generator=tr.gen).to(x.device)
    for i in range(tr.n_train // total):
        idx = perm[i * total + lo : i * total + lo + b]
        yield x.index_select(0, idx), y.index_select(0, idx)


class _SlowDown:
    """Forward hook that makes a rank slower by a fixed time per training sample (a slower device)."""

    def __init__(self, seconds_per_sample: float):
        self.seconds_per_sample = seconds_per_sample

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        if module.training:
            time.sleep(self.seconds_per_sample * int(args[0].shape[0]))


# --- one DDP rank -----------------------------------------------------------------------------------

@dataclass
class RankOptions:
    """What a benchmark or a test adds to a DDP run; not training parameters, so not in TrainConfig."""

    comm_split_steps: int = 0  # after training, time this many steps with and without the all-reduce
    slowdown_s_per_sample: dict[int, float] = field(default_factory=dict)  # rank -> extra s per sample
    rank_callback: Callable[[int, dict[str, Any]], None] | None = None  # (rank, epoch entry) on every rank
    shard_sizes: list[int] | None = None  # uneven_shards with known shares: per-rank batches, no measuring


def _steps_per_epoch(n_train: int, cfg, world: int) -> int:
    if cfg.uneven_shards:
        steps = n_train // (cfg.batch_size * world)
    elif cfg.input_path == "fast":
        steps = math.ceil((n_train // world) / cfg.batch_size)
    else:
        steps = math.ceil(math.ceil(n_train / world) / cfg.batch_size)
    if steps < 1:
        raise ConfigError(f"batch_size={cfg.batch_size} per rank x world_size={world} = {cfg.batch_size * world} "
                          f"is more than the {n_train} training samples; use a smaller batch_size")
    return steps


def comm_split(tr, ddp: nn.parallel.DistributedDataParallel, env: DistEnv, x: torch.Tensor, y: torch.Tensor,
               steps: int) -> dict[str, Any]:
    """Time ``steps`` training steps with gradient all-reduce and the same steps under ``no_sync``.

    The difference is the communication the backward pass could not hide, measured rather than
    inferred. Model, optimiser and schedule are restored afterwards, so the run's results are unchanged.
    """
    from .train import synchronize

    saved = copy.deepcopy({"model": tr.core.state_dict(), "opt": tr.opt.state_dict(),
                           "sched": tr.sched.state_dict() if tr.sched is not None else None})
    b = tr.cfg.batch_size
    idx = torch.arange(steps * b, device=x.device) % x.shape[0]
    batches = [(x[idx[i * b:(i + 1) * b]], y[idx[i * b:(i + 1) * b]]) for i in range(steps)]

    def timed(no_sync: bool) -> float:
        _barrier(env)
        synchronize(env.device)
        t0 = time.perf_counter()
        for xb, yb in batches:
            if no_sync:
                with ddp.no_sync():
                    tr.step(xb, yb)
            else:
                tr.step(xb, yb)
        synchronize(env.device)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=env.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    tr.model.train()
    timed(False)  # warm-up
    synced, local = timed(False), timed(True)
    tr.core.load_state_dict(saved["model"])
    tr.opt.load_state_dict(saved["opt"])
    if tr.sched is not None:
        tr.sched.load_state_dict(saved["sched"])
    comm = max(0.0, synced - local)
    return {"steps": steps, "step_s": synced / steps, "compute_s": local / steps, "comm_s": comm / steps,
            "comm_fraction": comm / synced if synced > 0 else None,
            "method": "same steps timed with DDP gradient all-reduce and under no_sync(); max over ranks"}


def train_rank(windows, cfg, env: DistEnv, *, data_info: dict[str, Any] | None = None,
               on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
               options: RankOptions | None = None):
    """Train as one DDP rank; returns the same ``RunResult`` as ``train.train`` (the record on rank 0;
    None on the other ranks, which write nothing and so skip the test evaluation that makes it).

    ``cfg.batch_size`` is per rank: the global batch is batch_size x world_size, and one epoch covers
    the training set once across all ranks. Loss and sample counts are summed across ranks, epoch time
    is the slowest rank's. Only rank 0 writes the checkpoint.
    """
    from .train import RunResult, Trainer, WindowDataset

    options = options or RankOptions()
    world, rank = env.world_size, env.rank
    n_train = windows.x["train"].shape[0]
    tr = Trainer(windows, cfg, env.device, steps_per_epoch=_steps_per_epoch(n_train, cfg, world),
                 writer=env.is_writer)
    tr.restore()
    ddp = wrap_ddp(tr.core, cfg, env)
    tr.model = torch.compile(ddp) if cfg.compile else ddp  # compile the DDP module, as PyTorch advises
    if options.slowdown_s_per_sample.get(rank):
        tr.core.register_forward_hook(_SlowDown(options.slowdown_s_per_sample[rank]))
    sizes = [cfg.batch_size] * world
    if options.shard_sizes is not None:
        sizes = [int(v) for v in options.shard_sizes]
        if not cfg.uneven_shards or len(sizes) != world or sum(sizes) != cfg.batch_size * world or min(sizes) < 1:
            raise ConfigError(f"shard_sizes={options.shard_sizes} needs uneven_shards=True, one size >= 1 per rank "
                              f"(world_size={world}) and a sum of batch_size x world_size = {cfg.batch_size * world}")
    balancer = None
    if cfg.uneven_shards:
        balancer = ShareBalancer(env, weight=sizes[rank] / (cfg.batch_size * world))
        balancer.measuring = options.shard_sizes is None
        ddp.register_comm_hook(balancer, weighted_allreduce_hook)
        tr.core.register_forward_pre_hook(balancer.on_forward)
    def train_tensors() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(windows.x["train"]).to(env.device), torch.from_numpy(windows.y["train"]).to(env.device)

    # the fast path batches from the training set on the device; the DataLoader path needs it there only
    # for comm_split's timed steps, so it is copied then (not held through training for nothing)
    x_train, y_train = train_tensors() if cfg.input_path == "fast" else (None, None)
    if cfg.input_path == "dataloader":
        dataset = WindowDataset(windows.x["train"], windows.y["train"])
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=world, rank=rank,
                                                                  shuffle=True, seed=cfg.seed)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=cfg.batch_size, sampler=sampler, num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory and env.device.type == "cuda", persistent_workers=cfg.num_workers > 0)
    tr.start_peak_memory()
    bar = tr.progress_bar(f"ddp rank 0/{world} {env.device}") if env.is_writer else None
    where = "training"
    try:
        for epoch in range(tr.start_epoch, cfg.epochs):
            if cfg.input_path == "dataloader":
                sampler.set_epoch(epoch)
                batches = tr.loader_batches(loader)
            elif cfg.uneven_shards:
                batches = _share_batches(tr, x_train, y_train, sizes, rank)
            else:
                batches = tr.fast_batches(x_train, y_train, cfg.batch_size, shard=(rank, world))
            loss_sum, seen, train_s = tr.run_epoch(batches)
            where = f"the reductions after epoch {epoch + 1}"
            totals = torch.tensor([float(loss_sum.item()), float(seen)], dtype=torch.float64, device=env.device)
            dist.all_reduce(totals)
            slowest = torch.tensor([train_s], dtype=torch.float64, device=env.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            extra: dict[str, Any] = {"world_size": world}
            if cfg.uneven_shards:
                extra["shard_sizes"] = list(sizes)
            if balancer is not None and balancer.measuring:
                thr = torch.zeros(world, dtype=torch.float64, device=env.device)
                thr[rank] = balancer.throughput()
                dist.all_reduce(thr)
                sizes = balanced_sizes(cfg.batch_size * world, thr.tolist())
                balancer.weight, balancer.measuring = sizes[rank] / (cfg.batch_size * world), False
                extra.update(rank_samples_per_s=thr.tolist(), next_shard_sizes=list(sizes))
            entry = tr.end_epoch(totals[0].item() / totals[1].item(), slowest.item(), int(totals[1].item()), **extra)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{entry['train_loss']:.4f}", val_rmse=f"{entry['val_rmse_k']:.3f}K")
            if on_epoch_end is not None:
                on_epoch_end(entry)
            if options.rank_callback is not None:
                options.rank_callback(rank, entry)
            stop = torch.tensor([1.0 if tr.should_stop() else 0.0], device=env.device)
            dist.broadcast(stop, src=0)  # rank 0 decides, so every rank leaves the loop together
            tr.stopped_early = bool(stop.item())
            where = "training"
            if tr.stopped_early:
                break
        split = None
        if options.comm_split_steps:
            where = "the compute vs communication measurement"
            if x_train is None:
                x_train, y_train = train_tensors()
            split = comm_split(tr, ddp, env, x_train, y_train, options.comm_split_steps)
    except Exception as exc:
        if _is_comm_failure(exc):
            raise _comm_failure(exc, env, cfg.dist_timeout_s, where) from exc
        raise
    finally:
        if bar is not None:
            bar.close()
    parallel_info = {
        "strategy": "ddp", "backend": env.backend, "world_size": world, "local_world_size": env.local_world_size,
        "nodes": max(1, world // max(1, env.local_world_size)), "per_rank_batch": cfg.batch_size,
        "global_batch": cfg.batch_size * world, "bucket_cap_mb": cfg.bucket_cap_mb,
        "grad_as_bucket_view": cfg.grad_as_bucket_view, "static_graph": cfg.static_graph,
        "uneven_shards": cfg.uneven_shards, "shard_sizes": sizes if cfg.uneven_shards else None,
        "threads_per_rank": torch.get_num_threads() if env.device.type == "cpu" else None,
        "comm_split": split,
    }
    record = tr.finish(data_info, world_size=world, parallel=parallel_info)  # None on ranks that do not write
    try:
        # every rank waits for rank 0's record: a rank that tears its group down while rank 0 still
        # works can abort (gloo: SIGABRT in the early rank), so the ranks leave together
        _barrier(env)
    except Exception as exc:
        if _is_comm_failure(exc):
            raise _comm_failure(exc, env, cfg.dist_timeout_s, "the end of the run") from exc
        raise
    return RunResult(record=record, model=tr.core, windows=windows, device=env.device, history=tr.history)


# --- DataParallel -----------------------------------------------------------------------------------

def train_dataparallel(windows, cfg, *, data_info: dict[str, Any] | None = None,
                       on_epoch_end: Callable[[dict[str, Any]], None] | None = None):
    """``nn.DataParallel`` over ``cfg.nproc`` (default all) visible GPUs; batch_size is the global batch."""
    from .train import RunResult, Trainer

    if not torch.cuda.is_available():
        raise DeviceError(f"strategy='dataparallel' needs CUDA GPUs, but none is visible here (torch "
                          f"{torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use strategy='ddp' "
                          f"(runs over gloo on CPU) or 'single'")
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
    tr.restore()
    flatten_for_dataparallel(tr.core)
    tr.model = nn.DataParallel(tr.core, device_ids=list(range(n)))
    for i in range(n):
        torch.cuda.reset_peak_memory_stats(i)
    tr.fit(f"dataparallel x{n}", on_epoch_end, world_size=n)
    info = {"strategy": "dataparallel", "world_size": n, "device_ids": list(range(n)),
            "global_batch": cfg.batch_size, "per_gpu_batch": cfg.batch_size / n,
            "peak_mb_per_gpu": [torch.cuda.max_memory_allocated(i) / 2**20 for i in range(n)]}
    record = tr.finish(data_info, world_size=n, parallel=info)
    return RunResult(record=record, model=tr.core, windows=windows, device=device, history=tr.history)


# --- launching local ranks --------------------------------------------------------------------------

@dataclass
class _Job:
    """What each spawned rank runs: ``fn(env, **kwargs)``; rank 0's return value goes back to the caller."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    world_size: int
    port: int
    device: str
    timeout_s: float
    threads: int | None
    workdir: str
    queue: Any = None


def _rank_main(local_rank: int, job: _Job) -> None:
    """Entry of one spawned rank: join the group, run the job, hand back rank 0's result or the error."""
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(job.world_size),
                      LOCAL_WORLD_SIZE=str(job.world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job.port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # ranks on one machine talk over loopback
    env = None
    try:
        env = init_distributed(job.device, job.timeout_s, job.threads)
        result = job.fn(env, **job.kwargs, **({"queue": job.queue} if job.queue is not None else {}))
        if env.is_writer:
            from .paths import atomic_path

            with atomic_path(Path(job.workdir) / "result.pt") as tmp:
                torch.save(result, tmp)
        close_distributed(env)
    except BaseException as exc:  # noqa: BLE001 - report every failure to the launcher, then exit non-zero
        Path(job.workdir, f"error-rank{local_rank}.json").write_text(json.dumps({
            "rank": local_rank, "type": type(exc).__name__, "message": str(exc).strip().splitlines()[0][:500]
            if str(exc).strip() else type(exc).__name__, "ours": isinstance(exc, LstmnbError)}))
        if isinstance(exc, LstmnbError):
            os._exit(2)  # our errors are one clear line, reported by the launcher; no traceback here
        raise


def _launch_error(workdir: Path, exc: BaseException, world: int, exitcodes: dict[int, int | None]) -> LstmnbError:
    """The clearest single error for a failed job.

    In order: a rank's own error (bad input, a bug), then a rank that died without a word (killed,
    crashed), then a rank's report that it lost contact with the others.
    """
    reports = []
    for f in sorted(workdir.glob("error-rank*.json")):
        try:
            reports.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    own = [r for r in reports if r["type"] != "DistributedError"]
    if own:
        r = own[0]
        cls = getattr(errors, r["type"], None) if r["ours"] else None
        if not (isinstance(cls, type) and issubclass(cls, LstmnbError)):
            cls = DistributedError
        msg = r["message"] if r["ours"] else f"{r['type']}: {r['message']}"
        return cls(f"rank {r['rank']} of {world}: {msg}")
    reported = {r["rank"] for r in reports}
    stopped = (-signal.SIGTERM, -signal.SIGKILL)  # how the launcher stops the bystanders
    silent = [(i, c) for i, c in sorted(exitcodes.items()) if i not in reported and c not in (0, None) + stopped]
    if not silent and isinstance(exc, torch.multiprocessing.ProcessExitedException) \
            and exc.error_index not in reported:
        silent = [(exc.error_index, exc.exit_code)]
    if silent:
        i, code = silent[0]
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}")
        return DistributedError(f"rank {i} of {world} {how} before finishing; the other ranks were stopped and "
                                f"no record was written")
    if reports:
        return DistributedError(reports[0]["message"])
    return DistributedError(f"a rank of {world} failed: {str(exc).strip().splitlines()[-1][:300]}")


def spawn(fn: Callable[..., Any], world_size: int, *, device: str = "auto", kwargs: dict[str, Any] | None = None,
          timeout_s: float = 300.0, threads: int | None = None, deadline_s: float | None = None,
          on_message: Callable[[Any], None] | None = None) -> Any:
    """Run ``fn(env, **kwargs)`` in ``world_size`` local processes (one per GPU, or gloo ranks on CPU).

    Returns rank 0's return value. If any rank fails, the others are stopped and the clearest error is
    raised here: the failing rank's own message, or which rank died and how. ``deadline_s`` bounds the
    whole job. With ``on_message``, ``fn`` gets a ``queue`` whose items are passed to it as they arrive.
    """
    import torch.multiprocessing as mp

    kind = ddp_device_kind(device)
    check_world_size(kind, world_size)
    workdir = Path(tempfile.mkdtemp(prefix="lstmnb-ranks-"))
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue() if on_message is not None else None
    job = _Job(fn, kwargs or {}, world_size, free_port(), device, timeout_s, threads, str(workdir), queue)

    def drain() -> None:
        while queue is not None and not queue.empty():
            on_message(queue.get())

    start = time.monotonic()
    try:
        pc = mp.start_processes(_rank_main, args=(job,), nprocs=world_size, join=False, start_method="spawn")
        try:
            while not pc.join(timeout=0.2):
                drain()
                if deadline_s is not None and time.monotonic() - start > deadline_s:
                    for p in pc.processes:
                        if p.is_alive():
                            p.kill()
                    raise DistributedError(f"the {world_size} ranks did not finish within {deadline_s:g} s; "
                                           f"they were stopped and no record was written")
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            codes = {i: p.exitcode for i, p in enumerate(pc.processes)}
            raise _launch_error(workdir, exc, world_size, codes) from None
        drain()
        result_file = workdir / "result.pt"
        if not result_file.exists():
            raise DistributedError(f"rank 0 of {world_size} finished without a result")
        return torch.load(result_file, map_location="cpu", weights_only=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _train_job(env: DistEnv, windows, cfg, data_info, options: RankOptions, queue=None) -> dict[str, Any]:
    """One spawned rank of ``launch_train``: train, and relay rank 0's epoch entries to the launcher."""
    relay = (lambda entry: queue.put(entry)) if (queue is not None and env.is_writer) else None
    result = train_rank(windows, cfg, env, data_info=data_info, on_epoch_end=relay, options=options)
    if not env.is_writer:
        return {}
    return {"record": result.record, "state": {k: v.cpu() for k, v in result.model.state_dict().items()},
            "history": result.history}


def launch_train(windows, cfg, world_size: int | None = None, *, data_info: dict[str, Any] | None = None,
                 on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                 options: RankOptions | None = None, deadline_s: float | None = None):
    """A DDP run of ``world_size`` (default ``cfg.nproc``) local processes; returns rank 0's ``RunResult``.

    ``on_epoch_end`` runs here, in the caller's process, with rank 0's epoch entries as they finish, so a
    notebook can plot live. The returned model lives on the CPU.
    """
    from dataclasses import replace

    from .models import Forecaster
    from .train import RunResult

    world = world_size or cfg.nproc or 1
    cfg = replace(cfg, strategy="ddp", nproc=world)
    cfg.validate()
    out = spawn(_train_job, world, device=cfg.device, timeout_s=cfg.dist_timeout_s, threads=cfg.threads,
                kwargs={"windows": windows, "cfg": cfg, "data_info": data_info, "options": options or RankOptions()},
                on_message=on_epoch_end, deadline_s=deadline_s)
    model = Forecaster(cfg.model_config(windows.n_features))
    model.load_state_dict(out["state"])
    return RunResult(record=out["record"], model=model, windows=windows, device=torch.device("cpu"),
                     history=out["history"])


def train_parallel(windows, cfg, *, data_info: dict[str, Any] | None = None,
                   on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
                   options: RankOptions | None = None):
    """``train.train`` for strategies other than single: DataParallel here, DDP as a rank or by launching ranks.

    Under torchrun (or in a process group the caller made) this process is one rank; otherwise
    ``cfg.nproc`` (default 1) local processes are started.
    """
    if cfg.strategy == "dataparallel":
        return train_dataparallel(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end)
    if cfg.strategy != "ddp":
        raise ConfigError(f"strategy={cfg.strategy!r} is not one of dataparallel, ddp")
    if dist.is_initialized() or under_launcher():
        if cfg.nproc and under_launcher() and cfg.nproc != int(os.environ["WORLD_SIZE"]):
            raise ConfigError(f"nproc={cfg.nproc} but the launcher started WORLD_SIZE={os.environ['WORLD_SIZE']} "
                              f"ranks; under torchrun leave --nproc out (torchrun's --nproc-per-node sets it)")
        env = init_distributed(cfg.device, cfg.dist_timeout_s, cfg.threads)
        result = train_rank(windows, cfg, env, data_info=data_info, on_epoch_end=on_epoch_end, options=options)
        close_distributed(env)
        return result
    return launch_train(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end, options=options)


# --- all-reduce bandwidth ---------------------------------------------------------------------------

def gradient_bytes(cfg, n_features: int = 1) -> int:
    """Bytes of gradient DDP all-reduces per step for the model ``cfg`` describes (float32 gradients)."""
    from .models import Forecaster, count_parameters

    return 4 * count_parameters(Forecaster(cfg.model_config(n_features)))


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
    from .train import synchronize

    rows = []
    for nbytes in sizes:
        buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=env.device)
        for _ in range(2):
            dist.all_reduce(buf)
        synchronize(env.device)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        synchronize(env.device)
        est = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=env.device)
        dist.all_reduce(est, op=dist.ReduceOp.MAX)  # every rank agrees on the iteration count
        iters = int(min(max_iters, max(min_iters, budget_s / max(est.item(), 1e-7))))
        _barrier(env)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        synchronize(env.device)
        t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=env.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        sec = t.item()
        n = env.world_size
        algbw = nbytes / sec / 1e9
        rows.append({"bytes": nbytes, "world_size": n, "backend": env.backend, "device": str(env.device),
                     "iters": iters, "time_us": sec * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * 2 * (n - 1) / n})
    return rows


@dataclass
class AllreduceConfig:
    """An all-reduce bandwidth sweep: float32 buffers from ``min_bytes`` to ``max_bytes`` by ``factor``."""

    world_size: int = 2
    device: str = "auto"
    min_bytes: int = 1024
    max_bytes: int = 64 * 2**20
    factor: int = 4
    budget_s: float = 0.2  # seconds of timed all-reduces per size (iterations follow from it)
    min_iters: int = 5
    max_iters: int = 1000
    timeout_s: float = 120.0


def allreduce_bandwidth(acfg: AllreduceConfig = AllreduceConfig(), grad_bytes: int | None = None) -> list[dict]:
    """Time ``all_reduce`` per buffer size; algbw = bytes / time and busbw = algbw x 2(n-1)/n (nccl-tests).

    ``grad_bytes`` (a model's gradient per step) is measured as its own size and flagged, so one can
    read off what an all-reduce of one step's gradients costs on this link.
    """
    if acfg.world_size < 2:
        raise ConfigError(f"world_size={acfg.world_size}: an all-reduce bandwidth needs at least 2 ranks")
    sizes = size_ladder(acfg.min_bytes, acfg.max_bytes, acfg.factor, (grad_bytes,) if grad_bytes else ())
    rows = spawn(_allreduce_job, acfg.world_size, device=acfg.device, timeout_s=acfg.timeout_s,
                 kwargs={"sizes": sizes, "budget_s": acfg.budget_s, "min_iters": acfg.min_iters,
                         "max_iters": acfg.max_iters})
    for r in rows:
        r["gradient_size"] = bool(grad_bytes) and r["bytes"] == grad_bytes // 4 * 4
    return rows


__all__ = [
    "AllreduceConfig", "DistEnv", "DistributedError", "RankOptions", "ShareBalancer", "allreduce_bandwidth",
    "balanced_sizes", "check_world_size", "close_distributed", "comm_split", "flatten_for_dataparallel",
    "gradient_bytes", "init_distributed", "is_rank_zero", "launch_train", "size_ladder", "spawn",
    "train_dataparallel", "train_parallel", "train_rank", "under_launcher", "weighted_allreduce_hook",
]
