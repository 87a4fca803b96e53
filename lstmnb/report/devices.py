"""Device labels (CPU, T4, ..., A100, H100) and the selection of finished single-device runs.

The base of the report package: every other module labels and filters records through these.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

DEVICE_ORDER = ("CPU", "T4", "P100", "V100", "A40", "A100", "H100", "H200")
# short labels for the GPUs the published experiment (and the CARC cluster) used; others keep their name
_GPU_LABEL = re.compile(r"\b(T4|P100|V100|A40|A100|H100|H200)\b", re.IGNORECASE)


def column(df: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    """Column ``name`` of ``df``, or a column of ``default`` when the records lack it."""
    return df[name] if name in df else pd.Series(default, index=df.index)


def get(record: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``record['a']['b']`` for ``'a.b'``, or ``default`` where a level is missing."""
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value


def device_label(kind: str | None, name: str | None) -> str:
    """Short column label of a device: 'CPU', 'T4', 'P100', 'V100', 'A40', 'A100'; unknown GPUs keep their name.

    ``kind`` and ``name`` are a record's ``device.kind`` and ``device.name`` (e.g. 'cuda', 'Tesla T4').
    """
    kind = (kind or "").lower()
    if kind == "cpu":
        return "CPU"
    if kind == "mps":
        return "MPS"
    if name:
        match = _GPU_LABEL.search(str(name))
        return match.group(1).upper() if match else str(name)
    return kind.upper() or "unknown"


def order_devices(labels) -> list[str]:
    """Labels in the published column order (CPU, T4, P100, V100, A40, A100, then H100, H200), others after, sorted."""
    labels = list(dict.fromkeys(labels))
    known = [d for d in DEVICE_ORDER if d in labels]
    return known + sorted(l for l in labels if l not in DEVICE_ORDER)


def with_device_labels(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of a records DataFrame with a ``device_label`` column (see ``device_label``)."""
    out = df.copy()
    kinds, names = column(out, "device.kind"), column(out, "device.name")
    out["device_label"] = [device_label(k if isinstance(k, str) else None, n if isinstance(n, str) else None)
                           for k, n in zip(kinds, names)]
    return out


def ok_single_runs(df: pd.DataFrame, experiment: str | None = None, input_path: str | None = None) -> pd.DataFrame:
    """Finished single-device runs (status ok), optionally of one experiment and one input path."""
    if df.empty:
        return df
    keep = column(df, "status") == "ok"
    keep &= column(df, "config.strategy", "single").fillna("single") == "single"
    if experiment is not None:
        keep &= column(df, "experiment") == experiment
    if input_path is not None:
        keep &= column(df, "config.input_path") == input_path
    return with_device_labels(df[keep])
