"""The device: resolving a name to a torch device, what it is (for records), synchronised clocks, the CPU thread
policy, and the messages for a GPU that is not there; and what one run asks of the machine, asked once when its
Trainer is made and kept with it (``for_run`` gives a ``RunMachine``): the device made ready (cuDNN off where torch's
cuDNN refuses the GPU), the autocast dtype, a CPU run's C heap; then the run's peak memory from its start, and the
record's ``memory`` and ``backends`` sections. Imports torch, psutil, ``errors``, ``rules`` (how a refusal names the
device), ``machine.cuda`` and ``machine.memory``."""

from __future__ import annotations

import functools
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import psutil
import torch

from ..errors import ConfigError, DeviceError
from ..rules import PYTHON, Spelling
from .cuda import backends_record, prepare_cuda
from .memory import heap_for_run, page_faults, peak_memory_mb, reset_peak_memory

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps"


def no_cuda_reason() -> str:
    """Why a CUDA run cannot happen here, with the torch build that says so (a skipped record's reason)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # with a CUDA build, the likely culprit when set
    hides = ("" if not torch.version.cuda or visible is None else
             "; CUDA_VISIBLE_DEVICES is empty, which hides every GPU" if not visible.strip() else
             f"; CUDA_VISIBLE_DEVICES={visible.strip()} names the GPUs torch may use")
    return (f"no usable CUDA GPU on this machine (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'none'}{hides})")


def cuda_missing(asked: str, hint: str) -> str:
    """The one error message for a CUDA device asked for on a machine without a usable one."""
    return f"{asked} asked for, but there is {no_cuda_reason()}; {hint}"


def device_problem(name: str, hint: str | None = None, say: Spelling = PYTHON) -> str | None:
    """Why the device ``name`` cannot be used on this machine, or None (``auto`` always can); a name that is no
    device is a ``ConfigError``. Asked without creating a CUDA context, so a launcher can ask before its workers
    start; the build's GPU architectures are left to ``resolve_device``. ``hint`` ends the message: what to do
    (default: the CPU); ``say`` names the setting (``device='cuda'``, ``--device cuda``)."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        return None
    asked, hint = say("device", name), hint or f"use {say('device', 'cpu')}"
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()) or (index and kind != "cuda"):
        raise ConfigError(f"{asked} is not one of {DEVICE_CHOICES}")
    if kind == "cuda":
        if not torch.cuda.is_available():
            return cuda_missing(asked, hint)
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            return f"{asked}: only {count} CUDA device(s) visible (cuda:0..cuda:{count - 1}); {hint}"
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        return f"{asked} asked for, but MPS is not available here; {hint}"
    return None


