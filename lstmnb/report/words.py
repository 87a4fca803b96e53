"""The report's sentences, in one home, each written from records, never fixed text: the first screen's
(``first_screen``), the findings under it (``findings``: what was found, what is missing and the command that
fills it) and the glossary (``glossary.yaml``, README's too); each notebook's closing "What this showed" is
``conclusions``'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pandas as pd
import yaml

from . import labels as num
from .compare import TIED_WITHIN, comparison_epochs, comparison_rows, main_problem
from .figures import plot_ladder
from .labels import column
from .ladder import fastest, ladder_rows, machine_words, machines, panels, rung_name, seconds_at
from .published import MEASURED, PUBLISHED, device_notes, found, load_published
from .repeats import REPEATS_DISAGREE
from .tables import summary_table

# --- the first screen ---------------------------------------------------------------------------------------

@dataclass
class Screen:
    markdown: str
    figure: Any = None  # a matplotlib Figure, or None without ladder records
    note: str = ""
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)


HOW_TO_GET_GPU = ("No GPU half here: run 04 on a machine with an NVIDIA GPU (`lstmnb bench ladder --device cuda`), "
                  "or show lstmnb's reference records (an H200 and an H100, each with its CPU): `-p reference_records true`.")

def gpu_sentence(m: pd.DataFrame) -> str | None:
    """How much faster the machine's GPU is than its own CPU: on the slowest rungs measured on both (the study's
    code where both ran it) and at each one's fastest step of the study's workload."""
    cpu, gpu = m[(m.device == "cpu") & m.seconds.notna()], m[(m.device == "cuda") & m.seconds.notna()]
    if cpu.empty or gpu.empty:
        return None
    c_r, g_r = int(cpu.rung.min()), int(gpu.rung.min())
    c, g = seconds_at(m, "cpu", c_r), seconds_at(m, "cuda", g_r)
    on = ("on the study's code (rung 0)" if c_r == g_r == 0 else
          f"on the slowest rungs measured on both (CPU rung {c_r}, {rung_name(m, c_r)}; "
          f"GPU rung {g_r}, {rung_name(m, g_r)})")
    text = (f"On {machine_words(m)}, the GPU trains the study's workload ({int(m.epochs.iloc[0])} epochs) "
            f"{c / g:.2g}x as fast as the same machine's CPU {on}: {num.figure(g)} s against {num.figure(c)} s")
    cb, gb = fastest(m, "cpu"), fastest(m, "cuda")
    if cb and gb and (cb[0], gb[0]) != (c_r, g_r):
        text += (f"; at each one's fastest step {cb[1] / gb[1]:.2g}x (GPU rung {gb[0]}, {rung_name(m, gb[0])}: "
                 f"{num.figure(gb[1])} s; CPU rung {cb[0]}, {rung_name(m, cb[0])}: {num.figure(cb[1])} s)")
    return text + "."


def cpu_sentence(m: pd.DataFrame) -> str | None:
    """The CPU ladder alone: lstmnb's fastest step against the study's code on the same CPU."""
    c0, best = seconds_at(m, "cpu", 0), fastest(m, "cpu")
    if c0 is None or best is None:
        return None
    e = int(m.epochs.iloc[0])
    if best[0] == 0:
        return (f"On {machine_words(m)}, the study's code (rung 0) was the fastest rung of the study's workload "
                f"measured ({num.figure(c0)} s for {num.count(e, 'epoch')}): no later rung gained here.")
    return (f"On {machine_words(m)}, lstmnb's fastest step (rung {best[0]}, {rung_name(m, best[0])}) trains the "
            f"study's workload ({e} epochs) {c0 / best[1]:.2g}x as fast as the study's code on the same CPU: "
            f"{num.figure(best[1])} s against {num.figure(c0)} s.")


def limits_sentence(m: pd.DataFrame, there: bool = True) -> str | None:
    """What the ladder says limits a small LSTM: feeding the data (the DataLoader rungs against in-memory
    batches), launching kernels (eager against the CUDA graph), and the device's own work (what is left)."""
    feed, parts = [], []
    for device, where in (("cpu", "the CPU's"), ("cuda", "the GPU's")):
        low, fast = m[(m.device == device) & (m.rung < 4) & m.seconds.notna()], seconds_at(m, device, 4)
        if len(low) and fast:
            k, slow = int(low.rung.min()), float(low.loc[low.rung.idxmin()].seconds)
            if fast < slow:
                feed.append(f"{1 - fast / slow:.0%} of {where} time at rung {k}")
            else:
                parts.append(f"in-memory batches were no faster than {where} rung {k} ({num.figure(fast)} s against "
                             f"{num.figure(slow)} s)")
    parts[:0] = ["feeding the data (the DataLoader and per-sample tensors) is " + " and ".join(feed)] if feed else []
    eager, graph = seconds_at(m, "cuda", 4), seconds_at(m, "cuda", 5)
    if eager and graph and graph < eager:
        parts.append(f"launching kernels one by one is {1 - graph / eager:.0%} of the GPU's in-memory eager time "
                     f"(the CUDA graph leaves {num.figure(graph)} s of the device's own work)")
    if not parts:
        return None
    end = (": for a model this small, 'which GPU is fastest' is first a question of how fast the host feeds it "
           "and launches its kernels, and the GPU's own speed shows only once both are gone (the CUDA-graph rung)"
           if eager and graph and graph < eager else "")
    return ("There, " if there else f"On {machine_words(m)}, ") + "; ".join(parts) + end + "."


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
            f"{', '.join(ratios)} runs over one CPU run of unstated platform ({num.figure(cpu)} s for {top} epochs; "
            f"{' and '.join(flagged)} left out, their figures flagged)")
    here = [(int(m.epochs.iloc[0]), seconds_at(m, "cpu", 0)) for m in own]
    here = [(e, s) for e, s in here if s is not None and e in epochs]
    if here:
        e, s = here[0]
        text += (f"; this machine's CPU does that run's work (the study's code, {e} epochs, where the study's CPU "
                 f"took {num.figure(epochs[e]['CPU'])} s) in {num.figure(s)} s")
    return text + "."


