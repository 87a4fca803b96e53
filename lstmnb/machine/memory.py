"""Memory, per run: the peak a run reached on its device (CUDA's allocator statistics; on a CPU Linux's resettable
resident-set high-water mark, elsewhere the process's all-time peak, said so), out-of-memory errors told from others,
freeing a device's cached memory between the points of a study, and a CPU run's C heap (``keep_freed_heap``: on
glibc, freed memory is kept for the next step, not given back and faulted in again)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import platform
import sys
from typing import Any

import psutil
import torch


def proc_status_kb(field: str) -> int | None:
    """One ``kB`` field of /proc/self/status (VmHWM, VmData, VmRSS, ...), or None where there is none (every system
    but Linux: ``peak_memory_mb`` then says why and gives psutil's process-wide figure)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/status") as fh:  # portable: Linux only (returned above)
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    return None


# glibc's malloc (malloc.h): blocks from the mmap threshold up get their own mapping, unmapped when freed; free memory
# at the heap's top beyond the trim threshold goes back to the system. Its defaults adapt to the largest mapped block
# freed and, for the published two-layer LSTM, mostly settle where every step gives back and faults in again some 17 MB
# (1.7 million page faults in 3 epochs against 115,000 with the thresholds below: 0.54x the training time;
# benchmarks/heap_cpu.py), though study runs fell 0.4 to 11.6 million faults apart (benchmarks/study_loop.py). 32 MiB is
# glibc's largest mmap threshold on 64-bit; up to 64 MiB of freed heap stays.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HEAP_MMAP_THRESHOLD, HEAP_TRIM_THRESHOLD = 32 * 2**20, 64 * 2**20


@functools.lru_cache(maxsize=None)
def _glibc() -> Any:
    """The process's C library where it is glibc (its ``mallopt`` and ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:  # pragma: no cover - a Linux without a loadable C library
        return None


def return_freed_blocks(threshold: int = 2**20) -> None:
    """glibc: blocks of ``threshold`` bytes and more get a mapping of their own, unmapped when freed, so the resident
    memory follows the live allocations, not what the heap kept of freed ones (a measuring process's: glibc's own
    threshold grows to 32 MiB); elsewhere nothing changes."""
    if (libc := _glibc()) is not None:
        libc.mallopt(M_MMAP_THRESHOLD, threshold)


@functools.lru_cache(maxsize=None)
def keep_freed_heap() -> dict[str, Any]:
    """Set glibc's mmap and trim thresholds (``HEAP_*``) for the process, once; the record's ``memory.heap``.
    Process-wide, and decided by facts, not callers (docs/architecture.md, "Rules"): glibc has no getter for the
    thresholds, and setting either turns their adaptation off, so they cannot be put back after a run. Elsewhere
    (macOS, Windows, musl) the system's allocator is left as it is, and the section says so."""
    if (libc := _glibc()) is None:
        return {"policy": "system", "reason": "not glibc: the system's allocator as it is"}
    if (libc.mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD) != 1  # pragma: no cover - a glibc that refuses the values
            or libc.mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD) != 1):
        return {"policy": "system", "reason": "glibc refused the thresholds"}
    return {"policy": "kept", "mmap_threshold_mb": HEAP_MMAP_THRESHOLD / 2**20,
            "trim_threshold_mb": HEAP_TRIM_THRESHOLD / 2**20,
            "reason": "glibc keeps freed memory for the next step instead of faulting it in again"}


def heap_for_run(keep: bool) -> dict[str, Any]:
    """A CPU run's C heap, the record's ``memory.heap``: kept (``keep_freed_heap``) when ``keep``; else glibc's
    default thresholds, unless an earlier run in this process already kept it, which glibc cannot undo."""
    if keep or _glibc() is None:  # not glibc: the system's allocator either way
        return keep_freed_heap()
    if keep_freed_heap.cache_info().currsize:
        return {**keep_freed_heap(), "reason": "heap=system was asked, but an earlier run in this process had kept "
                                               "freed memory, which glibc cannot undo: run it in a fresh process"}
    return {"policy": "system", "reason": "glibc's default thresholds (heap=system)"}


