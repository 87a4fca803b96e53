"""What 04 and 05 run and say on any machine: the package's own source on the page, a step's time against its batch,
DDP scaling and the all-reduce over real ranks (gloo on a CPU, NCCL on GPUs), each timed as alternated repeats
(``report.repeats``); the GPU lessons from the shipped reference records, labelled as another machine's; and each
notebook's "what this showed", from its own numbers."""

from __future__ import annotations

import inspect
import math
import textwrap
from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..doctor import gpu_problem
from ..errors import ConfigError
from ..experiments.allreduce import AllreduceConfig, allreduce
from ..experiments.scaling import ScalingConfig, scaling
from ..machine.device import busy_while, clock, cpu_cores, resolve_device
from ..models import flops_per_sample
from ..records import Recorder
from ..report import load_reference_records
from ..report.repeats import median_of_repeats
from ..training import Trainer, with_overrides
from ..training.pipeline import thread_choice

REFERENCE_LABEL = ("another machine's: lstmnb's shipped reference records of 2026-11-27, an NVIDIA H100 "
                   "(16-core Xeon host) on the study's setting and its real ERA5")
STUDY_SETTING = "study's setting (2 layers, batch 128)"
SWEEP_SETTING = "recommended setting (1 layer, residual)"


def source_code(obj: Any) -> str:
    """The source of a function, method or class of the package (compiled functions too), dedented."""
    return textwrap.dedent(inspect.getsource(getattr(obj, "py_func", obj)))


