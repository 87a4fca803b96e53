"""Process groups for DDP (NCCL on GPUs, gloo on CPU): where this process sits in the job, joining the group from the
launcher's environment (torchrun, or ``launcher.spawn``'s local ranks), leaving it, and a lost peer as one error."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import socket
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ...machine.device import cpu_cores, cuda_missing, rank_threads
from ...errors import ConfigError, DeviceError, LstmnbError
from ...rules import PYTHON, Spelling

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# a RuntimeError whose message contains one of these came from a collective, not from the model
_COMM_FAILURE_HINTS = ("connection closed", "connection reset", "broken pipe", "timed out", "timeout",
                       "gloo", "nccl", "processgroup", "socket", "peer")


class DistributedError(LstmnbError):
    """A rank failed, or lost contact with the others, during a distributed run."""


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
    threads: dict | None = None  # a CPU rank's intra-op threads (device.rank_threads), the record's section

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


def ddp_device_kind(device: str, say: Spelling = PYTHON) -> str:
    """'cuda' or 'cpu' for a DDP run asked for on ``device``; errors name what is allowed (settings as ``say``
    spells them), and a torch built without
    torch.distributed (``USE_DISTRIBUTED=0``, a macOS source build's default; its module then offers nothing but
    ``is_available``) is one line here rather than an AttributeError."""
    if not dist.is_available():
        raise DeviceError("strategy='ddp' needs torch.distributed, and this torch build has none "
                          f"(torch {torch.__version__}: torch.distributed.is_available() is False, built without "
                          "USE_DISTRIBUTED); install a build that has it (pip's and conda-forge's do), or train on "
                          "one device")
    name = (device or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError(cuda_missing(f"{say('strategy', 'ddp')} with {say('device', 'cuda')}",
                                       f"use {say('device', 'cpu')} (gloo ranks)"))
    if name in ("cpu", "cuda"):
        return name
    raise ConfigError(f"{say('device', device)} with {say('strategy', 'ddp')}: use auto, cpu (gloo ranks) or cuda "
                      f"(NCCL, rank r of a node on cuda:LOCAL_RANK)")


def check_world_size(kind: str, local_world_size: int, option: str = "nproc") -> None:
    """Refuse more ranks on this node than it has devices (one GPU, or at least one core, per rank); ``option``:
    the option that asked for them (the message says what to give it)."""
    if local_world_size < 1:
        raise ConfigError(f"{local_world_size} ranks on this node: give {option} of at least 1")
    have = torch.cuda.device_count() if kind == "cuda" else cpu_cores()
    if local_world_size > have:
        what = (f"{have} CUDA GPU(s) visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
                if kind == "cuda" else f"{have} CPU core(s) available to this process, and each gloo rank needs one")
        raise DeviceError(f"{local_world_size} ranks on this node, but only {what}; "
                          f"give {option} at most {have}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_interface() -> str | None:
    """The interface holding 127.0.0.1 as psutil names it (Linux 'lo', macOS 'lo0'), for ``GLOO_SOCKET_IFNAME``;
    None on Windows (gloo's libuv transport is not known to take its names) or where psutil finds none: gloo then
    picks its own (the hostname's address, else the loopback)."""
    if sys.platform == "win32":
        return None
    import psutil

    try:
        interfaces = psutil.net_if_addrs()
    except (OSError, psutil.Error):
        return None
    return next((name for name, addrs in interfaces.items()
                 if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs)), None)


def local_rendezvous_environment() -> dict[str, str]:
    """The environment defaults of ranks on one machine: gloo over the loopback interface, and on Windows
    TCPStore without libuv (torch 2.4 and 2.5 ask for libuv by default and their Windows builds have none:
    'use_libuv was requested but PyTorch was build without libuv support'; later torch defaults to 0 there)."""
    env = {}
    if (interface := loopback_interface()) is not None:
        env["GLOO_SOCKET_IFNAME"] = interface
    if sys.platform == "win32":
        env["USE_LIBUV"] = "0"
    return env


def init_distributed(device: str = "auto", timeout_s: float = 300.0, threads: int | None = None,
                     backend: str | None = None) -> DistEnv:
    """Join the job the launcher's environment describes (``LAUNCH_ENV``; or the group the caller made): NCCL and
    ``cuda:LOCAL_RANK`` on GPUs, gloo on CPU. Collectives that wait longer than ``timeout_s`` fail instead of
    hanging. CPU ranks get ``threads`` intra-op threads (default: the node's cores divided among its ranks).
    ``backend='gloo'`` on CUDA lets ranks share a GPU (rank r on cuda:r mod GPUs): a correctness check of the
    multi-rank CUDA path on a one-GPU machine, not a way to measure speed."""
    kind = ddp_device_kind(device)
    if kind == "cuda":
        from ...machine.cuda import prepare_cuda

        prepare_cuda()  # cuDNN off where torch's cuDNN refuses these GPUs (P100/V100 with cuDNN >= 9.11)
    owns = not dist.is_initialized()  # else the caller (a notebook, a test) created the group
    if owns:
        if missing := [k for k in LAUNCH_ENV if k not in os.environ]:
            raise ConfigError(f"init_distributed needs a launcher's environment (missing: {', '.join(missing)}): run "
                              "this process under torchrun or srun, or let train_parallel start local ranks (nproc=N)")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if owns and not (kind == "cuda" and backend == "gloo"):  # gloo ranks may share a GPU
        check_world_size(kind, local_world, "the launcher's ranks per node (torchrun --nproc-per-node, srun "
                                            "--ntasks-per-node)")
    # collectives and streams on this rank's own GPU, whoever made the group
    dev = torch.device("cuda", local_rank % torch.cuda.device_count()) if kind == "cuda" else torch.device("cpu")
    if kind == "cuda":
        torch.cuda.set_device(dev)
    if owns:
        backend = backend or ("nccl" if kind == "cuda" else "gloo")
        dist.init_process_group(backend, timeout=_dt.timedelta(seconds=timeout_s))
    else:
        backend = dist.get_backend()
    chosen = rank_threads(cpu_cores(), local_world, threads) if kind == "cpu" else None
    if chosen is not None:
        torch.set_num_threads(chosen["used"])
    return DistEnv(rank, world, local_rank, local_world, backend, dev, owns, chosen)


def close_distributed(env: DistEnv) -> None:
    """Destroy the process group if this module created it, once every rank has got here: a rank that
    tears its group down while another still talks to it can abort (gloo: SIGABRT at exit)."""
    if env.owns_group and dist.is_initialized():
        with contextlib.suppress(Exception):  # a peer already gone: nothing left to wait for
            barrier(env)
        dist.destroy_process_group()


def barrier(env: DistEnv) -> None:
    if env.backend == "nccl":  # the rank's own GPU (local_rank modulo the GPUs, as init_distributed chose it)
        dist.barrier(device_ids=[env.device.index])
    else:
        dist.barrier()


def comm_failure(exc: BaseException, env: DistEnv, timeout_s: float, where: str,
                 say: Spelling = PYTHON) -> DistributedError | None:
    """The one-line error for ``exc`` if it is a lost collective (a rank gone or too slow), else None."""
    if not (isinstance(exc, getattr(dist, "DistError", ())) or (
            isinstance(exc, RuntimeError) and any(h in str(exc).lower() for h in _COMM_FAILURE_HINTS))):
        return None
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    return DistributedError(f"rank {env.rank}/{env.world_size} lost contact with the other ranks during {where} "
                            f"({first}); another rank failed or waited longer than {say('dist_timeout_s', timeout_s)}"
                            "; nothing more was written")
