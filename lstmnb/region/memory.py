"""Memory and step time of the region forecaster against the area's size: dense vs sparse relation.

The memory model of one training step (forward, backward, Adam), in float32 copies of the relation's weights R (dense:
``channels * n^2`` weights; sparse: ``channels * n * k``) and the activations A the per-cell LSTM keeps for its backward
pass (O(n), ``activation_bytes``; the sparse relation adds its (n, k) index and gathered neighbour inputs, O(n k)). As
the backward pass starts, A is alive beside the weights and Adam's two moments (``zero_grad`` freed the last gradient):
A + 3R. In Adam's step A is gone; the weights, gradient, two moments and two temporaries of the update (``sqrt(v) / c``
is built out of place) are alive: 6R. The peak is ``max(A + 3R, 6R)``. The dense R = 4 * channels * n^2 bytes grows as
the fourth power of a square's side: once 6R passes A + 3R, the dense model's memory is its relation's. PyTorch's
runtime (threads, kernels' buffers) is a constant ``floor``, measured on a 3 x 3 area.

On CPU each case runs in a process of its own (``machine.processes``: on Linux forked from a server that imported
torch once), where glibc returns freed blocks of 1 MiB and more at once; its peak is the kernel's high-water mark of
resident memory (VmHWM, reset through ``/proc/self/clear_refs`` once the inputs are built) minus the resident memory
then: the step's own memory, whatever allocator PyTorch uses (tracemalloc does not see it). Where the reset is refused,
the process's own peak (``process_peak_mb``) is used and the method says so. On a GPU, PyTorch's allocator statistics
give the peak."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import multiprocessing
import re
import statistics
import time
from dataclasses import dataclass

from ..machine.device import off_the_gpu, resolve_device, synchronize
from ..machine.memory import proc_status_kb, process_peak_mb, reset_peak_memory, return_freed_blocks
from ..machine.processes import START_METHOD, preload
from ..errors import DeviceError
from ..rules import PYTHON, Spelling, check_fields, choice, ruled, whole
from .model import VARIANTS, variant_config

ADAM_COPIES = 6  # value, gradient, two moments, two temporaries of the update
FLOAT = 4  # bytes of float32


@dataclass(frozen=True)
class MemoryCase:
    """One measured training step: an ``ny`` x ``nx`` area, a model variant and a batch of windows."""

    ny: int = ruled(10, whole(1))
    nx: int = ruled(10, whole(1))
    variant: str = ruled("sparse", choice(VARIANTS))  # 'none', 'sparse' or 'dense'
    batch: int = ruled(4, whole(1))  # windows per step
    window: int = ruled(24, whole(1))
    # the target, the four calendar inputs and the fitted cycle, as `lstmnb train` reads them
    n_features: int = ruled(6, whole(1))
    n_mixed: int = ruled(1, whole(1))  # the weather inputs the neighbours mix
    hidden: int = ruled(32, whole(1))
    channels: int = ruled(3, whole(1))
    neighbours: int = ruled(8, whole(0, note="0: no mix"))
    steps: int = ruled(3, whole(1))  # timed steps after one warm-up step
    device: str = ruled("cpu", choice(("cpu", "cuda")))
    threads: int | None = None  # CPU threads of the measuring process (None: torch's default)

    @property
    def n_cells(self) -> int:
        return self.ny * self.nx

    def validate(self, say: Spelling = PYTHON) -> None:
        check_fields(self, say)
        self.model_config().validate()

    def model_config(self):
        return variant_config(self.variant, n_features=self.n_features, n_mixed=self.n_mixed, hidden=self.hidden,
                              neighbours=self.neighbours, channels=self.channels)


def relation_bytes(case: MemoryCase) -> int:
    """Bytes of one float32 copy of the relation's learned weights (0 without a relation)."""
    if case.variant == "none":
        return 0
    return FLOAT * case.channels * case.n_cells * (case.n_cells if case.variant == "dense" else case.neighbours)


def activation_bytes(case: MemoryCase) -> int:
    """Bytes kept for the backward pass, O(cells): the LSTM's and, for the sparse relation, its gather's. Per
    sequence (one cell of one window) and step, PyTorch's LSTM keeps its input row (``input_size``), the four gates,
    the cell state and its tanh, and the hidden state, and its backward pass allocates gradient buffers of the same
    size: about 2 * (input_size + 8 * hidden) floats. The sparse gather keeps the (n, k, batch * window * 2 n_mixed)
    neighbour values and changes and the (n, k) int64 index."""
    mcfg = case.model_config()
    sequences_steps = case.batch * case.n_cells * case.window
    lstm = 2 * FLOAT * sequences_steps * (mcfg.input_size + 8 * case.hidden)
    if case.variant != "sparse":
        return lstm
    n, k = case.n_cells, case.neighbours
    return lstm + FLOAT * n * k * case.batch * case.window * 2 * case.n_mixed + 8 * n * k


