"""The versions table: every version trained from the same weights on the same batches, timed.

Per version: compile time (the warm-up call: JIT compilation or cache load, CUDA context) apart from run time (the
optimiser steps of N epochs), speedups against ``loops`` and ``numpy``, final train/test loss, and one run record
(experiment ``scratch_versions``). Versions run in turn within each repeat (loops, numpy, ..., then again), so a slow
patch of a shared machine hits all of them; the run time quoted is the median over repeats."""

from __future__ import annotations

import os
import statistics
import warnings
from typing import Any, Sequence

import numpy as np

from ..errors import ConfigError, DeviceError
from ..rules import PYTHON, Spelling
from ..windows import SPLITS, error_metrics
from .data import ScratchData, load_data
from .fit import VERSIONS, FitResult, ScratchConfig, check_version, fit
from .lstm import LSTMShape, predict
from .precision import MATH_LABELS

EXPERIMENT = "scratch_versions"
GPU_VERSIONS = ("numba-cuda", "numba-cuda-block", "torch-cuda")


def evaluate(theta: np.ndarray, shape: LSTMShape, data: ScratchData) -> dict[str, Any]:
    """Scaled MSE per split, test RMSE in the data's units, and the baselines' test RMSE beside it."""
    theta = theta.astype(np.float64)
    pred = {s: predict(theta, data.X[s], shape) for s in SPLITS}  # one forward pass per split
    out: dict[str, Any] = {f"{s}_loss": float(np.mean((pred[s] - data.y[s]) ** 2)) for s in SPLITS}
    truth = data.truth["test"]
    out.update(test_rmse=error_metrics(data.to_units(pred["test"], "test"), truth)["rmse"], units=data.units,
               baselines_test_rmse={k: error_metrics(p, truth)["rmse"] for k, p in data.baselines["test"].items()})
    return out


def skip_reason(version: str, config: ScratchConfig | None = None) -> str | None:
    """Why ``version`` cannot be timed here (None when it can): a GPU version's tiny kernel fails to launch
    (``cuda_check``; the reason names the library versions), Numba's CUDA simulator is on (its times mean nothing), or,
    with ``config``, the network is too large for numba-cuda-block's thread blocks."""
    from .cuda_check import numba_cuda_reason, simulator_enabled, torch_cuda_reason

    if not version.startswith("numba-cuda"):
        return torch_cuda_reason() if version == "torch-cuda" else None
    if (reason := numba_cuda_reason()) is not None:
        return reason
    if simulator_enabled():
        return "NUMBA_ENABLE_CUDASIM=1: the CUDA simulator checks correctness only; its times mean nothing"
    if version == "numba-cuda-block" and config is not None:
        from .numba_cuda_block import check_block, default_samples_per_block

        try:
            check_block(config.hidden, default_samples_per_block(config.hidden, config.batch_size), config.dtype)
        except ConfigError as exc:
            return str(exc)
    return None


