"""Training speed measured the way the field does: time to a target quality, throughput, and model FLOPs utilisation
(MFU) against this machine's own measured matmul rate. Three contenders train the same model on the same windows,
alternated over repeats so that drift of a shared machine hits all of them alike; medians are reported."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..machine.cuda import backends_record, fp32_math
from ..machine.device import clock, indexed, resolve_device, torch_threads
from ..errors import ConfigError
from ..profiles import load_profile
from ..records import Recorder
from ..report import device_label
from ..rules import PYTHON, Spelling
from ..training import PRESETS, TrainConfig, prepare_windows, train
from ..training.guards import stop_if_diverged

# The setting the published experiments timed (the ``published`` preset: window 24 h, two layers of 64, batch 128,
# plain Adam 1e-3, a per-sample Dataset + DataLoader(num_workers=2)); the epoch budget is the benchmark's own. The time
# to a validation target needs a validation part, which the study's split has not: every contender's data is split
# alike, by ``base``, whose problem (window, lead, model size) is by default the study's (``STUDY_PROBLEM``).
PROBLEM_KEYS = ("window", "lead_hours", "horizon", "hidden", "layers")
STUDY_PROBLEM = {k: PRESETS["published"][k] for k in PROBLEM_KEYS}
PUBLISHED = {k: v for k, v in PRESETS["published"].items()
             if k not in ("epochs", "patience", "split_dates", *PROBLEM_KEYS)}
# The same model and batch on the fast path: the training set as tensors, shuffled index batches.
FAST_SAME_BATCH = dict(PUBLISHED, input_path="fast", fused_adam=True)
# The recommended fast setting lives in the device profiles (lstmnb/profiles/*.yaml, key `parameters.recommended`,
# with the measurements that chose it), read from the device's profile so the notebooks and the benchmark time the same.
CONTENDERS = ("published", "fast", "recommended")
# the shipped profile of each GPU the study covers (by report.device_label); other GPUs use the A100's
_GPU_PROFILES = {"T4": "colab-t4", "P100": "carc-p100", "V100": "carc-v100", "A40": "carc-a40", "A100": "carc-a100"}
GEMMS_PER_SAMPLE = 30  # a GPU sample: back-to-back GEMMs between two CUDA events, one synchronisation
WARMUP_S = 0.1  # GEMMs before the reference is timed, measured on the synchronised clock
MATH_LABELS = {"tf32": "on TF32 tensor cores, as cuDNN runs the LSTM here",
               "float32": "IEEE float32, as the LSTM runs here"}


def profile_for(device: torch.device) -> str:
    """The profile whose recommended setting applies on ``device``: cpu, or the GPU's own profile."""
    if device.type != "cuda":
        return "cpu"
    return _GPU_PROFILES.get(device_label("cuda", torch.cuda.get_device_name(device)), "carc-a100")


def contender_settings(name: str, profile: str = "cpu") -> dict[str, Any]:
    """The TrainConfig overrides of one contender (the recommended one: measured, from ``profile``, a shipped
    name or .yaml path)."""
    if name not in CONTENDERS:
        raise ConfigError(f"contender {name!r} is not one of {', '.join(CONTENDERS)}")
    if name != "recommended":
        return dict(PUBLISHED if name == "published" else FAST_SAME_BATCH)
    rec = load_profile(profile).parameters.get("recommended") or {}
    if not rec:
        raise ConfigError(f"profile {profile!r} has no recommended setting; measure one with `lstmnb bench speed`")
    return dict(FAST_SAME_BATCH, **rec)


def gemm_rate(size: int, gemms: int, seconds: float) -> float:
    """FLOP/s of ``gemms`` square GEMMs of ``size`` done in ``seconds`` (2 size^3 FLOPs each). Pure."""
    return 2 * size**3 * gemms / seconds


