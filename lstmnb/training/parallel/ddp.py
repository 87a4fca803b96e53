"""One DDP rank: the same ``Trainer`` epoch loop as a single-device run, with the model wrapped in
DistributedDataParallel, each rank's share of every global batch, the epoch figures reduced across
ranks, rank 0 deciding when to stop, and only rank 0 writing.

Uneven shares: each rank's share of the global batch sized from its measured throughput, so a slower device does
not hold back the fast ones, and a comm hook that weights gradients by share.

Dropout's random numbers when a batch is split over ranks (or DataParallel's GPUs). Every part seeds torch from
``cfg.seed`` so the starting weights agree, but left there each would draw the same dropout masks (rank 1's k-th
sample losing the units rank 0's k-th loses), which one process on the whole batch never does. So after the weights
are made, each part past the first draws from its own stream, derived from the seed, its rank (or GPU) and the epoch
it starts at (a resumed run starts new streams there). Rank 0 and cuda:0 keep the seed's stream (a resumed rank 0
the checkpoint's): one rank draws what a one-process run draws. The batches' order comes from the Trainer's own
generator, never these streams, so every rank still takes its share of the same permutation."""

from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ...machine.device import clock
from ...errors import ConfigError
from ...rules import PYTHON, Spelling
from ..evaluate import RunResult
from ..trainer import Trainer
from .groups import DistEnv, barrier, comm_failure


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


def stream_seed(seed: int, part: int, epoch: int = 0) -> int:
    """The seed of part ``part``'s stream (a rank, or a GPU index): distinct for every (seed, part, epoch)."""
    return int(np.random.SeedSequence([int(seed), int(part), int(epoch)]).generate_state(1, np.uint64)[0])


def own_rank_stream(seed: int, rank: int, epoch: int = 0) -> None:
    """Rank ``rank`` draws dropout from its own stream (torch's global generators: CPU, and the rank's CUDA device);
    rank 0 keeps the stream it has."""
    if rank:
        torch.manual_seed(stream_seed(seed, rank, epoch))


def own_replica_streams(seed: int, device_ids: list[int], epoch: int = 0) -> None:
    """DataParallel's replicas draw dropout on their own GPUs: each GPU past the first gets its own stream."""
    torch.cuda.init()  # the per-GPU generators exist once CUDA has started
    for i in device_ids[1:]:
        torch.cuda.default_generators[i].manual_seed(stream_seed(seed, i, epoch))


@dataclass
class RankOptions:
    """What a benchmark or a test adds to a DDP run; not training parameters, so not in TrainConfig."""

    comm_split_steps: int = 0  # after training, time this many steps with and without the all-reduce
    slowdown_s_per_sample: dict[int, float] = field(default_factory=dict)  # rank -> extra s per sample
    rank_callback: Callable[[int, dict[str, Any]], None] | None = None  # (rank, epoch entry) on every rank
    shard_sizes: list[int] | None = None  # uneven_shards with known shares: per-rank batches, no measuring


def wrap_ddp(core: nn.Module, cfg, env: DistEnv) -> nn.parallel.DistributedDataParallel:
    """``core`` as DDP with the run's bucket size, bucket-view and static-graph settings."""
    return nn.parallel.DistributedDataParallel(
        core, device_ids=[env.device.index] if env.device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=cfg.grad_as_bucket_view,
        static_graph=cfg.static_graph,
    )