def first_screen(df: pd.DataFrame | None, reference: pd.DataFrame | None = None,
                 published: dict | None = None) -> Screen:
    """The figure and at most three sentences that open 06 and the site: each machine's rungs on its CPU and
    GPU (the reader's first, ``reference`` labelled as another machine's); the first ratio of one machine's
    runs, what limits a small LSTM, the study's ratios last, as its claim."""
    published = published if published is not None else load_published()
    own, ref = ladder_rows(df, "measured here"), ladder_rows(reference, "reference records, another machine")
    mine = machines(own)
    every = mine + machines(ref)[:1]  # the reference's most complete ladder (its others are in the tables below)
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
    return Screen(" ".join(sentences), plot_ladder(panels(every)), note, pd.concat(every, ignore_index=True))

# --- the findings under it ---------------------------------------------------------------------------

def _missing(records: pd.DataFrame | None, reference: pd.DataFrame | None, rows: pd.DataFrame) -> list[str]:
    own = rows[rows["source"] == MEASURED] if not rows.empty else rows
    out = []
    if records is None or records.empty:
        out.append("no run records of your own: run the series (`lstmnb notebooks run --profile cpu`, then 04 and "
                   "05 on GPU machines) and point `results_paths` at the results")
    else:
        if own.empty or not (own["device"] == "CPU").any():
            out.append("no CPU runs measured here: run 03 (`lstmnb notebooks run --profile cpu --only 03`)")
        if own.empty or not (own["device"] != "CPU").any():
            note = " (the GPU rows shown are lstmnb's reference records)" if reference is not None and not reference.empty else ""
            out.append(f"no GPU runs measured here{note}: run 04 on a GPU (`--profile colab-t4` or `carc-a100`)")
        if own.empty or not own["like_for_like"].astype(bool).any():
            out.append("no run of the published setting on the DataLoader path for the published problem here: the "
                       "`cpu` profile's 03 times it (one run: `lstmnb train --preset published --epochs 15`)")
    multi = [((column(df, "status") == "ok") & (pd.to_numeric(df["world_size"], errors="coerce") >= 2)).any()
             for df in (records, reference) if df is not None and not df.empty and "world_size" in df]
    if not any(multi):
        out.append("no multi-GPU records: run 05 on a node with 2+ GPUs (`sbatch carc/ddp_single_node.sbatch`)")
    return out


def findings(records: pd.DataFrame | None, published: dict[str, Any] | None = None,
             reference: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """(Markdown bullets, ``tables.summary_table``) from the user's ``records``, the ``published`` figures and
    lstmnb's ``reference`` records (each or None): what was found (skipped devices as skipped), what is missing
    with the command that fills it, the notes of the published devices shown."""
    rows = comparison_rows(records, reference, published)
    lines = [found(records, reference, published)]
    problem = main_problem(rows)
    epochs = comparison_epochs(rows, problem) if problem else None
    missing = _missing(records, reference, rows)
    if missing:
        lines.append("**Missing:** " + "; ".join(missing) + ".")
    shown = set(rows.loc[rows["source"] == PUBLISHED, "device"]) if not rows.empty else set()
    notes = device_notes(published, shown) if published is not None and shown else {}
    lines += [f"*{note}*" for note in notes.values()]
    return "\n".join(f"- {line}" for line in lines if line), summary_table(rows, problem, epochs, notes)

# --- the glossary -------------------------------------------------------------------------------------------

# the glossary's text is package data (``glossary.yaml``), its thresholds the rules' own
GLOSSARY: dict[str, str] = {
    term: words.format(repeats_disagree=REPEATS_DISAGREE, tied_within=TIED_WITHIN) for term, words in
    yaml.safe_load(resources.files("lstmnb").joinpath("glossary.yaml").read_text(encoding="utf-8")).items()}


def glossary_markdown() -> str:
    """The glossary as a Markdown list, one term a line (06's end and README's Glossary section)."""
    return "\n".join(f"- **{term}**: {text}" for term, text in GLOSSARY.items())
