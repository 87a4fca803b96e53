"""The ladder's data (rungs: ``lstmnb/rungs.py``): each rung's median seconds per machine and device
(``ladder_rows``, ``ladder_table``), the first screen's bars (``panels``, each x that machine's CPU at rung 0, an
unmeasured rung an empty slot saying why), and the ``replication`` (epochs 1-5 of rung 0 beside the study's loss).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ..rungs import BOTH as KINDS
from ..rungs import RUNGS
from .labels import column, count, figure
from .published import load_published, machine_names
from .repeats import flag_text, spread

FASTEST_OF = [r.rung for r in RUNGS[:-1]]  # the study's workload: the last rung is another model, never "fastest"


def ladder_rows(df: pd.DataFrame | None, source: str) -> pd.DataFrame:
    """One row per (machine, epochs, device, rung): the median seconds of its finished runs and how many, or
    the status and reason of a rung that did not run."""
    if df is None or df.empty or "ladder.rung" not in df.columns:
        return pd.DataFrame()
    d = df[column(df, "ladder.rung").notna()]
    if d.empty:
        return pd.DataFrame()
    kind = column(d, "device.kind").fillna(column(d, "config.device").astype(str).str.split(":").str[0])
    t = pd.DataFrame({
        "source": source,
        "machine": machine_names(d) + " · " + column(d, "device.cpu_model").fillna("?"),
        "device": kind, "gpu": column(d, "device.name").where(kind == "cuda"), "epochs": column(d, "config.epochs"),
        "rung": column(d, "ladder.rung").astype(int), "name": column(d, "ladder.name"), "status": column(d, "status"),
        "reason": column(d, "reason"), "seconds": pd.to_numeric(column(d, "timing.train_s"), errors="coerce"),
        "rmse": pd.to_numeric(column(d, "metrics.test_rmse_k"), errors="coerce"),
        "faults": pd.to_numeric(column(d, "memory.page_faults"), errors="coerce") / 1e6,  # a CPU run's heap regime
    })
    ok = t[(t.status == "ok") & t.seconds.notna()]
    keys = ["source", "machine", "epochs", "device", "rung", "name"]
    rows = (ok.groupby(keys).agg(seconds=("seconds", "median"), runs=("seconds", "size"), rmse=("rmse", "median"),
                                 faults=("faults", "median"), gpu=("gpu", "first"), spread=("seconds", spread))
            .reset_index().assign(status="ok"))
    rows["flag"] = [flag_text(n, sp, None) for n, sp in zip(rows.runs, rows.spread)]  # the report's one rule
    rows["runs"] = rows["runs"].astype(int)
    not_ok = t[~t.index.isin(ok.index)].drop_duplicates(keys)
    not_ok = not_ok[~not_ok.set_index(keys).index.isin(rows.set_index(keys).index)]
    out = pd.concat([rows, not_ok[keys + ["status", "reason", "gpu"]]], ignore_index=True)
    return out.sort_values(["machine", "epochs", "device", "rung"]).reset_index(drop=True)


def ladder_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The ladder's rows as a table to read: machine, device, rung, seconds, runs, x the machine's CPU at rung 0
    (else at its slowest CPU rung), test RMSE, a CPU run's page faults (its heap's regime: millions apart on glibc's
    own heap); a rung that did not run, with its status."""
    if rows.empty:
        return pd.DataFrame()
    t = pd.concat([m.assign(x=base[1] / m.seconds if (base := cpu_base(m)) else np.nan)
                   for _, m in rows.groupby("machine", sort=False)])
    t["runs"] = t["runs"].astype("Int64")
    x, faults = "x this machine's CPU at rung 0 (else its lowest CPU rung)", "page faults, millions (CPU)"
    return (t.rename(columns={"x": x, "rmse": "test RMSE K", "name": "rung name", "faults": faults})
            [["machine", "epochs", "device", "rung", "rung name", "seconds", "runs", x, "test RMSE K", faults,
              "status", "flag"]]
            .reset_index(drop=True))


