"""Tables and plots from run records: epochs, results vs baselines, runs, speedups.

A leaf module: it reads records (dicts or the DataFrame from ``records.load_records``) and never
trains or extracts anything.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def epochs_table(record: dict[str, Any]) -> pd.DataFrame:
    """One row per epoch: seconds, cumulative seconds, losses, validation RMSE (K), samples/s."""
    df = pd.DataFrame(record.get("epochs") or [])
    if df.empty:
        return df
    cols = ["epoch", "train_s", "cumulative_s", "train_loss", "val_loss", "val_rmse_k", "samples_per_s"]
    return df[[c for c in cols if c in df]].set_index("epoch")


def metrics_table(record: dict[str, Any]) -> pd.DataFrame:
    """Test RMSE and MAE in kelvin of the model beside persistence and climatology."""
    m = record.get("metrics") or {}
    rows = []
    for name, key in (("LSTM" if (record.get("config") or {}).get("cell", "lstm") == "lstm" else "GRU", "test"),
                      ("persistence", "persistence"), ("climatology", "climatology")):
        rmse, mae = m.get(f"{key}_rmse_k"), m.get(f"{key}_mae_k")
        if rmse is not None:
            rows.append({"model": name, "test RMSE (K)": rmse, "test MAE (K)": mae})
    df = pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame()
    if len(df) > 1:
        model_rmse = df["test RMSE (K)"].iloc[0]
        skill = 1 - model_rmse / df["test RMSE (K)"]
        skill.iloc[0] = float("nan")
        df["model skill vs row"] = skill  # 1 - RMSE_model / RMSE_baseline: > 0 means the model is better
    return df


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """A compact view of many records (from ``load_records``): one row per run."""
    if df.empty:
        return df
    cols = {
        "started": "started", "experiment": "experiment", "status": "status", "device.kind": "device",
        "device.name": "device name", "profile": "profile", "config.input_path": "input",
        "config.batch_size": "batch", "config.epochs": "epochs", "timing.train_s": "train s",
        "timing.samples_per_s": "samples/s", "metrics.test_rmse_k": "test RMSE K",
        "metrics.persistence_rmse_k": "persistence K", "metrics.climatology_rmse_k": "climatology K",
        "reason": "reason",
    }
    present = {k: v for k, v in cols.items() if k in df}
    return df[list(present)].rename(columns=present)


def format_table(df: pd.DataFrame, floatfmt: str = "{:,.3f}") -> str:
    """Plain-text rendering for the terminal."""
    if df.empty:
        return "(no rows)"
    return df.to_string(float_format=lambda v: floatfmt.format(v))