def steps_per_epoch(n_train: int, cfg, world: int) -> int:
    # even shards: both input paths give each rank n_train // world samples (the sampler drops the rest, never pads)
    steps = (n_train // (cfg.batch_size * world) if cfg.uneven_shards
             else math.ceil((n_train // world) / cfg.batch_size))
    if steps < 1:
        raise ConfigError(f"batch_size={cfg.batch_size} per rank x world_size={world} = {cfg.batch_size * world} "
                          f"is more than the {n_train} training samples; use a smaller batch_size")
    return steps


COMM_SPLIT_REPEATS = 3  # timings of the steps with and of the steps without the all-reduce, alternated


def comm_split(tr: Trainer, ddp: nn.parallel.DistributedDataParallel, env: DistEnv, x: torch.Tensor,
               y: torch.Tensor, steps: int) -> dict[str, Any]:
    """Time ``steps`` training steps with gradient all-reduce and the same steps under ``no_sync``, alternated
    ``COMM_SPLIT_REPEATS`` times after a warm-up: the medians' difference is the communication the backward could
    not hide, measured. Model, optimiser and schedule are restored afterwards, so the run's results are unchanged."""
    saved = copy.deepcopy({"model": tr.core.state_dict(), "opt": tr.opt.state_dict(),
                           "sched": tr.sched.state_dict() if tr.sched is not None else None})
    b = tr.cfg.batch_size
    idx = torch.arange(steps * b, device=x.device) % x.shape[0]
    batches = [(x[idx[i * b:(i + 1) * b]], y[idx[i * b:(i + 1) * b]]) for i in range(steps)]

    def timed(no_sync: bool) -> float:
        barrier(env)
        t0 = clock(env.device)
        for xb, yb in batches:
            with ddp.no_sync() if no_sync else contextlib.nullcontext():
                tr.step(xb, yb)
        t = torch.tensor([clock(env.device) - t0], dtype=torch.float64, device=env.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    tr.model.train()
    timed(False)  # warm-up
    # alternated (with all-reduce first, then under no_sync first, ...), medians: one timing of each in a fixed
    # order would put a drift of the shared cores, or the other rank still busy, on one side of the difference
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(COMM_SPLIT_REPEATS):
        for no_sync in ((False, True) if i % 2 == 0 else (True, False)):
            times[no_sync].append(timed(no_sync))
    synced, local = statistics.median(times[False]), statistics.median(times[True])
    tr.core.load_state_dict(saved["model"])
    tr.opt.load_state_dict(saved["opt"])
    if tr.sched is not None:
        tr.sched.load_state_dict(saved["sched"])
    comm = max(0.0, synced - local)
    return {"steps": steps, "step_s": synced / steps, "compute_s": local / steps, "comm_s": comm / steps,
            "comm_fraction": comm / synced if synced > 0 else None, "repeats": COMM_SPLIT_REPEATS,
            "method": "same steps timed with DDP gradient all-reduce and under no_sync(), alternated, medians of "
                      "the repeats; max over ranks"}


def train_rank(windows, cfg, env: DistEnv, *, data_info: dict[str, Any] | None = None,
               on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
               options: RankOptions | None = None, state: dict[str, Any] | None = None,
               say: Spelling = PYTHON) -> RunResult:
    """Train as one DDP rank; returns ``training.train``'s ``RunResult`` (the record None past rank 0).
    ``cfg.batch_size`` is per rank; an epoch covers the training set once across the ranks (on both input paths all
    but the n_train % world_size samples shuffled last: none twice). Loss and samples are summed across ranks, the
    epoch time is the slowest rank's."""
    options = options or RankOptions()
    world, rank = env.world_size, env.rank
    n_train = windows.x["train"].shape[0]
    tr = Trainer(windows, cfg, env.device, steps_per_epoch=steps_per_epoch(n_train, cfg, world), writer=env.is_writer,
                 say=say)
    tr.restore(state)
    own_rank_stream(cfg.seed, rank, tr.start_epoch)  # the weights agree; the dropout masks need not
    tr.guard.ranks = True  # every rank stops at the first non-finite figure of any rank
    ddp = wrap_ddp(tr.core, cfg, env)
    tr.model = torch.compile(ddp) if cfg.compile else ddp  # compile the DDP module, as PyTorch advises
    slow = options.slowdown_s_per_sample.get(rank)  # a slower device on purpose, to show and test the balancing
    if slow:  # a fixed time per training sample of each forward
        tr.core.register_forward_hook(lambda m, args, out: time.sleep(slow * args[0].shape[0]) if m.training else None)
    sizes = [cfg.batch_size] * world if options.shard_sizes is None else [int(v) for v in options.shard_sizes]
    if options.shard_sizes is not None and (not cfg.uneven_shards or len(sizes) != world
                                            or sum(sizes) != cfg.batch_size * world or min(sizes) < 1):
        raise ConfigError(f"shard_sizes={options.shard_sizes} needs uneven_shards=True, one size >= 1 per rank "
                          f"(world_size={world}) and a sum of batch_size x world_size = {cfg.batch_size * world}")
    balancer = None
    if cfg.uneven_shards:
        balancer = ShareBalancer(env, weight=sizes[rank] / (cfg.batch_size * world))
        balancer.measuring = options.shard_sizes is None
        ddp.register_comm_hook(balancer, weighted_allreduce_hook)
        tr.core.register_forward_pre_hook(balancer.on_forward)

    # the fast path batches from the training set on the device; the DataLoader path copies it only for comm_split
    x_train, y_train = tr.feed.train_tensors() if cfg.input_path == "fast" else (None, None)
    if cfg.input_path == "dataloader":
        # drop_last: the n_train % world samples past the shuffled shards are left out, as on the fast path; without
        # it the sampler pads with repeats, trained and counted twice (loss, samples/s)
        sampler = torch.utils.data.distributed.DistributedSampler(range(n_train), num_replicas=world, rank=rank,
                                                                  shuffle=True, seed=cfg.seed, drop_last=True)
        loader = tr.feed.make_loader(sampler)
    where = ["training"]  # what the ranks were doing, for the error if a peer is lost

    def batches(epoch: int):
        if cfg.input_path == "dataloader":
            sampler.set_epoch(epoch)
            return tr.feed.loader_batches(loader)
        if cfg.uneven_shards:
            return share_batches(tr, x_train, y_train, sizes, rank)
        return tr.feed.fast_batches(x_train, y_train, cfg.batch_size, shard=(rank, world))

    def reduce(epoch: int, loss_sum: torch.Tensor, seen: int, train_s: float):
        nonlocal sizes
        where[0] = f"the reductions after epoch {epoch + 1}"
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
        return totals[0].item() / totals[1].item(), int(totals[1].item()), slowest.item(), extra

    def agree(stop: bool) -> bool:
        flag = torch.tensor([1.0 if stop else 0.0], device=env.device)
        dist.broadcast(flag, src=0)  # rank 0 decides, so every rank leaves the loop together
        where[0] = "training"
        return bool(flag.item())

    def epoch_done(entry: dict[str, Any]) -> None:
        if on_epoch_end is not None:
            on_epoch_end(entry)
        if options.rank_callback is not None:
            options.rank_callback(rank, entry)

    tr.machine.start_peak()
    split = None
    try:
        tr.fit(f"ddp rank 0/{world} {env.device}", epoch_done, batches=batches, reduce=reduce, agree=agree,
               show=env.is_writer)
        if options.comm_split_steps and tr.guard.found is None:
            where[0] = "the compute vs communication measurement"
            if x_train is None:
                x_train, y_train = tr.feed.train_tensors()
            split = comm_split(tr, ddp, env, x_train, y_train, options.comm_split_steps)
        parallel_info = {
            "strategy": "ddp", "backend": env.backend, "world_size": world, "local_world_size": env.local_world_size,
            "nodes": max(1, world // max(1, env.local_world_size)), "per_rank_batch": cfg.batch_size,
            "global_batch": cfg.batch_size * world, "bucket_cap_mb": cfg.bucket_cap_mb,
            "grad_as_bucket_view": cfg.grad_as_bucket_view, "static_graph": cfg.static_graph,
            "uneven_shards": cfg.uneven_shards, "shard_sizes": sizes if cfg.uneven_shards else None,
            "threads_per_rank": env.threads["used"] if env.threads else None,
            "comm_split": split,
        }
        threads = {"threads": env.threads} if env.threads else {}  # CPU ranks: their share of the node's cores
        record = tr.finish(data_info, world_size=world, parallel=parallel_info, **threads)  # None past rank 0
        # every rank waits for rank 0's record: a rank that tears its group down while rank 0 still works can abort
        # (gloo: SIGABRT in the early rank), so the ranks leave together
        where[0] = "the end of the run"
        barrier(env)
    except Exception as exc:
        if lost := comm_failure(exc, env, cfg.dist_timeout_s, where[0], say):
            raise lost from exc
        raise
    return RunResult(record=record, model=tr.core, windows=windows, device=env.device, history=tr.history)