def predict_bytes(case: MemoryCase, floor_bytes: int = 0) -> dict[str, int]:
    """The memory model (the module's docstring) in bytes: relation_weights, activations, and ``total`` = floor +
    max(A + 3R, 6R)."""
    case.validate()
    rel, act = relation_bytes(case), activation_bytes(case)
    return {"relation_weights": rel, "activations": act,
            "total": int(floor_bytes) + max(act + 3 * rel, ADAM_COPIES * rel)}


SEARCH_SIDE = 100_000  # the largest side largest_side looks at (10^10 cells, beyond the globe's 0.25° grid)


def largest_side(variant: str, budget_bytes: float, base: MemoryCase = MemoryCase(), floor_bytes: int = 0) -> int:
    """The largest side s whose s x s area's predicted step fits ``budget_bytes`` (0 if none does; SEARCH_SIDE when
    that fits too: the search looks no further). The prediction grows with the side: a bisection."""
    def over(s: int) -> bool:
        case = dataclasses.replace(base, ny=s, nx=s, variant=variant)
        return predict_bytes(case, floor_bytes)["total"] > budget_bytes

    sides = range(2, SEARCH_SIDE + 1)
    first_over = bisect.bisect_left(sides, True, key=over)
    return sides[first_over - 1] if first_over else 0


# --- measuring -------------------------------------------------------------------------------------

def run_case(case: MemoryCase) -> dict:
    """One warm-up and ``case.steps`` timed steps on synthetic inputs in this process (``measure`` has validated the
    case; on CPU, call it in a fresh process, as ``measure`` does, for a clean peak): the steps' peak bytes (how: the
    module's text), the median step seconds, the method and the loss."""
    import torch

    from .grid import Grid
    from .model import region_model

    dev = resolve_device(case.device)
    if case.threads:
        torch.set_num_threads(case.threads)
    gen = torch.Generator().manual_seed(0)
    grid = Grid.square(case.ny, case.nx)
    x = torch.randn(case.batch, case.window, case.n_cells, case.n_features, generator=gen).to(dev)
    y = torch.randn(case.batch, case.n_cells, 1, generator=gen).to(dev)

    # the peak counts from here: the model's weights, the optimizer's state and the steps
    reset = reset_peak_memory(dev)
    if dev.type == "cuda":
        base, method = torch.cuda.memory_allocated(dev), "torch.cuda.max_memory_allocated"
    else:
        base = (proc_status_kb("VmRSS") or 0) * 1024
        method = "VmHWM after clear_refs" if reset else "process peak (no reset possible)"
    model = region_model(case.model_config(), grid, seed=0).to(dev)
    opt = off_the_gpu(torch.optim.Adam(model.parameters(), lr=1e-3), dev)
    times = []
    for i in range(case.steps + 1):
        synchronize(dev)
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        synchronize(dev)
        if i:
            times.append(time.perf_counter() - t0)
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated(dev)
    else:
        # Linux: VmHWM, the mark reset above where that took; elsewhere the process's all-time peak
        peak = int((process_peak_mb() or 0) * 2**20)
    return {"measured_bytes": int(max(0, peak - base)), "step_s": statistics.median(times), "method": method,
            "loss": float(loss.detach())}


def _measuring_process(case: MemoryCase, conn) -> None:
    """Entry of the measuring process: ``run_case``'s result, or why it failed, sent back on ``conn``."""
    # a relation of 20 MB per copy measured 100 MB more than one of 64 MB with glibc's own threshold
    return_freed_blocks(2**20)
    try:
        out = run_case(case)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a failed case
        out = {"error": failure_reason(exc)}
    conn.send(out)
    conn.close()


def failure_reason(exc: BaseException) -> str:
    """Why a case failed, in one short line: out of memory said so with what was asked, without the C++ source
    location torch's allocator puts first ("[enforce fail at alloc_cpu.cpp:127] ...")."""
    from ..machine.memory import is_oom

    text = re.sub(r"\[enforce fail at [^\]]*\]\s*", "", (str(exc).strip().splitlines() or [""])[0])
    if is_oom(exc):
        asked = re.search(r"allocate (\d+) bytes", text) or re.search(r"[Tt]ried to allocate ([\d.]+ \w+)", text)
        size = "" if asked is None else (f"{int(asked[1]) / 2**30:,.1f} GiB" if asked[1].isdigit() else asked[1])
        return f"out of memory{f': tried to allocate {size}' if size else ''}"
    return f"{type(exc).__name__}: {text[:300]}"


def _row(case: MemoryCase, floor_bytes: int) -> dict:
    return {"ny": case.ny, "nx": case.nx, "cells": case.n_cells, "variant": case.variant,
            "device": case.device, **{f"predicted_{k}": v for k, v in predict_bytes(case, floor_bytes).items()}}