def check_repeats(repeats: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats={repeats!r} must be a whole number >= 1 (3 or more for a median the tables trust)")


# --- 04: a step's time against its batch --------------------------------------------------------------

def step_times(windows, cfg, device: str, batches: Sequence[int], *, steps: int = 20, repeats: int = 3,
               min_s: float = 0.2) -> pd.DataFrame:
    """One row per (repeat, batch): the seconds of one eager optimiser step of ``Trainer.step`` on ``device``, batch
    sizes alternated within each repeat. Each measurement times ``steps`` steps or, if under ``min_s`` seconds, as many
    as fill about ``min_s`` (counted off the second of two warm-up steps, as ``timeit``'s autorange; at most 100 x
    ``steps``): one host hiccup can move 20 GPU steps of 2.5 ms by half."""
    check_repeats(repeats)
    if steps < 1 or not batches or any(int(b) < 1 for b in batches):
        raise ConfigError(f"steps={steps} and batches={list(batches)} must be >= 1")
    if not min_s >= 0:
        raise ConfigError(f"min_s={min_s!r} must be a number of seconds >= 0")
    n_train = windows.x["train"].shape[0]
    if too_big := [int(b) for b in batches if int(b) > n_train]:
        raise ConfigError(f"batch size(s) {too_big} exceed the {n_train} training samples")
    cfg = with_overrides(cfg, cuda_graph=False, input_path="fast", device=device)
    dev = resolve_device(cfg.device)
    flops = flops_per_sample(cfg.model_config(windows.n_features), cfg.window)["training"]
    rows = []
    with thread_choice(cfg, dev) as threads:
        tr = Trainer(windows, cfg, dev)
        x, y = tr.feed.train_tensors()

        def timed(b: int) -> tuple[float, int]:
            xb, yb = x[:b], y[:b]
            tr.step(xb, yb)
            t0 = clock(dev)
            tr.step(xb, yb)
            n = max(steps, min(100 * steps, math.ceil(min_s / max(clock(dev) - t0, 1e-6))))  # 100x at most
            t0 = clock(dev)
            for _ in range(n):
                tr.step(xb, yb)
            return (clock(dev) - t0) / n, n

        for r in range(repeats):
            for b in (int(v) for v in batches):
                (sec, n), busy = busy_while(timed, b)
                rows.append({"repeat": r + 1, "batch": b, "input path": "fast",
                             "device": str(dev), "threads": threads["used"] if threads else None,
                             "steps": n, "step ms": 1e3 * sec, "ms per sample": 1e3 * sec / b,
                             "GFLOP/s": flops * b / sec / 1e9, "busy cores": busy})
    return pd.DataFrame(rows)


def step_time_table(rows: pd.DataFrame) -> pd.DataFrame:
    """``step_times`` as medians per batch with their flags (``report.repeats``)."""
    table = median_of_repeats(rows.drop(columns=["repeat"]), ["batch", "input path", "device", "threads"], "step ms")
    if "steps" in table:
        table["steps"] = table["steps"].round().astype(int)  # the median count of the repeats' timed steps
    return table.reset_index().set_index("batch")


def fixed_step_cost(table: pd.DataFrame) -> dict[str, float]:
    """Split a step's median time into a part every step pays whatever its batch (Python, operator dispatch; on a GPU
    the kernel launches) and a part per sample: ``per_sample_us`` is the slope from the smallest batch to
    ``best_batch``, the batch of the highest throughput (a larger batch whose data outgrows the caches does not set
    it), ``fixed_ms`` what is left of the smallest batch's step after its samples' share (0 at least),
    ``fixed_share_smallest`` that part's share of the smallest batch's step. Needs two batch sizes or more."""
    table = table.sort_index()
    b = np.asarray(table.index, dtype=float)
    t = np.asarray(table["step ms"], dtype=float)
    if len(b) < 2:
        raise ConfigError("a fixed step cost needs step times at two batch sizes or more")
    best = int(np.argmax(b[1:] / t[1:])) + 1  # the fastest per sample among the batches above the smallest
    slope = max(0.0, (t[best] - t[0]) / (b[best] - b[0]))
    fixed = max(0.0, t[0] - slope * b[0])
    return {"fixed_ms": float(fixed), "per_sample_us": float(slope) * 1e3, "best_batch": int(b[best]),
            "fixed_share_smallest": float(fixed / t[0]) if t[0] > 0 else float("nan")}


def step_sentence(table: pd.DataFrame, fit: dict[str, float]) -> str:
    """What the step times show, in words chosen by the numbers: overhead-bound (flat) at small batches,
    arithmetic-bound (time in proportion to the batch) from where the per-sample part outweighs the fixed one."""
    if not np.isfinite(fit["fixed_ms"]) or fit["per_sample_us"] <= 0:
        return "**What you see.** The step times do not grow with the batch here; read the flags before trusting them."
    cross = fit["fixed_ms"] * 1e3 / fit["per_sample_us"]  # batch where both parts are equal
    return (f"**What you see, and why.** Every step pays about {fit['fixed_ms']:.2f} ms whatever its batch "
            f"(Python, operator dispatch; on a GPU the kernel launches), and about {fit['per_sample_us']:.1f} µs "
            f"per sample of arithmetic on top. The two are equal near batch {cross:,.0f}: below it a step is "
            f"overhead-bound (time nearly flat, few useful FLOP/s), above it arithmetic-bound (time grows in "
            f"proportion to the batch). A device with far more arithmetic per second, a GPU, shrinks the per-sample "
            f"part but not the fixed one, so for a small model it moves that crossing to far larger batches: on the "
            f"reference H100 below, even a step replayed as a CUDA graph takes the same time at batch 32 and 128."
            + (f" Above batch {fit['best_batch']:,} a sample costs more again (on a CPU most likely its data "
               f"outgrowing the caches), so the per-sample figure is taken up to that batch." if fit.get("best_batch", 0) < table.index.max()
               else ""))


def reference_step_table() -> pd.DataFrame:
    """The H100 reference records of 2026-11-27 on the study's data, fast input path: the study's setting eager and as
    a CUDA graph, and the recommended setting's batch sweep. Per (setting, CUDA graph, batch): step time (epoch time /
    steps per epoch), samples/s and FLOP rate. The former synthetic one-layer records (2026-11-22) are left out."""
    df = load_reference_records()
    pick = df[(df["status"] == "ok") & (df["device.kind"] == "cuda") & (df["data.source"] == "study")
              & df["started"].astype(str).str.startswith("2026-11-27") & (df["config.input_path"] == "fast")
              & df["experiment"].isin(["train", "batch-sweep"])]
    rows = []
    for _, r in pick.iterrows():
        if r["experiment"] == "train" and r["config.layers"] != 2:
            continue  # the recommended setting's one run: its batch sweep stands for it
        steps = math.ceil(r["data.sizes.train"] / r["config.batch_size"])
        # a CUDA graph replayed: cuda_graph.used, else (the reference records predate that field) config.cuda_graph
        graph = next((bool(v) for v in (r.get("cuda_graph.used"), r.get("config.cuda_graph"))
                      if isinstance(v, (bool, np.bool_))), False)
        rows.append({"setting": STUDY_SETTING if r["experiment"] == "train" else SWEEP_SETTING,
                     "CUDA graph": graph, "batch": int(r["config.batch_size"]),
                     "step ms": 1e3 * r["timing.epoch_s_median"] / steps, "samples/s": r["timing.samples_per_s"],
                     "GFLOP/s": r.get("timing.train_flops_per_s", float("nan")) / 1e9})
    out = pd.DataFrame(rows)
    return out if out.empty else out.groupby(["setting", "CUDA graph", "batch"]).median(numeric_only=True).sort_index()


# --- 05: DDP scaling and all-reduce over real ranks --------------------------------------------------

def ddp_device(gpu: str, ranks: int) -> tuple[str, str]:
    """Where 05's DDP runs go: ``gpu`` when ``ranks`` CUDA GPUs are usable, else the CPU; with a sentence saying why."""
    why = gpu_problem(gpu, ranks)
    if why is None:
        return gpu, f"DDP runs on {ranks} GPUs (NCCL), one process per GPU."
    return "cpu", (f"No {ranks} GPUs here ({why}), so DDP runs as {ranks} processes on this CPU, talking over "
                   f"gloo: the same code and the same all-reduce, on {cpu_cores()} shared core(s).")


def scaling_request(source, points, start: str, days: int | None, cfg):
    """The request and config of 05's DDP runs: the notebook's data, or only its first ``days`` days (the
    last of them tested) so that a quick profile's nine runs stay short. Returns (request, cfg)."""
    from .steps import make_request  # here: importing steps sets up a notebook kernel (figures_inline)

    if days is None:
        return None, cfg
    if isinstance(days, bool) or not isinstance(days, int) or days < 14:
        raise ConfigError(f"scaling_days={days!r} must be None or a whole number of days >= 14")
    first = pd.Timestamp(start)
    test = (first + pd.Timedelta(days=days - 7)).strftime("%Y-%m-%d")
    end = (first + pd.Timedelta(days=days - 1)).strftime("%Y-%m-%d")
    return make_request(source, points, start, end), with_overrides(cfg, split_dates=(test, test))


def ddp_scaling(windows, data_info: dict[str, Any] | None, cfg, *, ranks: int = 2, repeats: int = 3,
                comm_split_steps: int = 20, results=None, more_ranks: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Strong and weak DDP scaling, alternated: each repeat runs one rank at ``cfg.batch_size``, ``ranks``
    ranks splitting it (strong) and ``ranks`` ranks at ``cfg.batch_size`` each (weak), then strong scaling on
    each of ``more_ranks`` (Amdahl's law checked beyond ``ranks``), on the GPUs or, on a CPU, as gloo ranks with
    one thread each (unless ``cfg.threads`` says otherwise). Each record gains ``threads`` (per rank, and the
    cores other processes kept busy during the run) and is appended to ``results``."""
    check_repeats(repeats)
    if cfg.device == "cpu" and cfg.threads is None:
        # one thread per rank: N ranks use N cores, as N GPUs, and no rank's OpenMP threads spin against other work
        cfg = replace(cfg, threads=1)
    if uneven := [n for n in (ranks, *more_ranks) if cfg.batch_size % n]:
        raise ConfigError(f"batch_size={cfg.batch_size} must divide among {uneven[0]} ranks for strong scaling")
    plan = [("strong", 1), ("strong", ranks), ("weak", ranks)] + [("strong", n) for n in more_ranks]
    recorder = Recorder(results)
    for r in range(repeats):
        for mode, n in plan:
            sc = ScalingConfig(world_sizes=(n,), mode=mode, global_batch=cfg.batch_size,
                               comm_split_steps=comm_split_steps)
            (rec,), busy = busy_while(scaling, windows, replace(cfg, progress=False), sc, data_info=data_info)
            per_rank = (rec.get("parallel") or {}).get("threads_per_rank")
            rec["threads"] = {"used": per_rank, "policy": "per rank",
                              "reason": ("one thread per CPU rank, so N ranks use N cores" if cfg.threads == 1
                                         else "each rank's threads as the run set them"),
                              "cores": cpu_cores(), "busy_cores": None if busy is None else round(busy, 2)}
            rec["repeat"] = r + 1
            recorder.add(rec)
    return recorder.records


def allreduce_sweeps(cfg, *, ranks: int = 2, max_bytes: int = 4 * 2**20, budget_s: float = 0.05,
                     repeats: int = 3, n_features: int = 1) -> list[dict[str, Any]]:
    """``repeats`` all-reduce bandwidth sweeps (``experiments.allreduce``: 1 KiB to ``max_bytes`` by x4 and
    the model's gradient size) over ``ranks`` ranks, each with the cores others kept busy meanwhile."""
    check_repeats(repeats)
    device = "cpu" if cfg.device == "cpu" else "auto"
    acfg = AllreduceConfig(world_size=ranks, device=device, max_bytes=max_bytes, budget_s=budget_s)
    out = []
    for _ in range(repeats):
        sweep, busy = busy_while(allreduce, cfg, acfg, n_features)
        out.append({**sweep, "busy_cores": busy})
    return out


def measurable_ranks(device: str, wanted: Sequence[int], ranks: int) -> tuple[list[int], str]:
    """The rank counts of ``wanted`` (besides ``ranks``) that this machine can run one per core (a CPU) or
    one per GPU, with a sentence naming those left out and why."""
    have = cpu_cores() if device == "cpu" else torch.cuda.device_count()
    what = "core(s)" if device == "cpu" else "GPU(s)"
    more = sorted({int(n) for n in wanted if int(n) != ranks and 1 < int(n) <= have})
    left = sorted({int(n) for n in wanted if int(n) > have})
    why = f"not measured here: {', '.join(map(str, left))} ranks need that many {what}, this machine has {have}"
    return more, why if left else ""


def ring_allreduce_bytes(n_params: int, ranks: int, bytes_per_value: int = 4) -> float:
    """Bytes each rank sends in a ring all-reduce of ``n_params`` values: 2 (N - 1) / N x K values."""
    if ranks < 1:
        raise ConfigError(f"ranks={ranks} must be >= 1")
    return 2 * (ranks - 1) / ranks * n_params * bytes_per_value


# --- "what this showed" ------------------------------------------------------------------------------

def _fmt(v: float, digits: int = 2) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:,.{digits}f}"


def what_04_showed(steps_table: pd.DataFrame, fit: dict[str, float], reference: pd.DataFrame, device: str,
                   sync: pd.DataFrame | None = None) -> str:
    """04's conclusions from its own step times, the same step timed without and with synchronising
    (``sync``: one row, those two columns in ms) and the reference records, as Markdown bullets."""
    small, big = steps_table.index.min(), steps_table.index.max()
    lines = [
        f"- On this machine ({device}) one training step of the study's model took "
        f"{_fmt(steps_table.loc[small, 'step ms'])} ms at batch {small} and {_fmt(steps_table.loc[big, 'step ms'])} ms "
        f"at batch {big}: {big // small}x the samples for "
        f"{_fmt(steps_table.loc[big, 'step ms'] / steps_table.loc[small, 'step ms'], 1)}x the time.",
        f"- Every step paid about {_fmt(fit['fixed_ms'])} ms whatever its batch "
        f"({_fmt(100 * fit['fixed_share_smallest'], 0)}% of the smallest batch's step), and "
        f"{_fmt(fit['per_sample_us'])} µs per sample on top. The useful FLOP rate was "
        f"{_fmt(steps_table.loc[small, 'GFLOP/s'], 1)} GFLOP/s at batch {small}, "
        f"{_fmt(steps_table.loc[big, 'GFLOP/s'], 1)} at batch {big} and at best "
        f"{_fmt(steps_table['GFLOP/s'].max(), 1)} (batch {steps_table['GFLOP/s'].idxmax()}).",
    ]
    if flagged := int((steps_table["flag"] != "").sum()):
        lines.append(f"- {flagged} of {len(steps_table)} rows are flagged (see the table): read them as rough.")
    if not reference.empty and STUDY_SETTING in reference.index.get_level_values(0):
        study = reference.xs(STUDY_SETTING, level=0)
        if {True, False} <= set(study.index.get_level_values(0)):
            eager, graph = study.xs(False, level=0), study.xs(True, level=0)
            b = min(set(graph.index) & set(eager.index))
            lines.append(
                f"- On the reference H100 ({REFERENCE_LABEL}) an eager step at batch {b} took "
                f"{_fmt(eager.loc[b, 'step ms'], 3)} ms and the same step replayed as a CUDA graph "
                f"{_fmt(graph.loc[b, 'step ms'], 3)} ms: launches, not arithmetic, set a small LSTM's step time "
                f"on a GPU.")
    if sync is not None and not sync.empty:
        no_sync, synced = (float(v) for v in sync.iloc[0, :2])
        lines.append(f"- Timed without synchronising, a step ({sync.index[0]}) took {_fmt(no_sync, 3)} ms; read "
                     f"after the device had finished, {_fmt(synced, 3)} ms"
                     + (": on a CPU both read finished work." if not str(device).startswith("cuda") else
                        ": the unsynchronised clock counted the launches, not the work."))
    lines.append("- Next: `05_multi_gpu` splits each batch among several processes (data parallelism) and "
                 "measures what the gradient all-reduce costs.")
    return "\n".join(lines)


def what_05_showed(scaling_table: pd.DataFrame, allreduce_table: pd.DataFrame, ring: pd.DataFrame | None = None,
                   amdahl: tuple[dict[str, float], pd.DataFrame] | None = None) -> str:
    """05's conclusions from its own scaling and all-reduce tables, the ring by hand (one row per ranks)
    and Amdahl's law (``amdahl_table``'s output), as Markdown bullets."""
    lines = []
    if ring is not None and not ring.empty:
        for n, r in ring.iterrows():
            lines.append(f"- The ring all-reduce by hand on {n} ranks gave `dist.all_reduce`'s sums (largest "
                         f"difference {r['max |ring - all_reduce|']:.1e}); each rank sent {int(r['bytes sent per rank']):,} "
                         f"bytes against 2(N-1)K/N x 4 = {r['2(N-1)K/N x 4 bytes']:,.0f}, in {_fmt(r['ring us'], 0)} µs "
                         f"against {_fmt(r['all_reduce us'], 0)} µs for `dist.all_reduce` (medians).")
    if amdahl is not None and amdahl[0]["serial share"] >= 1:
        lines.append("- Amdahl's law from these runs: the ranks were no faster than one rank (serial share s = 1), "
                     "so the law allows no speedup on any number of ranks here; read the flags above.")
    elif amdahl is not None:
        fit, table = amdahl
        far = table.index.max()
        lines.append(f"- Amdahl's law from these runs: a serial share s = {_fmt(fit['serial share'])} of the "
                     f"one-rank step (the all-reduce {_fmt(fit['comm share of s'])} of it) allows at most "
                     f"{_fmt(fit['bound'], 1)}x on any number of ranks; it predicts "
                     f"{_fmt(table.loc[far, 'Amdahl'])}x at {far} ranks, "
                     f"{_fmt(table.loc[far, 'comm growing as N - 1'])}x with the all-reduce growing with them.")
    for mode in ("strong", "weak"):
        if scaling_table.empty or mode not in scaling_table.index.get_level_values(0):
            continue
        g = scaling_table.xs(mode, level=0)
        top = g.index.max()
        row = g.loc[top]
        what = (f"{'speedup' if mode == 'strong' else 'scaled speedup'} {_fmt(row['speedup'])}x, "
                f"efficiency {_fmt(row['efficiency'])}" if np.isfinite(row["speedup"]) else row["note"] or "no speedup")
        lines.append(f"- {mode.capitalize()} scaling to {top} ranks ({row['input path']} input path, "
                     f"per-rank batch {int(row['per-rank batch'])}, {_fmt(row['threads'], 0)} threads in all): "
                     f"{_fmt(row['epoch s'])} s per epoch against {_fmt(g.loc[1, 'epoch s'])} s on one rank; "
                     f"{what}." + (f" Flagged: {row['flag']}." if row["flag"] else ""))
        if mode == "strong" and np.isfinite(row.get("comm ms", np.nan)):
            lines.append(f"- Of a {_fmt(row['step ms'])} ms step on {top} ranks, {_fmt(row['comm ms'])} ms "
                         f"({_fmt(row['comm %'], 0)}%) was the gradient all-reduce the backward pass did not hide.")
    if not allreduce_table.empty:
        grad = allreduce_table[allreduce_table["gradients of one step"]]
        big = allreduce_table.loc[allreduce_table["bytes"].idxmax()]
        small = allreduce_table.loc[allreduce_table["bytes"].idxmin()]
        if not grad.empty:
            g = grad.iloc[0]
            lines.append(f"- One step's gradients ({grad.index[0]}) took {_fmt(g['time us'], 0)} µs to all-reduce "
                         f"({_fmt(g['busbw GB/s'], 3)} GB/s bus bandwidth); the smallest message ({small.name}) took "
                         f"{_fmt(small['time us'], 0)} µs at {_fmt(small['busbw GB/s'], 4)} GB/s and the largest "
                         f"({big.name}) {_fmt(big['time us'], 0)} µs at {_fmt(big['busbw GB/s'], 3)} GB/s."
                         + (f" Flagged: {g['flag']}; read these times as rough." if g["flag"] else ""))
    lines.append("- Next: `06_analysis` puts every run of the series beside the study's published table.")
    return "\n".join(lines)