def versions_table(versions: Sequence[str] = VERSIONS, config: ScratchConfig | None = None, *, repeats: int = 3,
                   data: ScratchData | None = None, record: bool = True, record_path: str | os.PathLike | None = None,
                   profile: str | None = None, say: Spelling = PYTHON):
    """Train every version ``repeats`` times (alternating) and return the versions table (DataFrame). Unavailable GPU
    versions are ``skipped`` rows with their reason (and a ``skipped`` record), never a number. Records go to
    ``record_path`` (default results/runs.jsonl) when ``record``. ``say``: how refusals and warnings name a setting
    (``batch_size=4096``; the CLI's ``--batch-size 4096``)."""
    import pandas as pd

    from ..records import append_record, new_record

    config = config or ScratchConfig()
    config.validate(say)
    versions = list(dict.fromkeys(check_version(v) for v in versions))  # each once: a row per version
    if repeats < 1:
        raise say.refuse("repeats", repeats, "must be at least 1")
    data = data or load_data(config.data, config.window, config.hours)
    shape = LSTMShape(n_features=data.X["train"].shape[2], hidden=config.hidden, n_outputs=data.y["train"].shape[1])
    n_train = len(data.X["train"])
    if config.batch_size > n_train:  # as `train` says it: it works, but the number is not what it says
        warnings.warn(f"{say('batch_size', config.batch_size)} is more than the {n_train} training samples of this "
                      f"data: each epoch is one step of all {n_train}", stacklevel=2)
    reasons = {v: skip_reason(v, config) for v in versions}
    runs: dict[str, list[FitResult]] = {v: [] for v in versions}
    for _ in range(repeats):
        for v in (v for v in versions if reasons[v] is None):  # lazy: a version that fails is skipped from then on
            try:
                runs[v].append(fit(v, shape, data.X["train"], data.y["train"], config,
                                   X_val=data.X["val"], y_val=data.y["val"]))
            except DeviceError as exc:  # a device that looked present but failed to start
                reasons[v] = str(exc)

    median_s = {v: statistics.median(r.run_s for r in res) for v, res in runs.items() if res and reasons[v] is None}
    rows = []
    for v in versions:
        fields: dict[str, Any] = {"version": v, "config": {**config.as_dict(), "repeats": repeats},
                                  "data": {**data.info, "sizes": data.sizes()}}
        if v not in median_s:
            rows.append({"version": v, "status": "skipped", "reason": reasons[v]})
        else:
            res = runs[v][0]  # compile_s: the first warm-up; later repeats reuse the compiled code
            fields["timing"] = {"compile_s": res.compile_s, "run_s": median_s[v], "epochs": config.epochs,
                                "run_s_repeats": [r.run_s for r in runs[v]], "s_per_epoch": median_s[v] / config.epochs,
                                **{f"speedup_vs_{ref}": median_s[ref] / median_s[v] if ref in median_s else np.nan
                                   for ref in ("loops", "numpy")}}
            fields.update(metrics=evaluate(res.theta, shape, data), backends=res.backends)
            fields["epochs"] = [{"epoch": i + 1, "seconds": s, "train_loss": tl, "val_loss": vl}
                                for i, (s, tl, vl) in enumerate(zip(res.epoch_s, res.train_losses, res.val_losses))]
            # the math its matrix products ran in (TF32 shown as such)
            rows.append({"version": v, "status": "ok", "reason": None, "math": (res.backends or {}).get("math"),
                         **fields["timing"], **fields["metrics"]})
        if record:
            append_record(new_record(EXPERIMENT, status=rows[-1]["status"], reason=rows[-1]["reason"],
                                     device="cuda" if v in GPU_VERSIONS else "cpu", profile=profile, **fields),
                          record_path)
    table = pd.DataFrame(rows).set_index("version").drop(columns=["epochs"], errors="ignore")
    for col in ("speedup_vs_loops", "speedup_vs_numpy"):  # a column even when no version ran
        table[col] = table.get(col, np.nan)
    return table