def measure(case: MemoryCase, floor_bytes: int = 0, timeout_s: float = 600.0) -> dict:
    """``run_case`` in a process of its own (CPU; ``machine.processes``) or in this one (CUDA), beside the prediction
    (with ``floor_bytes`` for the runtime). A case that fails, is killed (out of memory) or runs past ``timeout_s``
    comes back with ``status`` 'failed' and the reason."""
    row = _row(case, floor_bytes)  # the prediction validates the case
    if case.device == "cuda":
        return {**row, **run_case(case), "status": "ok"}
    preload(__name__)
    ctx = multiprocessing.get_context(START_METHOD)
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_measuring_process, args=(case, there))
    proc.start()
    there.close()
    answered, got = False, None
    try:
        answered = here.poll(timeout_s)  # True at the process's end too, with nothing to read
        if answered:
            with contextlib.suppress(EOFError):
                got = here.recv()
    finally:  # past the time, or Ctrl-C or SIGTERM to this process alone: the case is not waited for
        if got is None:
            proc.kill()
        proc.join()
        here.close()
    if not answered:
        return {**row, "status": "failed", "reason": f"no result within {timeout_s:g} s"}
    if got is None:
        how = f"killed by signal {-proc.exitcode}" if proc.exitcode < 0 else f"exit status {proc.exitcode}"
        return {**row, "status": "failed", "reason": f"the measuring process ended ({how}) without a result"}
    if "error" in got:
        return {**row, "status": "failed", "reason": got["error"]}
    return {**row, **got, "status": "ok"}


def floor_case(base: MemoryCase = MemoryCase()) -> MemoryCase:
    """The case that measures the runtime's own memory (the threads, the kernels' workspaces and caches that every
    larger case has too): one step of the sparse model on a 3 x 3 area."""
    return dataclasses.replace(base, ny=3, nx=3, variant="sparse", neighbours=min(base.neighbours, 8), steps=1)


def sweep(sides, variants=("sparse", "dense"), budget_bytes: float = 4 * 2**30, base: MemoryCase = MemoryCase(),
          floor_bytes: int | None = None, run: bool = True, echo=None):
    """Square areas of each side in ``sides``, per variant, until the predicted step exceeds ``budget_bytes``: a
    DataFrame, one row per (variant, side). A variant's first side over budget is listed with status 'over budget'
    and not run; larger sides are skipped, as are those after a failed case. ``floor_bytes`` (default: measured on
    ``floor_case``, or 0 with ``run=False``) is added to every prediction. With ``run=False`` nothing is measured."""
    import pandas as pd

    if floor_bytes is None and run:
        got = measure(floor_case(base))
        if got["status"] != "ok":
            raise DeviceError(f"cannot measure even a 3 x 3 area: {got['reason']}")
        floor_bytes = got["measured_bytes"]
    floor_bytes = 0 if floor_bytes is None else floor_bytes
    rows = []
    for variant in variants:
        for side in sorted(int(s) for s in sides):
            case = dataclasses.replace(base, ny=side, nx=side, variant=variant)
            row = _row(case, floor_bytes)
            if row["predicted_total"] > budget_bytes:
                rows.append({**row, "status": "over budget"})
                break
            row = measure(case, floor_bytes) if run else {**row, "status": "predicted"}
            rows.append(row)
            if echo:
                echo(_describe(row))
            if row["status"] == "failed":
                break
    out = pd.DataFrame(rows)
    out.attrs.update(floor_bytes=int(floor_bytes), budget_bytes=float(budget_bytes))
    return out


def _describe(row: dict) -> str:
    got = row.get("measured_bytes")
    meas = (f"measured {got / 2**20:8.1f} MiB, step {row['step_s']:.3f} s" if got is not None
            else f"{row['status']} {row.get('reason', '')}".strip())
    return (f"{row['variant']:>6} {row['ny']:>4} x {row['nx']:<4} ({row['cells']:>6} cells): predicted "
            f"{row['predicted_total'] / 2**20:8.1f} MiB, {meas}")


def plot_memory(df, budget_bytes: float | None = None):
    """Peak memory (predicted lines, measured points) and step time against cells, per variant."""
    import matplotlib.pyplot as plt

    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (variant, part) in enumerate(df.groupby("variant", sort=False)):
        colour = f"C{i}"
        # a legend entry only for what is drawn: no finite value, no line (one point gets a marker, not a line)
        pred = part[part["predicted_total"].notna()]
        if len(pred):
            ax_m.plot(pred["cells"], pred["predicted_total"] / 2**20, "-" if len(pred) > 1 else "_", ms=12,
                      color=colour, label=f"{variant} predicted")
        ok = part[part["status"] == "ok"] if "status" in part else part
        for ax, col, unit, fmt, label in ((ax_m, "measured_bytes", 2**20, "o", f"{variant} measured"),
                                          (ax_t, "step_s", 1, "o-", variant)):
            got = ok[ok[col].notna()] if col in ok else ok.iloc[:0]
            if len(got):
                ax.plot(got["cells"], got[col] / unit, fmt, color=colour, label=label)
    if budget_bytes:
        ax_m.axhline(budget_bytes / 2**20, color="grey", ls="--", label="budget")
    for ax, what in ((ax_m, "peak memory of a step (MiB)"), (ax_t, "seconds per training step")):
        ax.set(xscale="log", yscale="log", xlabel="cells in the area", ylabel=what)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