def resolve_device(name: str = "auto", say: Spelling = PYTHON) -> torch.device:
    """``auto`` picks CUDA, then MPS, then CPU; an explicit device that is not present is an error naming the
    setting as ``say`` spells it."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        name = ("cuda" if torch.cuda.is_available() else "mps"
                if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available() else "cpu")
    problem = device_problem(name, say=say)
    if problem is not None:
        raise DeviceError(problem)
    kind, _, index = name.partition(":")
    if kind == "cuda":
        from .cuda import arch_problem, prepare_cuda

        arch = torch.cuda.get_arch_list()  # empty: a build that does not report one, which is not refused
        for i in [int(index)] if index else range(torch.cuda.device_count()):  # any of them (CUDA_VISIBLE_DEVICES)
            problem = arch and arch_problem(f"cuda:{i} {torch.cuda.get_device_name(i)}",
                                            tuple(torch.cuda.get_device_capability(i)), arch, say)
            if problem:  # training would die at the first kernel: "no kernel image is available"
                raise DeviceError(f"{say('device', name)}: {problem}")
        prepare_cuda()  # cuDNN off where torch's cuDNN refuses these GPUs (P100/V100 with cuDNN >= 9.11)
    return torch.device(name)


def indexed(device: torch.device) -> torch.device:
    """``cuda`` as ``cuda:N`` (the current device): some CUDA calls need the index."""
    unindexed = device.type == "cuda" and device.index is None
    return torch.device("cuda", torch.cuda.current_device()) if unindexed else device


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a clock read measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def clock(device: torch.device) -> float:
    """``time.perf_counter()`` after the device's queued work has finished: the one way lstmnb reads a clock around
    device work (DESIGN: synchronise before every clock read)."""
    synchronize(device)
    return time.perf_counter()


def off_the_gpu(opt: torch.optim.Optimizer, device: torch.device) -> torch.optim.Optimizer:
    """``opt``, whose steps start no CUDA when ``device`` is not a GPU. From torch 2.12, Adam's step (and most others')
    first checks for a CUDA-graph capture by asking for the accelerator stream (``_accelerator_getStream``), which
    starts CUDA on a machine with a GPU: a CPU run there would hold a context on GPU 0 (each CPU DDP rank one) and pay
    its start in its first timed epoch. CPU tensors are never captured, so the check is skipped (a private torch
    method: on a torch without it, this sets an unused attribute)."""
    if device.type != "cuda":
        opt._accelerator_graph_capture_health_check = lambda: None
    return opt


def amp_choice(mode: str, device_type: str, capability: tuple[int, int] | None = None,
               say: Spelling = PYTHON) -> torch.dtype | None:
    """The autocast dtype for ``mode`` on a device of ``device_type`` (a GPU's ``capability``); None means full
    float32. Pure. bfloat16 only where the GPU computes it natively (``cuda.bf16_native``): ``auto`` takes float16
    elsewhere (with a loss scaler), and ``bf16`` on such a GPU is an error, named as ``say`` spells ``amp``."""
    from .cuda import bf16_native

    if mode == "off" or (mode == "auto" and device_type != "cuda"):
        return None
    if device_type != "cuda":
        raise ConfigError(f"{say('amp', mode)} is for CUDA devices; this run is on {device_type} (use {say('amp', 'off')})")
    if mode == "fp16":
        return torch.float16
    native = capability is not None and bf16_native(capability)
    if mode == "bf16" and not native:
        raise DeviceError(f"{say('amp', mode)} asked for, but " + (
            f"this GPU (SM {capability[0]}.{capability[1]}) has no native bfloat16 (SM 8.0 and newer do)" if capability
            else "no CUDA GPU capability is known") + f"; use {say('amp', 'fp16')}")
    return torch.bfloat16 if native else torch.float16


# --- what the device is (the record's ``device`` section) -------------------------------------------

def _affinity() -> list[int] | None:
    """The CPUs this process may run on where the system says (Linux and Windows, through psutil; SLURM and taskset
    limits count), else None (macOS has no affinity)."""
    try:
        return sorted(psutil.Process().cpu_affinity())
    except (AttributeError, NotImplementedError, OSError, psutil.Error):
        return None


def cpu_cores() -> int:
    """CPU cores this process may run on: its affinity where the system has one, else every logical core."""
    return len(_affinity() or []) or os.cpu_count() or 1


def local_rank_limit() -> int:
    """The most local processes or CPU threads a run may start (DDP ranks, all-reduce ranks, --threads): more only
    contend."""
    return max(64, 4 * (os.cpu_count() or 1))


BUSY_WINDOW_S = 0.2  # how long ``cpu_threads`` watches the cores before a CPU run


def thread_policy(cores: int, busy: float | None, default: int, *, own: float = 0.0, window_s: float | None = None,
                  load_1min: float | None = None, requested: int | None = None,
                  env_threads: int | None = None) -> dict[str, Any]:
    """How many intra-op threads a CPU run uses, and why (the record's ``threads`` section). Pure. ``requested``
    (``--threads``) always wins, then an ``OMP_NUM_THREADS`` the user set (``env_threads``). Otherwise torch's
    ``default`` (one per core) is cut when other processes keep the cores busy now: OpenMP threads spin while they wait
    for each other, so a thread that shares its core with another busy process stalls the whole step (measured: an epoch
    2.3x slower beside one busy process on 2 cores). ``busy`` is how many of the ``cores`` other processes kept busy
    over the last ``window_s`` seconds (``busy_cores``; this process's own ``own`` is left out); the run takes the cores
    they leave, rounded, at least one. ``load_1min`` is only recorded, for comparison: the load average keeps a finished
    job's load for a minute, so it is not what the choice reads."""
    base: dict[str, Any] = {"cores": cores, "default": default,
                            "busy_cores": None if busy is None else round(busy, 2), "own_busy": round(own, 2),
                            "window_s": None if window_s is None else round(window_s, 3),
                            "load_1min": None if load_1min is None else round(load_1min, 2)}
    if requested is not None:
        return {**base, "used": requested, "policy": "explicit", "reason": "threads set by the caller (--threads)"}
    if env_threads is not None:
        return {**base, "used": env_threads, "policy": "environment", "reason": "OMP_NUM_THREADS is set"}
    if busy is None:
        return {**base, "used": default, "policy": "default", "reason": "no CPU time counters on this system"}
    used = max(1, min(default, math.floor(cores - busy + 0.5)))
    seen = f"other processes kept {busy:.1f} of {cores} core(s) busy over the last {window_s or 0:.1f} s"
    if used >= default:
        return {**base, "used": default, "policy": "default", "reason": f"{seen}: enough left for {default} thread(s)"}
    return {**base, "used": used, "policy": "reduced for load",
            "reason": f"{seen}, and threads that share a core spin; --threads N chooses"}


def rank_threads(cores: int, local_world: int, requested: int | None = None) -> dict[str, Any]:
    """The ``threads`` section of a CPU rank of a DDP job (``requested``: ``--threads``, per rank): the node's cores
    shared among its ranks, at least one each, so that ranks do not spin on each other's cores."""
    if requested is not None:
        return {"cores": cores, "used": requested, "policy": "explicit",
                "reason": "threads per rank set by the caller (--threads)"}
    return {"cores": cores, "used": max(1, cores // local_world), "policy": "shared by ranks",
            "reason": f"{cores} core(s) shared by the {local_world} rank(s) on this node; --threads N chooses"}


def busy_cores(window_s: float = BUSY_WINDOW_S, cpus: set[int] | None = None) -> dict[str, float] | None:
    """How many of ``cpus`` (default: the cores this process may run on; every core where the system has no affinity, as
    on macOS) were busy over the next ``window_s`` seconds: ``others`` (every process but this one) and ``own`` (this
    process's CPU time); None where the system gives no per-core CPU times. What the machine is doing now, not in the
    last minute. Busy is psutil's ``cpu_percent``: all but idle and iowait (a hypervisor's other guests count as
    busy)."""
    if cpus is None:
        cpus = set(_affinity() or range(os.cpu_count() or 1))
    own0, t0 = os.times(), time.perf_counter()
    try:
        percent = psutil.cpu_percent(interval=window_s, percpu=True)
    except (OSError, psutil.Error, NotImplementedError):
        return None
    own1, elapsed = os.times(), time.perf_counter() - t0
    busy = sum(p for i, p in enumerate(percent) if i in cpus) / 100  # in cores
    own = ((own1.user - own0.user) + (own1.system - own0.system)) / elapsed
    return {"others": max(0.0, busy - own), "own": own, "window_s": elapsed}


def busy_while(fn, *args: Any, **kwargs: Any) -> tuple[Any, float | None]:
    """``fn(*args, **kwargs)`` and how many cores other processes kept busy while it ran: all the machine's busy CPU
    time over the call, less this process's and its finished children's (the ranks of a DDP run it started), per
    second of the call. None where the system has no CPU time counters."""
    def machine_busy() -> float:
        t = psutil.cpu_times()
        # Linux counts a hypervisor guest's time inside user and nice already; psutil lists it apart too
        apart = sum(getattr(t, name, 0.0) for name in ("idle", "iowait", "guest", "guest_nice"))
        return sum(t) - apart

    def own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    try:
        m0, o0 = machine_busy(), own()
    except (OSError, AttributeError):  # pragma: no cover - no counters
        return fn(*args, **kwargs), None
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    elapsed = max(time.perf_counter() - t0, 1e-6)
    return out, max(0.0, (machine_busy() - m0 - (own() - o0)) / elapsed)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``n`` inside the block, put back as they were afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cpu_threads(requested: int | None = None) -> dict[str, Any]:
    """``thread_policy`` with this machine's cores, the cores other processes keep busy now (measured over
    ``BUSY_WINDOW_S``, only when neither ``requested`` nor ``OMP_NUM_THREADS`` decides) and torch's default."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    env_threads = torch.get_num_threads() if env.isdigit() and int(env) > 0 else None
    seen = busy_cores() if requested is None and env_threads is None else None
    return thread_policy(cpu_cores(), None if seen is None else seen["others"], torch.get_num_threads(),
                         own=seen["own"] if seen else 0.0, window_s=seen["window_s"] if seen else None,
                         load_1min=psutil.getloadavg()[0], requested=requested, env_threads=env_threads)


# fixed for the process: the system is asked once, not twice per record
@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name (Linux's /proc/cpuinfo, macOS's sysctl, the Windows registry), or the platform's
    processor string where none of them answers (on macOS that is 'arm' or 'i386', on Windows a family code)."""
    return _named_cpu() or platform.processor() or platform.machine()


def _named_cpu() -> str | None:
    with suppress(OSError, subprocess.SubprocessError):
        if sys.platform.startswith("linux"):
            with open("/proc/cpuinfo") as fh:  # portable: Linux only (checked above)
                for line in fh:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        elif sys.platform == "darwin":
            got = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=5)
            return got.stdout.strip() if got.returncode == 0 else None
        elif sys.platform == "win32":
            import winreg

            with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0") as key:
                return str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()
    return None


def host_memory_bytes() -> int:
    return int(psutil.virtual_memory().total)


# the SLURM variables that say which job, allocation and step a run belongs to (record: device.slurm)
SLURM_FIELDS = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME", "cluster": "SLURM_CLUSTER_NAME",
                "partition": "SLURM_JOB_PARTITION", "nodelist": "SLURM_JOB_NODELIST",
                "nodes": "SLURM_JOB_NUM_NODES", "cpus_per_task": "SLURM_CPUS_PER_TASK", "step_id": "SLURM_STEP_ID",
                "array_job_id": "SLURM_ARRAY_JOB_ID", "array_task_id": "SLURM_ARRAY_TASK_ID"}


def device_info(device: str | None = None) -> dict[str, Any]:
    """Kind, name, count and memory of ``device`` ('cpu', 'cuda', 'cuda:1', 'mps'), plus the host CPU and, inside a
    SLURM job, the job (``slurm``)."""
    kind = (device or "cpu").split(":")[0]
    info: dict[str, Any] = {
        "kind": kind, "name": cpu_model(), "count": 1, "memory_gb": round(host_memory_bytes() / 2**30, 1),
        "cpu_model": cpu_model(), "cpu_cores": os.cpu_count(), "cpu_physical_cores": psutil.cpu_count(logical=False),
        "torch_threads": torch.get_num_threads(), "hostname": platform.node(),
        # runnable processes (1, 5, 15 min) when the record was made: a load above the core count means this run was
        # timed under contention (psutil emulates it on Windows, where the first call gives zeros)
        "load_avg": [round(v, 2) for v in psutil.getloadavg()],
    }
    if "SLURM_JOB_ID" in os.environ:  # the job (ids, partition, nodes; numbers as ints)
        values = {key: os.environ[var] for key, var in SLURM_FIELDS.items() if var in os.environ}
        info["slurm"] = {key: int(v) if v.isdigit() else v for key, v in values.items()}
    if kind == "cuda" and torch.cuda.is_available():
        index = int(device.split(":")[1]) if device and ":" in device else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(name=props.name, count=torch.cuda.device_count(), memory_gb=round(props.total_memory / 2**30, 1),
                    capability=f"{props.major}.{props.minor}")
    elif kind == "cuda":
        info.update(name=None, count=0, memory_gb=None, note="no CUDA device visible")
    elif kind == "mps":
        info.update(name="Apple MPS")
    return info


@dataclass
class RunMachine:
    device: torch.device
    adtype: torch.dtype | None  # the autocast dtype; None: float32
    heap: dict[str, Any] | None  # a CPU run's C heap (the record's ``memory.heap``); None elsewhere
    peak_since_reset: bool = False  # set by ``start_peak``: the memory figure is this run's own
    faults_at_start: int | None = None  # set by ``start_peak`` on a CPU

    def start_peak(self) -> None:
        """Reset the peak memory (and on a CPU count page faults from here) once model and data are placed."""
        self.peak_since_reset = reset_peak_memory(self.device)
        self.faults_at_start = page_faults() if self.device.type == "cpu" else None

    def sections(self) -> dict[str, Any]:
        """The record's ``memory`` (peak, heap, page faults) and ``backends`` (cuDNN, TF32, the LSTM's math)."""
        memory = peak_memory_mb(self.device, self.peak_since_reset)
        if self.heap is not None:
            memory["heap"] = self.heap
        if self.faults_at_start is not None and (now := page_faults()) is not None:
            memory["page_faults"] = now - self.faults_at_start
        return {"memory": memory, "backends": backends_record(self.device, self.adtype)}


def for_run(device: torch.device, amp: str, heap: str) -> RunMachine:
    """Ask the machine once what a run on ``device`` needs (``amp`` and ``heap`` as the config names them)."""
    if device.type == "cuda":
        prepare_cuda()  # before the model reaches the GPU: cuDNN off where torch's cuDNN refuses it
    kept = heap_for_run(heap == "kept") if device.type == "cpu" else None
    return RunMachine(device, run_amp(device, amp), kept)


def run_amp(device: torch.device, amp: str, say: Spelling = PYTHON) -> torch.dtype | None:
    """``amp_choice`` by the run's own GPU's capability (cuda:N, not the current device)."""
    capability = (tuple(torch.cuda.get_device_capability(indexed(device)))
                  if device.type == "cuda" and amp in ("auto", "bf16") else None)
    return amp_choice(amp, device.type, capability, say)
