"""The batch-size sweep: batch x factor per point on one device until out of memory, each point a record (``ok``, or
``oom`` where memory ran out), optionally under a memory cap so the out-of-memory path can be seen on any machine."""

from __future__ import annotations

import multiprocessing
import platform
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch
from tqdm import tqdm

from ..machine.device import indexed, resolve_device
from ..machine.memory import free_memory, is_oom, proc_status_kb
from ..machine.processes import START_METHOD, preload
from ..errors import ConfigError
from ..records import Recorder, software_info
from ..rules import PYTHON, Spelling, check_fields, number, ruled, whole
from ..training import Trainer, skipped_record, train
from ..training.evaluate import fit_blend

MAX_CAP_MB = 2**30  # 1 PiB: more than any machine has, and its bytes still fit the limits' C integers


@dataclass
class SweepConfig:
    """Batch sizes start, start x factor, ... up to ``max_batch`` (default: the training set), stopping at OOM.

    ``memory_cap_mb`` limits memory during each point (GPU: the caching allocator's per-process fraction; CPU: the
    data-segment limit RLIMIT_DATA at what the process uses now plus the cap), so an allocation past it really fails
    and the sweep's OOM handling is what a real device limit exercises. A capped point runs in a child process of its
    own: the cap, and what it needs (small thread stacks), never touch the caller's process."""

    start: int = ruled(32, whole(1, note="the sweep's first batch size"))
    factor: int = ruled(4, whole(2, note="each batch size is the last one times it"))
    max_batch: int | None = ruled(None, whole(1))
    memory_cap_mb: float | None = ruled(None, number(positive=True, hi=MAX_CAP_MB, says=f"a positive number of MB, "
                                                     f"at most {MAX_CAP_MB} (1 PiB, beyond any machine's memory)"))

    def check_start(self, n_train: int, say: Spelling = PYTHON) -> None:
        """The first batch is at most the ``n_train`` training samples, or not one point would run (and the
        sweep would print an empty table)."""
        if self.start > n_train:
            raise say.refuse("start", self.start, f"is more than the {n_train} training samples; give at most {n_train}")

    def validate(self, say: Spelling = PYTHON) -> None:
        """Each value by its rule, then the largest batch against the first; a refusal names it as ``say`` spells it
        (``--first-batch 0``, ``start=0``)."""
        check_fields(self, say)
        if self.max_batch is not None and self.max_batch < self.start:
            raise say.refuse("max_batch", self.max_batch, f"is below {say('start', self.start)}; give a largest batch "
                             "size at least the first")


def check_cpu_cap() -> None:
    """A CPU memory cap needs Linux: the limit is the process's data segment now (/proc's VmData) plus the cap,
    under RLIMIT_DATA, which Linux applies to mmap'd memory too (since 4.7). macOS has no VmData, so the
    limit would be the cap alone, not what the point adds; Windows has no such limit at all."""
    if not sys.platform.startswith("linux"):
        raise ConfigError(f"memory_cap_mb on cpu needs Linux (its data-size limit over what the process uses now); "
                          f"not on {platform.system() or sys.platform}: use a CUDA device or no memory_cap_mb here")


@contextmanager
def memory_cap(cap_mb: float | None, device: torch.device) -> Iterator[None]:
    """Let the block allocate at most ``cap_mb`` more MB on ``device``; past it, allocations fail. On CPU this caps the
    whole process (RLIMIT_DATA) and shrinks new threads' stacks, so ``batch_sweep`` calls it only inside the child
    process that runs a capped point."""
    if cap_mb is None:
        yield
        return
    cap = int(cap_mb * 2**20)
    device = indexed(device)  # the allocator's fraction is set per indexed device (cuda:N)
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
    check_cpu_cap()
    import resource  # Linux, checked above

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    old_stack, old_monitor = threading.stack_size(), tqdm.monitor_interval
    threading.stack_size(512 * 1024)
    tqdm.monitor_interval = 0
    limit = (proc_status_kb("VmData") or 0) * 1024 + cap
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
        threading.stack_size(old_stack)
        tqdm.monitor_interval = old_monitor


def _warm_up(windows, cfg, device: torch.device) -> None:
    """One tiny step outside any cap, so torch's lazy imports and kernels load before memory is capped
    (a capped import failing would read as the model running out of memory). The record's software
    facts and CUDA's device count are read here too: on a GPU host either can start the CUDA driver,
    whose address-space reservations a capped process cannot make (it would die, and read as oom)."""
    software_info()
    torch.cuda.is_available()  # cached by torch after the first call
    tr = Trainer(windows, replace(cfg, strategy="single", checkpoint=None, resume=False), device)
    x = torch.from_numpy(windows.x["train"][:2]).to(device)
    y = torch.from_numpy(tr.feed.y[:2]).to(device)  # the targets as the step takes them (with point weights)
    tr.step(x, y)
    del tr
    # the record's blend fit runs numpy's LAPACK, whose OpenBLAS allocates its work buffers on first use (a
    # capped process cannot: "OpenBLAS error: Memory allocation still failed"); the first fit runs here
    fit_blend(windows, windows.to_kelvin(windows.y["val"]), cfg.blend)
    free_memory(device)


def _oom_reason(exc: BaseException, batch: int, cap_mb: float | None) -> str | None:
    """The ``oom`` record's reason when ``exc`` is a failed allocation, else None. Under a cap, oneDNN
    reports a failed allocation as 'could not create a primitive'. An error raised while an out-of-memory
    error was being handled (e.g. ending a CUDA graph capture that ran out of memory) is that OOM."""
    while not is_oom(exc) and exc.__context__ is not None and is_oom(exc.__context__):
        exc = exc.__context__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not (is_oom(exc) or (cap_mb is not None and "could not create a primitive" in first)):
        return None
    first = first[first.find("DefaultCPUAllocator"):] if "DefaultCPUAllocator" in first else first
    return (f"out of memory at batch_size={batch}" + (f" under a {cap_mb:g} MB cap" if cap_mb else "")
            + f": {first[:300]}")