def _gpu_sample_s(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, gemms: int) -> float:
    """Seconds per GEMM of ``gemms`` back-to-back GEMMs timed by CUDA events, one host sync after the last."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(gemms):
        torch.mm(a, b, out=out)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / gemms  # elapsed_time is in milliseconds


def warm_up(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, dev: torch.device, seconds: float = WARMUP_S) -> None:
    """GEMMs, a few queued between synchronised clock reads, until ``seconds`` have passed: an idle GPU raises
    its clocks over tens of milliseconds, and timed after two GEMMs the reference read low and MFU high."""
    t0 = clock(dev)
    while clock(dev) - t0 < seconds:
        for _ in range(8 if dev.type == "cuda" else 1):
            torch.mm(a, b, out=out)


def matmul_rate(device: str | torch.device = "cpu", size: int = 2048, repeats: int = 7,
                dtype: torch.dtype = torch.float32, precision: str = "float32",
                gemms: int = GEMMS_PER_SAMPLE) -> float:
    """Measured dense GEMM rate in FLOP/s (median of ``repeats`` samples) on the threads torch uses now.
    ``precision='tf32'`` measures float32 GEMMs on TF32 tensor cores (``cuda.fp32_math`` for the measurement only), the
    math cuDNN's LSTM uses on Ampere and newer by default. ``warm_up`` runs first.

    On a GPU each sample is ``gemms`` GEMMs queued back to back and timed with CUDA events: a GEMM timed alone between
    two full synchronisations also pays a launch and a device sync (10-20 us against a 50-110 us TF32 GEMM on an H100),
    which would lower the rate and raise MFU. On the CPU a call returns when its GEMM is done, so each sample is one
    GEMM between two clock reads (microseconds of Python against tens of milliseconds of arithmetic)."""
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if gemms < 1 or repeats < 1:
        raise ConfigError(f"gemms={gemms} and repeats={repeats} must be >= 1")
    with fp32_math("matmul", precision == "tf32"):
        a, b = (torch.randn(size, size, device=dev, dtype=dtype) for _ in range(2))
        out = torch.empty(size, size, device=dev, dtype=dtype)
        warm_up(a, b, out, dev)
        times = []
        if dev.type == "cuda":
            with torch.cuda.device(indexed(dev)):
                times = [_gpu_sample_s(a, b, out, gemms) for _ in range(repeats)]
        else:
            for _ in range(repeats):
                t0 = clock(dev)
                torch.mm(a, b, out=out)
                times.append(clock(dev) - t0)
    return gemm_rate(size, 1, statistics.median(times))


def mfu_precision(device: torch.device) -> str:
    """The float32 math the LSTM runs at on ``device`` ('tf32' or 'float32'): MFU's denominator is a GEMM
    rate in the same math (``cuda.lstm_math``), so a TF32 LSTM is not divided by a plain-FP32 rate."""
    return backends["lstm_math"] if (backends := backends_record(device)) else "float32"


@dataclass
class SpeedReport:
    """Per-run rows, the per-contender medians, and what they were measured against."""

    runs: pd.DataFrame
    table: pd.DataFrame
    target_rmse_k: float
    val_persistence_rmse_k: float
    matmul_flops: float
    device: str
    matmul_precision: str
    max_epochs: int
    repeats: int
    notes: list[str] = field(default_factory=list)


def mfu_text(mfu: float) -> str:
    """MFU as a percentage with two significant digits, so 0.5% on a GPU does not print as 0%."""
    return "-" if pd.isna(mfu) else f"{100 * mfu:.2g}%"


def _time_to_target_text(row: pd.Series, max_epochs: int) -> str:
    if pd.notna(row["time_to_target_s"]):
        return f"{row['time_to_target_s']:.2f}"
    return f"not reached in {max_epochs} epochs (best {row['best_val_rmse_k']:.3f} K)"


def speed_benchmark(request=None, *, device: str = "auto", repeats: int = 3, max_epochs: int = 15,
                    target_rmse: float | None = None, target_fraction: float | None = None,
                    only: list[str] | None = None, results=None, windows=None,
                    base: TrainConfig | None = None, progress: bool = True, say: Spelling = PYTHON) -> SpeedReport:
    """Train each contender ``repeats`` times (alternating), stopping at the target, and summarise. The target is
    ``target_rmse`` (K), else ``target_fraction`` (None: 0.9) of persistence's validation RMSE. ``windows`` may be given
    to skip extraction (tests use tiny ones); ``base`` supplies settings that all contenders share (e.g. a smaller
    hidden size in tests); ``say``: how refusals and advice name settings."""
    if repeats < 1 or max_epochs < 1:
        raise ConfigError(f"repeats={repeats} and max_epochs={max_epochs} must be >= 1")
    names = list(only or CONTENDERS)
    if len(set(names)) < len(names):  # each would run (and be shown) as often as it is named
        raise ConfigError(f"only={names} names a contender more than once; give each once")
    dev = resolve_device(device, say)
    # each contender's settings once, from the profile of this device (validates the names too)
    settings = {n: contender_settings(n, profile_for(dev)) for n in names}
    base = replace(base or TrainConfig(**STUDY_PROBLEM), device=str(dev), epochs=max_epochs, patience=None, progress=False,
                   experiment="speed")
    info: dict[str, Any] = {}
    if windows is None:  # the contenders' inputs (all three: the published ones, no calendar or cycles)
        windows, info = prepare_windows(request, replace(base, **settings[names[0]]), progress=progress, say=say)
    val_pers = windows.baselines["val"]["persistence"]["rmse"]
    target = target_rmse if target_rmse is not None else (0.9 if target_fraction is None else target_fraction) * val_pers
    rates: list[float] = []  # the matmul rate, measured beside every run: drift hits it as it hits them
    precision = mfu_precision(dev)
    rows = []
    recorder = Recorder(results or None)
    bar = tqdm(total=repeats * len(names), desc="bench speed", unit="run", disable=not progress)
    for rep in range(repeats):
        order = names if rep % 2 == 0 else names[::-1]  # alternate so drift hits all contenders alike
        for name in order:
            cfg = replace(base, **settings[name], target_rmse=target, stop_at_target=True, seed=base.seed + rep)
            rec = train(windows, cfg, data_info=info, say=say).record
            # MFU's denominator on the threads this run trained on: the load policy decides afresh at every
            # call, so a rate taken under a decision of its own could be a 1-thread rate beside a 2-thread run
            threads = rec["threads"]["used"]
            with torch_threads(threads):
                rates.append(matmul_rate(dev, precision=precision))
            rec["contender"] = name
            rec["mfu_reference"] = {"matmul_flops_per_s": rates[-1], "precision": precision, "threads": threads,
                                    "gemms_per_sample": GEMMS_PER_SAMPLE if dev.type == "cuda" else 1}
            stop_if_diverged(rec, recorder.results)  # its figures would not be comparable
            recorder.add(rec)
            t, ttt = rec["timing"], rec["timing"]["time_to_target"]
            # a run that reached the target in its warm-up epoch has no steady epoch: its samples/s would be the
            # warm-up's (summary falls back to it), not a steady rate beside the others'
            steady = lambda v: v if t.get("steady_epochs") else float("nan")  # noqa: E731
            rows.append({
                "contender": name, "repeat": rep, "batch": cfg.batch_size, "input": cfg.input_path,
                "steady": bool(t.get("steady_epochs")),
                "samples_per_s": steady(t["samples_per_s"]), "epoch_s": steady(t["epoch_s_median"]),
                "time_to_target_s": ttt.get("seconds"), "epochs_to_target": ttt.get("epoch"),
                "best_val_rmse_k": ttt.get("best_val_rmse_k"), "test_rmse_k": rec["metrics"]["test_rmse_k"],
                "train_flops_per_s": steady(t.get("train_flops_per_s")),
                "mfu": steady(t.get("train_flops_per_s")) / rates[-1] if t.get("train_flops_per_s") else float("nan"),
            })
            bar.update(1)
    bar.close()
    runs = pd.DataFrame(rows)
    med = runs.groupby("contender", sort=False).agg(
        batch=("batch", "first"), input=("input", "first"), samples_per_s=("samples_per_s", "median"),
        epoch_s=("epoch_s", "median"), time_to_target_s=("time_to_target_s", lambda s: s.median() if s.notna().all() else float("nan")),
        epochs_to_target=("epochs_to_target", "median"), best_val_rmse_k=("best_val_rmse_k", "median"),
        test_rmse_k=("test_rmse_k", "median"), train_flops_per_s=("train_flops_per_s", "median"),
        mfu=("mfu", "median"),  # each run's FLOP/s over the rate on its own threads, then the median
    ).reindex(names)
    notes = []
    if "published" in med.index:
        ref = med.loc["published"]
        med["samples_per_s_vs_published"] = med["samples_per_s"] / ref["samples_per_s"]
        med["time_to_target_speedup"] = ref["time_to_target_s"] / med["time_to_target_s"]
        med["test_rmse_vs_published"] = med["test_rmse_k"] - ref["test_rmse_k"]
    for name, g in runs.groupby("contender", sort=False):
        if not g["steady"].all():
            notes.append(f"{name}: {int((~g['steady']).sum())} of {len(g)} repeat(s) reached the target in the warm-up "
                         "epoch, so had no steady epoch to time: samples/s, s/epoch and MFU "
                         + ("are the median of the others" if g["steady"].any() else "not measured (-)"))
    notes += [f"{name}: target {target:.3f} K {_time_to_target_text(row, max_epochs)} in at least one repeat"
              for name, row in med.iterrows() if pd.isna(row["time_to_target_s"])]
    return SpeedReport(runs=runs, table=med, target_rmse_k=target, val_persistence_rmse_k=val_pers,
                       matmul_flops=statistics.median(rates), device=str(dev), matmul_precision=precision,
                       max_epochs=max_epochs, repeats=repeats, notes=notes)


def format_report(rep: SpeedReport) -> str:
    """The table and the ratios, with the definitions, for the terminal or a notebook."""
    t = rep.table
    out = pd.DataFrame({"batch": t["batch"].astype(int), "input": t["input"]}, index=t.index)
    out["samples/s"] = t["samples_per_s"].map(lambda v: "-" if pd.isna(v) else f"{v:,.0f}")
    out["s/epoch"] = t["epoch_s"].map(lambda v: "-" if pd.isna(v) else f"{v:.3f}")
    out["s to target"] = [_time_to_target_text(r, rep.max_epochs) for _, r in t.iterrows()]
    out["epochs"] = t["epochs_to_target"].map(lambda v: "-" if pd.isna(v) else f"{v:.0f}")
    out["test RMSE K"] = t["test_rmse_k"].map("{:.3f}".format)
    out["GFLOP/s"] = (t["train_flops_per_s"] / 1e9).map(lambda v: "-" if pd.isna(v) else f"{v:.1f}")
    out["MFU"] = t["mfu"].map(mfu_text)
    if "samples_per_s_vs_published" in t:
        out["x samples/s"] = t["samples_per_s_vs_published"].map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")
        out["x time-to-target"] = t["time_to_target_speedup"].map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")
    lines = [
        f"device {rep.device}; medians of {rep.repeats} alternating repeats; epoch budget {rep.max_epochs}",
        f"target: validation RMSE <= {rep.target_rmse_k:.3f} K (persistence on validation: "
        f"{rep.val_persistence_rmse_k:.3f} K)",
        f"measured float32 matmul rate ({MATH_LABELS[rep.matmul_precision]}): {rep.matmul_flops / 1e9:.1f} GFLOP/s "
        f"(median over the runs, each on its run's threads; MFU = training FLOP/s / the rate beside the run; "
        f"training FLOPs = 3 x forward per sample)",
        "",
        out.to_string(),
        "",
        "samples/s: median over steady epochs (the first, warm-up epoch excluded); s to target: cumulative "
        "training + validation seconds to the first epoch at or below the target; x columns are ratios "
        "against the published setting (higher is better).",
    ]
    lines += rep.notes
    return "\n".join(lines)