def _ratio(value, digits: int) -> str:
    """A speed-up, or '—' where its reference version did not run (``--versions`` without it)."""
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def format_versions(table) -> str:
    """The versions table as aligned text; skipped rows say why (each reason once: later rows name the first)."""
    w = max([len("version"), *(len(str(v)) for v in table.index)])
    lines = [f"{'version':<{w}} {'status':<8} {'math':<7} {'compile_s':>9} {'run_s':>8} {'s/epoch':>8} "
             f"{'vs loops':>8} {'vs numpy':>8} {'train_loss':>10} {'test_loss':>9} {'test_rmse':>9}"]
    said: dict[str, str] = {}  # a reason already printed, and the version it was printed for: each error once
    for v, r in table.iterrows():
        if r["status"] != "ok":
            reason = str(r["reason"])
            lines.append(f"{v:<{w}} {r['status']:<8} " + (f"the same reason as {said[reason]}" if reason in said else reason))
            said.setdefault(reason, str(v))
            continue
        lines.append(f"{v:<{w}} {r['status']:<8} {MATH_LABELS.get(r.get('math'), '-'):<7} {r['compile_s']:9.3f} "
                     f"{r['run_s']:8.3f} {r['s_per_epoch']:8.4f} {_ratio(r['speedup_vs_loops'], 1):>8} "
                     f"{_ratio(r['speedup_vs_numpy'], 2):>8} {r['train_loss']:10.4f} {r['test_loss']:9.4f} "
                     f"{r['test_rmse']:9.2f}")
    ok = table[table["status"] == "ok"]
    if len(ok):
        first = ok.iloc[0]
        base = ", ".join(f"{k} {v:.2f}" for k, v in first["baselines_test_rmse"].items())
        lines.append(f"test RMSE in {first['units']}; baselines on the same targets: {base}")
    return "\n".join(lines)


def _times(ratio: float) -> str:
    """A speed ratio as '**2.50x** faster' or, below 1, '**1.28x** slower' (never '0.78x slower')."""
    return f"**{ratio:.2f}x** faster" if ratio >= 1 else f"**{1 / ratio:.2f}x** slower"


def versions_notes(table) -> str:
    """What the versions table says, as Markdown bullets: numba-cpu against numpy, a thread per hidden unit against a
    thread per sample on a GPU, the versions that did not run, and the largest final train-loss difference."""
    ok = table[table["status"] == "ok"]
    lines = []
    if "numpy" in ok.index and "numba-cpu" in ok.index:
        r = ok.loc["numba-cpu", "speedup_vs_numpy"]
        lines.append(f"- numba-cpu runs {_times(r)} than numpy here "
                     f"(plus {ok.loc['numba-cpu', 'compile_s']:.1f} s of compilation or cache loading, once).")
    if "numba-cuda" in ok.index and "numba-cuda-block" in ok.index:
        r = ok.loc["numba-cuda", "run_s"] / ok.loc["numba-cuda-block", "run_s"]
        lines.append(f"- a thread per hidden unit (numba-cuda-block) instead of a thread per sample (numba-cuda): "
                     f"{_times(r)}; against numpy **{ok.loc['numba-cuda-block', 'speedup_vs_numpy']:.2f}x**.")
    skipped = [str(v) for v in table.index[table["status"] != "ok"]]
    if skipped:
        lines.append(f"- not run here: {', '.join(f'**{v}**' for v in skipped)} (the table above says why)")
    if len(ok):
        lines.append(f"- largest difference in final train loss between versions: "
                     f"{ok['train_loss'].max() - ok['train_loss'].min():.1e}")
    return "\n".join(lines)


def plot_versions(table):
    """Run time (compile time stacked on top, hatched) and speedup against numpy, per version."""
    import matplotlib.pyplot as plt

    ok = table[table["status"] == "ok"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    x = np.arange(len(ok))
    ax1.bar(x, ok["run_s"], color="tab:blue", label="run (N epochs)")
    ax1.bar(x, ok["compile_s"], bottom=ok["run_s"], color="tab:orange", hatch="//", alpha=0.6, label="compile / warm-up")
    ax1.set(yscale="log", ylabel="seconds", title="wall time")
    ax1.legend(fontsize=8)
    ax2.bar(x, ok["speedup_vs_numpy"], color="tab:green")
    ax2.axhline(1.0, color="k", lw=0.8)
    ax2.set(ylabel="x faster than numpy", title="speedup (run time)")
    for ax in (ax1, ax2):
        ax.set_xticks(x, list(ok.index), rotation=30)
    skipped = table[table["status"] != "ok"]
    if len(skipped):
        fig.text(0.01, 0.01, "skipped: " + ", ".join(skipped.index), fontsize=8)
    fig.tight_layout()
    return fig