def _point(windows, point, data_info, cap_mb: float | None,
           on_capped: Callable[[], None] | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """One sweep point: (record, None), or (None, the oom reason). Other failures propagate.
    ``on_capped`` is called once the cap is in force (the child tells its parent)."""
    device = resolve_device(point.device)
    try:
        if cap_mb is not None:
            _warm_up(windows, point, device)
        with memory_cap(cap_mb, device):
            if on_capped is not None:
                on_capped()
            return train(windows, point, data_info=data_info).record, None
    except Exception as exc:  # noqa: BLE001 - only out-of-memory is a result; anything else propagates
        reason = _oom_reason(exc, point.batch_size, cap_mb)
        if reason is None:
            raise
        return None, reason
    finally:
        free_memory(device)


def death_status(exitcode: int | None, capped: bool, batch: int, cap_mb: float) -> tuple[str, str]:
    """(status, reason) for a capped point whose process ended without a result. Pure. Under the cap, an
    allocation that fails outside Python (a thread's stack, a library's buffer) ends the process by a
    signal (SIGABRT, SIGSEGV, SIGBUS, or the kernel's SIGKILL): ``oom``. Anything else, or a death before
    the cap was set, is ``failed``: it says nothing about memory."""
    how = (f"was killed by {signal.Signals(-exitcode).name}" if isinstance(exitcode, int) and exitcode < 0
           else f"exited with status {exitcode}")
    # SIGBUS and SIGKILL exist on POSIX only
    memory_signals = tuple(getattr(signal, n) for n in ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGKILL")
                           if hasattr(signal, n))
    if capped and isinstance(exitcode, int) and exitcode < 0 and -exitcode in memory_signals:
        return "oom", (f"out of memory at batch_size={batch} under a {cap_mb:g} MB cap: the point's process {how} "
                       f"while capped (an allocation outside Python failed)")
    when = "while capped" if capped else "before its memory cap was set"
    return "failed", f"the point's process at batch_size={batch} {how} {when}; not an out-of-memory end"


def _child(conn, windows, point, data_info, cap_mb: float) -> None:
    """A capped point's process: tells the parent when the cap is set, then sends the result or the error."""
    try:
        out = _point(windows, point, data_info, cap_mb, on_capped=lambda: conn.send(("capped", None)))
        conn.send(("result", out))
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it there
        conn.send(("error", exc))
    finally:
        conn.close()


def _capped_point(windows, point, data_info, cap_mb: float) -> tuple[dict[str, Any] | None, str | None, str]:
    """``_point`` in a process of its own (``machine.processes``: no threads or CUDA state inherited), so that the
    cap cannot take down the caller. Returns (record, reason, status): status ``oom`` or ``failed`` when there is no
    record; a child that dies instead of answering is judged by ``death_status``."""
    preload(__name__)
    ctx = multiprocessing.get_context(START_METHOD)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, windows, replace(point, progress=False), data_info, cap_mb))
    proc.start()
    child.close()
    capped, answer = False, None
    try:
        while answer is None:
            try:
                kind, value = parent.recv()
            except EOFError:  # the child died without a word
                break
            if kind == "capped":
                capped = True
            else:
                answer = (kind, value)
    except BaseException:  # Ctrl-C, or SIGTERM to this process alone: the point is not waited for
        proc.kill()
        raise
    finally:
        proc.join()
        parent.close()
    if answer is None:
        status, reason = death_status(proc.exitcode, capped, point.batch_size, cap_mb)
        return None, reason, status
    kind, value = answer
    if kind == "error":
        raise value
    return (*value, "oom")  # _point's (record, oom reason)


def batch_sweep(windows, cfg, sweep: SweepConfig = SweepConfig(), *, data_info: dict[str, Any] | None = None,
                results=None,
                on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train at batch sizes start, start x factor, ... on one device until out of memory or ``max_batch``. A point that
    runs out of memory is recorded with status ``oom`` and ends the sweep (a capped point whose process dies for another
    reason: ``failed``, with the reason); memory is freed between points. Each ok record has time per epoch and the
    final validation RMSE, so speed and quality can be read side by side."""
    sweep.validate()
    device = resolve_device(cfg.device)
    n_train = windows.x["train"].shape[0]
    top = min(sweep.max_batch or n_train, n_train)
    sweep.check_start(n_train)
    if sweep.memory_cap_mb is not None and device.type == "cpu":
        check_cpu_cap()  # before any point's process starts
    recorder = Recorder(results, on_point)
    b = sweep.start
    while b <= top:
        point = replace(cfg, strategy="single", device=str(device), batch_size=b, checkpoint=None, resume=False,
                        experiment="batch-sweep")
        info = {"batch_size": b, "start": sweep.start, "factor": sweep.factor, "memory_cap_mb": sweep.memory_cap_mb}
        if sweep.memory_cap_mb is None:
            (rec, why), status = _point(windows, point, data_info, None), "oom"
        else:
            rec, why, status = _capped_point(windows, point, data_info, sweep.memory_cap_mb)
        if rec is None:
            rec = skipped_record(point, why, status=status, data=data_info)
        rec["sweep"] = info
        recorder.add(rec)
        if rec["status"] in ("oom", "failed"):
            break
        b *= sweep.factor
    return recorder.records
