"""The report's first screen and the replication under it, from the ladder's records (``training/ladder.py``).

First screen: per machine measured (the reader's own records first, the shipped reference records when asked,
labelled as another machine's), the seconds of every rung on that machine's CPU and GPU side by side, each bar
labelled with its seconds and "x this machine's CPU at rung 0", a rung not measured there an empty slot saying
so; then at most three sentences, every ratio in them made of two runs of one machine. The study's
cross-machine ratios come last, named as the study's claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..rungs import BOTH as KINDS
from ..rungs import RUNGS
from .repeats import flag_text, spread

FASTEST_OF = [r.rung for r in RUNGS[:-1]]  # the study's workload: the last rung is another model, never "fastest"
HOW_TO_GET_GPU = ("No GPU half here: run 04 on a machine with an NVIDIA GPU (`lstmnb bench ladder --device cuda` "
                  "records it), or show lstmnb's H100 records beside yours with `-p reference_records true`.")


@dataclass
class Screen:
    markdown: str
    figure: Any = None  # a matplotlib Figure, or None without ladder records
    note: str = ""
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)


def _col(df: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)


def ladder_rows(df: pd.DataFrame | None, source: str) -> pd.DataFrame:
    """One row per (machine, epochs, device, rung): the median seconds of its finished runs and how many, or
    the status and reason of a rung that did not run."""
    if df is None or df.empty or "ladder.rung" not in df.columns:
        return pd.DataFrame()
    d = df[_col(df, "ladder.rung").notna()]
    if d.empty:
        return pd.DataFrame()
    kind = _col(d, "device.kind").fillna(_col(d, "config.device").astype(str).str.split(":").str[0])
    t = pd.DataFrame({
        "source": source,
        "machine": _col(d, "device.hostname").fillna("?") + " · " + _col(d, "device.cpu_model").fillna("?"),
        "device": kind, "gpu": _col(d, "device.name").where(kind == "cuda"), "epochs": _col(d, "config.epochs"),
        "rung": _col(d, "ladder.rung").astype(int), "name": _col(d, "ladder.name"), "status": _col(d, "status"),
        "reason": _col(d, "reason"), "seconds": pd.to_numeric(_col(d, "timing.train_s"), errors="coerce"),
        "rmse": pd.to_numeric(_col(d, "metrics.test_rmse_k"), errors="coerce"),
    })
    ok = t[(t.status == "ok") & t.seconds.notna()]
    keys = ["source", "machine", "epochs", "device", "rung", "name"]
    rows = (ok.groupby(keys).agg(seconds=("seconds", "median"), runs=("seconds", "size"), rmse=("rmse", "median"),
                                 gpu=("gpu", "first"), spread=("seconds", spread)).reset_index().assign(status="ok"))
    rows["flag"] = [flag_text(n, sp, None) for n, sp in zip(rows.runs, rows.spread)]  # the report's one rule
    rows["runs"] = rows["runs"].astype(int)
    not_ok = t[~t.index.isin(ok.index)].drop_duplicates(keys)
    not_ok = not_ok[~not_ok.set_index(keys).index.isin(rows.set_index(keys).index)]
    out = pd.concat([rows, not_ok[keys + ["status", "reason", "gpu"]]], ignore_index=True)
    return out.sort_values(["machine", "epochs", "device", "rung"]).reset_index(drop=True)


def ladder_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The ladder's rows as a table to read: machine, device, rung, seconds, runs, x the machine's CPU at rung 0
    (else at its slowest CPU rung), test RMSE; a rung that did not run, with its status."""
    if rows.empty:
        return pd.DataFrame()
    out = []
    for _, m in rows.groupby("machine", sort=False):
        base = _base(m)
        t = m.assign(x=(base[1] / m.seconds) if base else np.nan)
        out.append(t)
    t = pd.concat(out)
    t["runs"] = t["runs"].astype("Int64")
    x = "x this machine's CPU at rung 0 (else its lowest CPU rung)"
    return (t.rename(columns={"x": x, "rmse": "test RMSE K", "name": "rung name"})
            [["machine", "epochs", "device", "rung", "rung name", "seconds", "runs", x, "test RMSE K", "status",
              "flag"]]
            .reset_index(drop=True))


def _epochs_of(rows: pd.DataFrame) -> int:
    """The epochs count of a machine's ladder: the one with the most measured rungs (ties: the longest)."""
    counts = rows[rows.seconds.notna()].groupby("epochs").size()
    if counts.empty:
        return int(rows.epochs.max())
    return int(max(counts.index, key=lambda e: (counts[e], e)))


