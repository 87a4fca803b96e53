"""How the report names things and writes figures, in one place: device labels and finished single-device runs;
the published setting and problem, defined once (``published_setting_definition``, where every "published
setting" links), and a run's named by how it differs from them ('batch 256, lr 0.004 · fast input'; 'window 12');
and how every sentence, table and chart writes a figure (three significant figures; a published one as given).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

import pandas as pd

# --- device labels and the finished single-device runs ------------------------------------------------------

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
    """Short label of a record's ``device.kind`` and ``device.name`` ('cuda', 'Tesla T4' -> 'T4'); 'CPU';
    unknown GPUs keep their name."""
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


def ok_single_runs(df: pd.DataFrame, experiment: str | None = None) -> pd.DataFrame:
    """Finished single-device runs (status ok), optionally of one experiment."""
    if df.empty:
        return df
    keep = column(df, "status") == "ok"
    keep &= column(df, "config.strategy", "single").fillna("single") == "single"
    if experiment is not None:
        keep &= column(df, "experiment") == experiment
    return with_device_labels(df[keep])

# --- the published setting and problem, and how a run's are named -------------------------------------------

# the published experiment as the study's notebooks ran it (training.config.PRESETS["published"], whose source
# the record states; published_figures.yaml, era5_lstm_gpu_benchmark)
PUBLISHED_SETTING = {"batch_size": 128, "lr": 0.001, "residual": False, "lr_schedule": "constant", "amp": "off",
                     "compile": False, "cuda_graph": False, "threads": None, "rung": None,  # rung: a later ladder rung
                     # the inputs and the reported forecast (records written before these knobs had them so)
                     "calendar": False, "cycles": False, "point_weights": "none", "blend": "off"}
PUBLISHED_WORKERS = 2
PUBLISHED_PROBLEM = {"points": 2, "start": "2020-01-01", "end": "2021-06-30", "window": 24, "hidden": 64,
                     "layers": 2, "cell": "lstm", "lead_hours": 1, "horizon": 1,
                     # the study's real ERA5 (not the synthetic sample), trained on 2020, tested from 2021-01-01
                     "data": "real", "split": "2021-01-01",
                     # where: the study's two points, (latitude, longitude east) in order
                     "places": ((20.0, 280.0), (40.0, 280.0))}
PUBLISHED_PROBLEM_LABEL = "published problem"
LIKE_FOR_LIKE = "published setting · DataLoader"
ANCHOR = "published-setting"  # the HTML anchor of the definition, where every "published setting" links


def link(text: str = "published setting") -> str:
    """Markdown link to the definition of the published setting (on the same page)."""
    return f"[{text}](#{ANCHOR})"


def published_setting_definition(published: Mapping[str, Any] | None = None) -> str:
    """The study and its setting in one Markdown paragraph that opens with the anchor every ``link()``
    points to; ``published`` (``load_published()``) adds the versions the study states."""
    prov = ((published or {}).get("era5_lstm_gpu_benchmark") or {}).get("provenance") or {}
    versions = (f", timed with PyTorch {prov['torch']} and CUDA {prov['cuda']}"
                if prov.get("torch") and prov.get("cuda") else "")
    p = PUBLISHED_PROBLEM
    return (f'<a id="{ANCHOR}"></a>**The published setting** is the one timed by the study the published figures '
            f"come from, a USC CSCI-596 course project (its results table{versions}): ERA5 2 m temperature at lat 40 "
            f"and 20, lon 280, {p['start']}..{p['end']}, hourly, the real values the study trained on (shipped with "
            f"lstmnb); trained on 2020, tested from {p['split']}; a {p['layers']}-layer LSTM with a {p['window']} h "
            f"window and {p['hidden']} hidden units, batch {PUBLISHED_SETTING['batch_size']}, Adam at learning rate "
            f"{PUBLISHED_SETTING['lr']:g}, fp32, samples fed by a PyTorch DataLoader with {PUBLISHED_WORKERS} "
            "workers (`--preset published`; its source, the study's notebook, is named in every record). *Like for "
            "like* means that setting on that problem (the *published problem*: the study's data, model and split), "
            "on the DataLoader path; a run on another model, batch or the synthetic sample is shown under its own "
            "labels, never as like for like. What each side's seconds hold differs: lstmnb's are the training "
            "epochs alone; the study's CARC notebook (P100, V100, A40) started its clock before creating the model "
            "and moving it to the GPU, its Colab notebook (T4) timed the epoch loop (every difference from the "
            "study's code is listed in each record's `config.preset_source`).")


# how each knob is named where it differs from the published setting, in the order a label lists them
SETTING_WORDS = {"batch_size": lambda v: f"batch {int(v)}", "lr": lambda v: f"lr {v:g}", "residual": lambda v: "residual",
                 "lr_schedule": lambda v: f"{v} lr", "amp": lambda v: f"AMP {v}", "compile": lambda v: "torch.compile",
                 "cuda_graph": lambda v: "CUDA graph", "threads": lambda v: f"{int(v)} threads", "rung": str,
                 "calendar": lambda v: "calendar inputs", "cycles": lambda v: "cycles input",
                 "point_weights": lambda v: f"{v} point weights", "blend": lambda v: f"{v} blend"}


def setting_label(config: Mapping[str, Any]) -> str:
    """A run's speed settings as they differ from the published ones (``SETTING_WORDS``), then its input path
    with the DataLoader's own knobs where set: 'published setting · DataLoader (pinned memory, workers kept)',
    'batch 256, lr 0.004, residual, AMP auto · fast input'."""
    config = {k: v for k, v in config.items() if present(v)}  # missing knobs take the published value
    c = {**PUBLISHED_SETTING, **config}
    diffs = [word(c[k]) for k, word in SETTING_WORDS.items() if c[k] != PUBLISHED_SETTING[k]]
    optimiser = ("batch_size", "lr", "residual", "lr_schedule", "calendar", "cycles", "point_weights", "blend")
    if all(c[k] == PUBLISHED_SETTING[k] for k in optimiser):
        diffs.insert(0, "published setting")  # the same optimisation, only run differently
    base = ", ".join(diffs)
    if config.get("input_path") == "dataloader":
        workers = config.get("num_workers", PUBLISHED_WORKERS)
        loader = [] if workers == PUBLISHED_WORKERS else [f"{int(workers)} workers"]
        # the study's loader (torch's defaults): pageable memory, workers started afresh each epoch
        loader += [word for knob, word in (("pin_memory", "pinned memory"), ("persistent_workers", "workers kept"))
                   if config.get(knob)]
        path = f"DataLoader ({', '.join(loader)})" if loader else "DataLoader"
    else:
        path = "fast input"
    return f"{base} · {path}"


def problem_label(problem: Mapping[str, Any]) -> str:
    """The problem as it differs from the published one ('90 points'), or 'published problem'."""
    p, ref = {k: v for k, v in problem.items() if present(v)}, PUBLISHED_PROBLEM  # missing: as published
    diffs = []
    if present(p.get("points")) and p["points"] != ref["points"]:
        diffs.append(f"{int(p['points'])} points")
    elif present(p.get("places")) and tuple(p["places"]) != ref["places"]:  # as many points, elsewhere
        diffs.append("other points")
    if (p.get("start"), p.get("end")) != (ref["start"], ref["end"]) and p.get("start"):
        diffs.append(f"{p['start']}..{p['end']}")
    for key in ("window", "hidden", "layers", "cell", "lead_hours", "horizon"):
        if p.get(key) not in (None, "", ref[key]):
            diffs.append(str(p[key]).upper() if key == "cell" else f"{key.replace('_', ' ')} {int(p[key])}")
    if present(p.get("data")) and p["data"] != ref["data"]:
        diffs.append(f"{p['data']} data")
    if present(p.get("split")) and p["split"] != ref["split"]:
        diffs.append(str(p["split"]) if "split" in str(p["split"]) else f"test from {p['split']}")
    return ", ".join(diffs) or PUBLISHED_PROBLEM_LABEL


def present(value: Any) -> bool:
    """A value the record states (not None, not NaN)."""
    return value is not None and not (isinstance(value, float) and value != value)

# --- how a figure is written: sentences, tables and chart labels alike --------------------------------------

def figure(value: float) -> str:
    """``value`` as the report writes it: '8.03', '46.42', '146.41', '1234', '0.0123'."""
    value = float(value)
    if not math.isfinite(value):
        return "—"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value * 100 - round(value * 100)) < 1e-6:  # given to two decimals or fewer: as given
        return f"{round(value, 2):g}"
    return f"{value:.3g}"


def seconds(value: float) -> str:
    """'8.03 s', '146.41 s'."""
    return f"{figure(value)} s"


def count(n: int, noun: str) -> str:
    """'1 epoch', '5 epochs', '2 machines'."""
    return f"{int(n)} {noun}{'' if int(n) == 1 else 's'}"