def page_faults() -> int | None:
    """Minor page faults so far of this process and its finished children (DataLoader workers once an epoch ends),
    the regime a CPU run's heap ran in; None without ``getrusage`` (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return sum(resource.getrusage(who).ru_minflt for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def reset_peak_memory(device: torch.device) -> bool:
    """Start a run's peak-memory window; True if the peak read at the end will be this run's own. CUDA: the
    allocator's peak statistics. CPU (and MPS, whose figure is the process's resident set): Linux's resettable
    high-water mark (writing 5 to /proc/self/clear_refs sets VmHWM to the current RSS); getrusage's max RSS is the
    process's all-time peak, so a sweep would record its largest point for every point."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    if not sys.platform.startswith("linux"):  # macOS, Windows: no resettable peak (see peak_memory_mb)
        return False
    if (libc := _glibc()) is not None:  # free heap back to the system: what an earlier run left free is not this run's
        libc.malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as fh:  # portable: Linux only (checked above)
            fh.write("5")
    except OSError:  # a kernel or sandbox that refuses it
        return False
    hwm, rss = proc_status_kb("VmHWM"), proc_status_kb("VmRSS")  # the reset took: the mark is back at the RSS
    return hwm is not None and rss is not None and hwm <= rss * 1.05 + 1024


def peak_memory_mb(device: torch.device, since_reset: bool = True) -> dict[str, Any]:
    """Peak memory of the run since ``reset_peak_memory``: CUDA allocator for GPUs, the process's resident-set
    high-water mark otherwise. ``since_reset=False`` (the reset was not possible) gives None for the CPU figure rather
    than a process-lifetime peak presented as the run's (that one goes apart, as ``process_peak_mb``)."""
    if device.type == "cuda":
        return {"kind": "cuda_max_allocated", "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20}
    hwm_kb = proc_status_kb("VmHWM") if since_reset else None
    out: dict[str, Any] = {"kind": "process_peak_rss", "peak_mb": hwm_kb / 1024 if hwm_kb is not None else None}
    if hwm_kb is None:
        out["note"] = (f"no per-run peak on {platform.system() or 'this system'} (needs Linux's resettable "
                       "VmHWM through /proc/self/clear_refs); process_peak_mb is the process's all-time peak")
        out["process_peak_mb"] = process_peak_mb()
    return out


def process_peak_mb() -> float | None:
    """The process's all-time peak resident set in MiB (Linux: VmHWM, this program's own; Windows: the peak working
    set; elsewhere getrusage's max RSS, in bytes on macOS), or None where the system gives neither. Not getrusage on
    Linux: a process started by fork and exec keeps there the resident set its parent had at the fork, so a small
    measuring process started from a large kernel would report the kernel's size."""
    if (kb := proc_status_kb("VmHWM")) is not None:
        return kb / 1024
    peak = getattr(psutil.Process().memory_info(), "peak_wset", None)
    if peak is not None:
        return peak / 2**20
    try:
        import resource
    except ImportError:
        return None
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 2**20 if platform.system() == "Darwin" else maxrss / 1024  # KiB: the BSDs, a Linux without /proc


# how CUDA libraries word a failed allocation when it reaches Python as a RuntimeError
OOM_MESSAGES = ("out of memory", "can't allocate memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
                "cusolver_status_alloc_failed", "cufft_alloc_failed")


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory failure: CUDA's allocator, a CUDA library's workspace (cuBLAS, cuDNN, cuSOLVER,
    cuFFT report ``*_ALLOC_FAILED``) or the CPU allocator (a failed malloc)."""
    if isinstance(exc, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGES)


def free_memory(device: torch.device) -> None:
    """Give cached memory back between runs (Python's garbage and, on CUDA, the allocator's cache)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