def machines(own: pd.DataFrame, ref: pd.DataFrame) -> list[pd.DataFrame]:
    """Each machine's ladder at its epochs count: the reader's own machines first, then the reference's."""
    out = []
    for rows in (own, ref):
        for _, m in rows.groupby("machine", sort=False) if not rows.empty else ():
            out.append(m[m.epochs == _epochs_of(m)].reset_index(drop=True))
    return out


def _seconds(m: pd.DataFrame, device: str, rung: int) -> float | None:
    hit = m[(m.device == device) & (m.rung == rung) & m.seconds.notna()] if "seconds" in m else m.iloc[0:0]
    return float(hit.seconds.iloc[0]) if len(hit) else None


def _fastest(m: pd.DataFrame, device: str) -> tuple[int, float] | None:
    hit = m[(m.device == device) & m.rung.isin(FASTEST_OF) & m.seconds.notna()]
    if hit.empty:
        return None
    best = hit.loc[hit.seconds.idxmin()]
    return int(best.rung), float(best.seconds)


def _name(m: pd.DataFrame, rung: int) -> str:
    return str(m[m.rung == rung].name.iloc[0])


def _where(m: pd.DataFrame) -> str:
    gpu = m.gpu.dropna()
    what = f"{gpu.iloc[0]} and its host CPU" if len(gpu) else "its CPU"
    return (f"this machine ({what})" if m.source.iloc[0] == "measured here"
            else f"the reference records' machine ({what}; another machine, not this one)")


def _fmt(x: float) -> str:
    """A figure to three significant digits, whole numbers from 100 (no exponent)."""
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def gpu_sentence(m: pd.DataFrame) -> str | None:
    """How much faster the machine's GPU is than its own CPU: on the slowest rungs measured on both (the study's
    code where both ran it) and at each one's fastest step of the study's workload."""
    cpu, gpu = m[(m.device == "cpu") & m.seconds.notna()], m[(m.device == "cuda") & m.seconds.notna()]
    if cpu.empty or gpu.empty:
        return None
    c_r, g_r = int(cpu.rung.min()), int(gpu.rung.min())
    c, g = _seconds(m, "cpu", c_r), _seconds(m, "cuda", g_r)
    on = ("on the study's code (rung 0)" if c_r == g_r == 0 else
          f"on the slowest rungs measured on both (CPU rung {c_r}, {_name(m, c_r)}; GPU rung {g_r}, {_name(m, g_r)})")
    text = (f"On {_where(m)}, the GPU trains the study's workload ({int(m.epochs.iloc[0])} epochs) {c / g:.2g}x as "
            f"fast as the same machine's CPU {on}: {_fmt(g)} s against {_fmt(c)} s")
    cb, gb = _fastest(m, "cpu"), _fastest(m, "cuda")
    if cb and gb and (cb[0], gb[0]) != (c_r, g_r):
        text += (f"; at each one's fastest step {cb[1] / gb[1]:.2g}x (GPU rung {gb[0]}, {_name(m, gb[0])}: "
                 f"{_fmt(gb[1])} s; CPU rung {cb[0]}, {_name(m, cb[0])}: {_fmt(cb[1])} s)")
    return text + "."


def cpu_sentence(m: pd.DataFrame) -> str | None:
    """The CPU ladder alone: lstmnb's fastest step against the study's code on the same CPU."""
    c0, best = _seconds(m, "cpu", 0), _fastest(m, "cpu")
    if c0 is None or best is None:
        return None
    e = int(m.epochs.iloc[0])
    if best[0] == 0:
        return (f"On {_where(m)}, the study's code (rung 0) was the fastest rung of the study's workload measured "
                f"({_fmt(c0)} s for {e} epoch{'s' if e != 1 else ''}): no later rung gained here.")
    return (f"On {_where(m)}, lstmnb's fastest step (rung {best[0]}, {_name(m, best[0])}) trains the study's "
            f"workload ({e} epochs) {c0 / best[1]:.2g}x as fast as the study's code on the same CPU: "
            f"{_fmt(best[1])} s against {_fmt(c0)} s.")