def machines(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """Each machine's ladder (of ``ladder_rows``) at its epochs count: the one with the most measured rungs (ties:
    the longest); the machine whose ladder has the most measured rungs first."""
    out = []
    for _, m in rows.groupby("machine", sort=False) if not rows.empty else ():
        counts = m[m.seconds.notna()].groupby("epochs").size()
        e = max(counts.index, key=lambda e: (counts[e], e)) if len(counts) else m.epochs.max()
        out.append(m[m.epochs == e].reset_index(drop=True))
    return sorted(out, key=lambda m: -int(m.seconds.notna().sum()))


def seconds_at(m: pd.DataFrame, device: str, rung: int) -> float | None:
    hit = m[(m.device == device) & (m.rung == rung) & m.seconds.notna()] if "seconds" in m else m.iloc[0:0]
    return float(hit.seconds.iloc[0]) if len(hit) else None


def fastest(m: pd.DataFrame, device: str) -> tuple[int, float] | None:
    hit = m[(m.device == device) & m.rung.isin(FASTEST_OF) & m.seconds.notna()]
    if hit.empty:
        return None
    best = hit.loc[hit.seconds.idxmin()]
    return int(best.rung), float(best.seconds)


def rung_name(m: pd.DataFrame, rung: int) -> str:
    return str(m[m.rung == rung].name.iloc[0])


def machine_words(m: pd.DataFrame) -> str:
    gpu = m.gpu.dropna()
    what = f"{gpu.iloc[0]} and its host CPU" if len(gpu) else "its CPU"
    return (f"this machine ({what})" if m.source.iloc[0] == "measured here"
            else f"the reference records' machine ({what}; another machine, not this one)")


def _slot(m: pd.DataFrame, device: str, rung: int, applies: bool) -> dict[str, Any]:
    """One bar's ``seconds`` and ``label`` (its seconds and x the CPU's rung 0), or None and why it is empty."""
    if not applies:
        return {"seconds": None, "label": "no such rung on a " + ("CPU" if device == "cpu" else "GPU")}
    hit, s = m[(m.device == device) & (m.rung == rung)], seconds_at(m, device, rung)
    if s is None:
        status = hit.status.iloc[0] if len(hit) and "status" in hit and pd.notna(hit.status.iloc[0]) else None
        return {"seconds": None, "label": f"not measured here ({status})" if status else "not measured here"}
    base, flag = cpu_base(m), hit.flag.iloc[0] if "flag" in m else ""
    return {"seconds": s, "label": f"{figure(s)} s · " + (f"{figure(base[1] / s)}x this machine's CPU at rung "
                                                          f"{base[0]}" if base else "no CPU run on this machine")
            + (f" · rough: {flag}" if flag else "")}


def cpu_base(m: pd.DataFrame) -> tuple[int, float] | None:
    """(rung, seconds) every bar is divided into: the machine's CPU at rung 0, else at its slowest rung measured."""
    cpu = m[(m.device == "cpu") & m.seconds.notna()]
    return None if cpu.empty else (int(cpu.rung.min()), float(seconds_at(m, "cpu", int(cpu.rung.min()))))


def panels(every: list[pd.DataFrame]) -> list[dict[str, Any]]:
    """What ``figures.plot_ladder`` draws, per machine: its title, axis label, rung names, and per rung and device
    a bar (y, device, seconds or None, label)."""
    out = []
    for m in every:
        bars = [{"y": i + (j - 0.5) * 0.4, "device": device, **_slot(m, device, r.rung, device in r.devices)}
                for i, r in enumerate(RUNGS) for j, device in enumerate(KINDS)]
        gpu, e = m.gpu.dropna(), int(m.epochs.iloc[0])
        title = (("This machine" if m.source.iloc[0] == "measured here" else "Reference records, another machine")
                 + f": {m.machine.iloc[0].split(' · ', 1)[-1]}" + (f" and {gpu.iloc[0]}" if len(gpu) else ""))
        out.append({"title": title, "rungs": [f"{r.rung} {r.name}" for r in RUNGS], "bars": bars,
                    "xlabel": f"seconds for {count(e, 'epoch')} of the study's workload (log scale)"})
    return out


@dataclass
class Replication:
    markdown: str
    table: pd.DataFrame


def replication(df: pd.DataFrame | None, published: dict | None = None, reruns: dict | None = None) -> Replication:
    """Does lstmnb reproduce the study? Rung 0's training loss of epochs 1-5 beside the study's printed one and
    its notebook re-run, a verdict per epoch; rung 0's seconds beside the study's CPU and GPU columns."""
    bench = (published if published is not None else load_published())["era5_lstm_gpu_benchmark"]
    printed = bench.get("training_loss", {}).get("carc_15_epochs", {})
    reruns = reruns if reruns is not None else study_reruns()
    d = df if df is not None and not df.empty and "ladder.rung" in df.columns else pd.DataFrame()
    zero = d[(column(d, "ladder.rung") == 0) & (column(d, "status") == "ok")] if not d.empty else d
    losses = [[e["train_loss"] for e in eps] for eps in column(zero, "epochs").dropna()] if not zero.empty else []
    rows = []
    for e in range(1, 6):
        ours = [run[e - 1] for run in losses if len(run) >= e]
        mine = float(np.median(ours)) if ours else None
        again, study = (reruns.get("train_loss") or {}).get(e, []), printed.get(e)
        lo, hi = min([study, *again]), max([study, *again])
        spread = (f"; the study's notebook re-run here: {lo / study - 1:+.0%} to {hi / study - 1:+.0%}"
                  if again else "; the study's run-to-run spread not measured")
        if mine is None:
            verdict = "no rung-0 run here"
        elif lo * 0.9 <= mine <= hi * 1.1:
            verdict = f"reproduced: {mine / study - 1:+.0%} of the printed loss{spread}"
        else:
            verdict = f"differs: {mine / study - 1:+.0%} of the printed loss, beyond 10% outside{spread[1:]}"
        rows.append({"epoch": e, "the study printed": study, "its notebook re-run": ", ".join(f"{v:.4f}" for v in again)
                     or "—", "lstmnb rung 0": mine, "verdict": verdict})
    table = pd.DataFrame(rows)
    rows = ladder_rows(d, "measured here")
    parts = []
    for device, who in (("cpu", "CPU"), ("cuda", "GPU")):
        hit = rows[(rows.device == device) & (rows.rung == 0) & rows.seconds.notna()] if not rows.empty else rows
        hit = hit[hit.epochs.isin(list(bench["epochs"]))] if len(hit) else hit
        e = int(hit.epochs.max()) if len(hit) else min(bench["epochs"])
        study = {d: v for d, v in bench["epochs"][e].items() if (d == "CPU") == (device == "cpu")}
        theirs = ", ".join(f"{d} {figure(v)} s" for d, v in study.items())
        ours = (f"{figure(float(hit[hit.epochs == e].seconds.iloc[0]))} s" if len(hit) else "not measured here")
        parts.append(f"the study's {who} {'run' if device == 'cpu' else 'runs'} at {e} epochs: {theirs}; rung 0 (the "
                     f"study's code) on this machine's {who}: {ours}")
    return Replication(". ".join(p[0].upper() + p[1:] for p in parts) + ".", table)


def study_reruns() -> dict:
    """The study's own notebook, run as written on lstmnb's machine (``reference_records/study_reruns.yaml``):
    the training loss it printed per epoch, run to run."""
    path = resources.files("lstmnb").joinpath("reference_records", "study_reruns.yaml")
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
