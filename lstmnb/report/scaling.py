"""Tables of parallel-training records (lstmnb.experiments): scaling, convergence, all-reduce, batch sweep."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .devices import column as _column
from .devices import get as _get
from .devices import with_device_labels

SCALING_DEFINITIONS = {
    "strong": "strong scaling: the global batch is fixed and split over N devices (each takes global/N). "
              "speedup = t1 / tN with t the median steady epoch time (the warm-up epoch left out); "
              "efficiency = speedup / N (1.0 is perfect: N devices, N times faster).",
    "weak": "weak scaling: each device keeps its batch, so the global batch grows N-fold and an epoch has "
            "N times fewer steps. scaled speedup = throughput_N / throughput_1 (samples/s); "
            "efficiency = scaled speedup / N = step time at 1 device / step time at N devices "
            "(1.0: adding devices costs no time per step).",
    "comm": "compute vs communication: the same training steps timed with DDP's gradient all-reduce "
            "(step s) and under no_sync() (compute s); comm s = the difference, the all-reduce time the "
            "backward pass did not hide; comm % = comm s / step s.",
}


def scaling_table(runs: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (mode, device, strategy, world size) of the scaling runs (records of experiment
    ``scaling-strong`` / ``scaling-weak``, from files via ``load_records`` or a list of records):
    epoch time, throughput, speedup and efficiency as ``SCALING_DEFINITIONS`` states them (medians
    over repeats), and the measured compute/communication split per step where it was measured."""
    df = runs if isinstance(runs, pd.DataFrame) else pd.json_normalize(runs, max_level=2)
    if df.empty or "world_size" not in df:
        return pd.DataFrame()
    exp = _column(df, "experiment").fillna("")
    df = df[(_column(df, "status") == "ok") & exp.str.startswith("scaling-")].dropna(subset=["world_size"])
    if df.empty:
        return pd.DataFrame()
    df = with_device_labels(df)
    comm = _column(df, "parallel.comm_split.comm_fraction").astype(float)
    frame = pd.DataFrame({
        "mode": df["experiment"].str.removeprefix("scaling-"), "device": df["device_label"],
        "strategy": _column(df, "config.strategy").fillna("ddp"), "world_size": df["world_size"].astype(int),
        "per-device batch": _column(df, "scaling.per_device_batch"), "global batch": _column(df, "scaling.global_batch"),
        "epoch s": _column(df, "timing.epoch_s_median"), "samples/s": _column(df, "timing.samples_per_s"),
        "step s": _column(df, "parallel.comm_split.step_s"), "compute s": _column(df, "parallel.comm_split.compute_s"),
        "comm s": _column(df, "parallel.comm_split.comm_s"), "comm %": 100 * comm,
    }, index=df.index)
    keys = ["mode", "device", "strategy", "world_size"]
    table = frame.groupby(keys, sort=False).median(numeric_only=True).reset_index()
    out = []
    for (mode, _, _), g in table.groupby(["mode", "device", "strategy"], sort=False):
        g = g.sort_values("world_size").copy()
        one = g[g["world_size"] == 1]
        if one.empty:
            g["speedup"] = float("nan")
        elif mode == "strong":
            g["speedup"] = one["epoch s"].iloc[0] / g["epoch s"]
        else:
            g["speedup"] = g["samples/s"] / one["samples/s"].iloc[0]
        g["efficiency"] = g["speedup"] / g["world_size"]
        out.append(g)
    cols = keys + ["per-device batch", "global batch", "epoch s", "samples/s", "speedup", "efficiency",
                   "step s", "compute s", "comm s", "comm %"]
    return pd.concat(out)[cols].set_index(keys).sort_index()


def convergence_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Validation loss and RMSE per epoch with cumulative wall seconds, one block per (experiment, world size)."""
    rows = []
    for r in records:
        if r.get("status") != "ok":
            continue
        for e in r.get("epochs") or []:
            rows.append({"experiment": r.get("experiment"), "world_size": int(r.get("world_size") or 1),
                         "epoch": e["epoch"], "cumulative_s": e["cumulative_s"], "val_loss": e["val_loss"],
                         "val_rmse_k": e["val_rmse_k"]})
    return pd.DataFrame(rows)


def allreduce_table(rows: list[dict[str, Any]], gradient_bytes: int | None = None,
                    step_s: float | None = None) -> pd.DataFrame:
    """All-reduce time and bandwidth per buffer size (GB/s = 1e9 bytes/s; busbw = algbw x 2(n-1)/n).

    With ``step_s`` (a training step's time), the row at the model's gradient size also says which
    fraction of a step one all-reduce of the gradients takes on this link.
    """
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    df["size"] = df["bytes"].map(_human_bytes)
    if gradient_bytes:
        df["gradient size"] = df["bytes"] == gradient_bytes // 4 * 4
        if step_s:
            df["share of a step"] = (df["time_us"] / 1e6 / step_s).where(df["gradient size"])
    cols = ["size", "bytes", "world_size", "backend", "time_us", "algbw_gbps", "busbw_gbps", "gradient size",
            "share of a step"]
    return df[[c for c in cols if c in df]].set_index("size")


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def batch_sweep_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Batch size against status, time per epoch, samples/s, peak memory and final validation RMSE."""
    rows = []
    for r in records:
        b = _get(r, "sweep.batch_size") or _get(r, "config.batch_size")
        rows.append({"batch size": b, "status": r.get("status"), "epoch s": _get(r, "timing.epoch_s_median"),
                     "samples/s": _get(r, "timing.samples_per_s"), "peak MB": _get(r, "memory.peak_mb"),
                     "final val RMSE K": (r.get("epochs") or [{}])[-1].get("val_rmse_k"),
                     "reason": r.get("reason")})
    return pd.DataFrame(rows).set_index("batch size") if rows else pd.DataFrame()