def limits_sentence(m: pd.DataFrame, there: bool = True) -> str | None:
    """What the ladder says limits a small LSTM: feeding the data (the DataLoader rungs against in-memory
    batches), launching kernels (eager against the CUDA graph), and the device's own work (what is left)."""
    parts = []
    for device, where in (("cpu", "the CPU's"), ("cuda", "the GPU's")):
        low = m[(m.device == device) & (m.rung < 4) & m.seconds.notna()]
        fast = _seconds(m, device, 4)
        if len(low) and fast:
            k = int(low.rung.min())
            slow = float(low.loc[low.rung.idxmin()].seconds)
            parts.append(f"feeding the data (the DataLoader and per-sample tensors) is {1 - fast / slow:.0%} of "
                         f"{where} time at rung {k}" if fast < slow else
                         f"in-memory batches were no faster than {where} rung {k} ({_fmt(fast)} s against "
                         f"{_fmt(slow)} s)")
    eager, graph = _seconds(m, "cuda", 4), _seconds(m, "cuda", 5)
    if eager and graph and graph < eager:
        parts.append(f"launching kernels one by one is {1 - graph / eager:.0%} of the GPU's in-memory eager time "
                     f"(the CUDA graph leaves {_fmt(graph)} s of the device's own work)")
    if not parts:
        return None
    end = (": for a model this small, 'which GPU is fastest' is first a question of how fast the host feeds it "
           "and launches its kernels, and the GPU's own speed shows only once both are gone (the CUDA-graph rung)"
           if eager and graph and graph < eager else "")
    return ("There, " if there else f"On {_where(m)}, ") + "; ".join(parts) + end + "."


def study_sentence(published: dict | None, own: list[pd.DataFrame]) -> str | None:
    """The study's ratios, named as the study's claim: its GPUs over its one CPU run, and what this machine's
    CPU takes for that run's work (the study's code, rung 0)."""
    table = ((published or {}).get("era5_lstm_gpu_benchmark") or {}) if published else {}
    epochs = table.get("epochs") or {}
    if not epochs:
        return None
    notes = ((table.get("provenance") or {}).get("notes") or {})
    top = max(epochs)
    cpu = epochs[top]["CPU"]
    ratios = {d: cpu / s for d, s in epochs[top].items() if d != "CPU" and d not in notes}
    flagged = [d for d in epochs[top] if d != "CPU" and d in notes]
    text = (f"The study's {min(ratios.values()):.0f}-{max(ratios.values()):.0f}x is the study's claim: its "
            f"{', '.join(ratios)} runs over one CPU run of unstated platform ({_fmt(cpu)} s for {top} epochs; "
            f"{' and '.join(flagged)} left out, their figures flagged)")
    here = [(int(m.epochs.iloc[0]), _seconds(m, "cpu", 0)) for m in own]
    here = [(e, s) for e, s in here if s is not None and e in epochs]
    if here:
        e, s = here[0]
        text += (f"; this machine's CPU does that run's work (the study's code, {e} epochs, where the study's CPU "
                 f"took {_fmt(epochs[e]['CPU'])} s) in {_fmt(s)} s")
    return text + "."


def first_screen(df: pd.DataFrame | None, reference: pd.DataFrame | None = None,
                 published: dict | None = None) -> Screen:
    """The figure and at most three sentences that open 06 and the site (module docstring)."""
    from .published import load_published

    published = published if published is not None else load_published()
    own, ref = ladder_rows(df, "measured here"), ladder_rows(reference, "reference records, another machine")
    mine, theirs = machines(own, pd.DataFrame()), machines(pd.DataFrame(), ref)
    every = mine + theirs
    both = [m for m in every if {"cpu", "cuda"} <= set(m[m.seconds.notna()].device)]
    if both and (both[0].source.iloc[0] == "measured here" or not mine):  # a GPU and its own CPU: the answer
        first = gpu_sentence(both[0])
        limits = limits_sentence(both[0], there=first is not None)
    else:  # this machine's CPU ladder first; the reference's GPU, labelled, for what limits it
        first = cpu_sentence(mine[0]) if mine else None
        limits = (limits_sentence(both[0], there=False) if both else
                  limits_sentence(mine[0], there=first is not None) if mine else None)
    sentences = [s for s in (first, limits, study_sentence(published, mine)) if s]
    if not every:
        return Screen("No ladder records yet: run 03 (or `lstmnb bench ladder --device cpu`) for this machine's CPU "
                      "ladder. " + (sentences[0] if sentences else ""), None, HOW_TO_GET_GPU)
    note = "" if both else HOW_TO_GET_GPU
    return Screen(" ".join(sentences), plot_ladder(every), note, pd.concat(every, ignore_index=True))


def _slot(m: pd.DataFrame, device: str, rung: int, applies: bool) -> tuple[float | None, str]:
    """(seconds, label) of one bar: its seconds and x the CPU's rung 0, or why the slot is empty."""
    if not applies:
        return None, "no such rung on a " + ("CPU" if device == "cpu" else "GPU")
    s = _seconds(m, device, rung)
    if s is None:
        hit = m[(m.device == device) & (m.rung == rung)]
        status = hit.status.iloc[0] if len(hit) and "status" in hit and pd.notna(hit.status.iloc[0]) else None
        return None, f"not measured here ({status})" if status else "not measured here"
    base = _base(m)
    flag = m[(m.device == device) & (m.rung == rung)].flag.iloc[0] if "flag" in m else ""
    return s, f"{_fmt(s)} s · " + (f"{_fmt(base[1] / s)}x this machine's CPU at rung {base[0]}" if base else
                                  "no CPU run on this machine") + (f" · rough: {flag}" if flag else "")


def _base(m: pd.DataFrame) -> tuple[int, float] | None:
    """(rung, seconds) every bar is divided into: the machine's CPU at rung 0, else at its slowest rung measured."""
    cpu = m[(m.device == "cpu") & m.seconds.notna()]
    return None if cpu.empty else (int(cpu.rung.min()), float(_seconds(m, "cpu", int(cpu.rung.min()))))


def plot_ladder(every: list[pd.DataFrame]):
    """One panel per machine: each rung's seconds on its CPU and GPU side by side (log axis), every bar labelled
    with its seconds and x that machine's CPU at rung 0, every empty slot saying why."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(every), 1, figsize=(11, (1.2 + 0.62 * len(RUNGS)) * len(every)), squeeze=False)
    colours = {"cpu": "#4477aa", "cuda": "#ee7733"}
    for ax, m in zip(axes[:, 0], every):
        top = max(float(m.seconds.max()) if m.seconds.notna().any() else 1.0, 1e-3)
        low = min(float(m.seconds.min()) if m.seconds.notna().any() else 1.0, top) / 3
        for i, r in enumerate(RUNGS):
            for j, device in enumerate(KINDS):
                y = i + (j - 0.5) * 0.4
                s, label = _slot(m, device, r.rung, device in r.devices)
                if s is not None:
                    ax.barh(y, s, height=0.38, color=colours[device], left=0)
                ax.text(s * 1.05 if s else low * 1.1, y, ("CPU: " if device == "cpu" else "GPU: ") + label,
                        va="center", fontsize=8, color="black" if s else "grey")
        ax.set_xscale("log")
        ax.set_xlim(low, top * 80)
        ax.set_yticks(range(len(RUNGS)), [f"{r.rung} {r.name}" for r in RUNGS])
        e = int(m.epochs.iloc[0])
        ax.set_xlabel(f"seconds for {e} epoch{'s' if e != 1 else ''} of the study's workload (log scale)")
        ax.set_ylim(len(RUNGS) - 0.4, -0.6)
        gpu = m.gpu.dropna()
        title = ("This machine" if m.source.iloc[0] == "measured here" else "Reference records, another machine") + \
            f": {m.machine.iloc[0].split(' · ', 1)[-1]}" + (f" and {gpu.iloc[0]}" if len(gpu) else "")
        ax.set_title(title, fontsize=9, loc="left", pad=4)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


@dataclass
class Replication:
    markdown: str
    table: pd.DataFrame


def replication(df: pd.DataFrame | None, published: dict | None = None, reruns: dict | None = None) -> Replication:
    """Does lstmnb reproduce the study? The training loss of epochs 1-5 of the study's code (rung 0) beside the
    study's printed loss and its own notebook re-run, a verdict per epoch; rung 0's seconds on this CPU beside
    the study's CPU column; the GPU columns measured or not."""
    from .published import load_published

    published = published if published is not None else load_published()
    bench = published["era5_lstm_gpu_benchmark"]
    printed = published["era5_lstm_gpu_benchmark"].get("training_loss", {}).get("carc_15_epochs", {})
    reruns = reruns if reruns is not None else study_reruns()
    d = df if df is not None and not df.empty and "ladder.rung" in df.columns else pd.DataFrame()
    zero = d[(_col(d, "ladder.rung") == 0) & (_col(d, "status") == "ok")] if not d.empty else d
    losses = [[e["train_loss"] for e in eps] for eps in _col(zero, "epochs").dropna()] if not zero.empty else []
    rows = []
    for e in range(1, 6):
        ours = [run[e - 1] for run in losses if len(run) >= e]
        mine = float(np.median(ours)) if ours else None
        again = (reruns.get("train_loss") or {}).get(e, [])
        study = printed.get(e)
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
        theirs = ", ".join(f"{d} {_fmt(v)} s" for d, v in study.items())
        ours = (f"{_fmt(float(hit[hit.epochs == e].seconds.iloc[0]))} s" if len(hit) else "not measured here")
        parts.append(f"the study's {who} {'run' if device == 'cpu' else 'runs'} at {e} epochs: {theirs}; rung 0 (the "
                     f"study's code) on this machine's {who}: {ours}")
    return Replication(". ".join(p[0].upper() + p[1:] for p in parts) + ".", table)


def study_reruns() -> dict:
    """The study's own notebook, run as written on lstmnb's machine (``reference_records/study_reruns.yaml``):
    the training loss it printed per epoch, run to run."""
    from importlib import resources

    import yaml

    path = resources.files("lstmnb").joinpath("reference_records", "study_reruns.yaml")
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
