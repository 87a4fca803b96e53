"""What the first screen's answer rests on, in the words a student would quote: the published speedups all
divide one CPU run whose platform the study does not state; devices whose times differ by less than
run-to-run noise are tied, not ranked; and the measured lesson of a small LSTM on a GPU (eager against a
CUDA graph), from the user's own records when they hold it, else from lstmnb's reference records,
labelled as another machine's.

Every figure is computed from the published table, the comparison rows (``compare``) or the records."""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import numbers as num
from .compare import comparison_rows, knob_effects
from .published import MEASURED, NOTE_MARK, REFERENCE, SOURCE_WORDS, device_notes, published_epochs_table
from .settings import PUBLISHED_EPOCHS, PUBLISHED_PROBLEM_LABEL

# Two single runs whose times differ by less than this are called tied: one run each has no spread of its
# own, and repeats of one training job on one machine differ by more than this (03's repeats show it)
TIED_WITHIN = 0.10


def _pct(fraction: float) -> str:
    return f"{fraction:.0%}"


def tied_with_fastest(seconds: pd.Series, within: float = TIED_WITHIN) -> pd.Series:
    """The entries of ``seconds`` (indexed by device) within ``within`` of the fastest, fastest first:
    more than one means no single fastest can be named."""
    s = seconds.dropna().sort_values()
    if s.empty:
        return s
    return s[s <= s.iloc[0] * (1 + within)]


def _who(device: str, notes: dict[str, str]) -> str:
    return device + (NOTE_MARK if device in notes else "")


def published_basis(published: dict[str, Any] | None, epochs: int = PUBLISHED_EPOCHS) -> str:
    """What the published ratio rests on: every GPU's speedup divides the one CPU column of the study (its
    platform not stated), one run each; the flagged rows; which GPUs are tied within run-to-run noise."""
    if published is None:
        return ""
    table = published_epochs_table(published)
    if epochs not in table.index or "CPU" not in table:
        return ""
    row = table.loc[epochs].dropna()
    notes = device_notes(published)
    cpu = row["CPU"]
    gpus = row.drop("CPU")
    ratios = ", ".join(f"{_who(d, notes)} {num.ratio(cpu / s)}" for d, s in gpus.items())
    flagged = [d for d in gpus.index if d in notes]
    clean = gpus.drop(flagged)
    text = (f"**What the published ratio rests on.** The study's GPU speedups ({ratios} at {epochs} epochs) all "
            f"divide one CPU run ({num.seconds(cpu)}) by each GPU's time. The study does not say on which platform that "
            "CPU ran (Colab or the CARC cluster), so a ratio is the study's CPU run against a GPU, not a GPU "
            "against its own machine's CPU; every time is one run, with no repeats.")
    if flagged:
        text += (" " + " and ".join(f"{d}{NOTE_MARK}" for d in flagged)
                 + (" is" if len(flagged) == 1 else " are") + " flagged (the notes under the figure say why)")
        if not clean.empty:
            text += f"; without {'it' if len(flagged) == 1 else 'them'} the range is {num.ratio(cpu / clean.max())}-{num.ratio(cpu / clean.min())}"
        text += "."
    tied = tied_with_fastest(gpus)
    if len(tied) > 1:
        spread = tied.iloc[-1] / tied.iloc[0] - 1
        text += (" **Tied, not ranked:** " + " and ".join(f"{_who(d, notes)} ({num.seconds(s)})" for d, s in tied.items())
                 + f" differ by {_pct(spread)}, one run each, within the run-to-run noise of a training job "
                 f"(under {_pct(TIED_WITHIN)} is called tied here)")
        rest = gpus.drop(tied.index)
        if not rest.empty:
            d, s = rest.idxmin(), rest.min()
            text += f"; {_who(d, notes)} is {_pct(s / tied.iloc[0] - 1)} slower than the fastest"
        text += "."
    return text


def _graph_pair(rows: pd.DataFrame) -> pd.Series | None:
    """The GPU pair that differs only in the CUDA graph, on the fast input path: the published problem's first
    (the problem the page is about), then the most epochs."""
    effects = knob_effects(rows, "cuda_graph")
    if effects.empty:
        return None
    effects = effects[effects["same otherwise"].astype(bool) & (effects["device"] != "CPU")]
    if effects.empty:
        return None
    effects = effects.assign(_ours=effects["problem"] == PUBLISHED_PROBLEM_LABEL)
    return effects.sort_values(["_ours", "epochs"], ascending=False, kind="stable").iloc[0]


def _seconds(rows: pd.DataFrame, machine: str, device_cpu: bool, gpu_column: str, problem: str, epochs: int,
             setting: str) -> float | None:
    at = rows[(rows["machine"] == machine) & (rows["problem"] == problem) & (rows["epochs"] == epochs)
              & (rows["setting"] == setting)]
    at = at[at["device"] == "CPU"] if device_cpu else at[at["column"] == gpu_column]
    return float(at["seconds"].min()) if not at.empty else None


def graph_lesson(records: pd.DataFrame | None, reference: pd.DataFrame | None) -> str | None:
    """The eager against CUDA-graph lesson, measured: a GPU's eager step and the same step captured as a
    graph, each over the CPU of its own machine. From the user's records where they hold such a pair,
    else from lstmnb's ``reference`` records, labelled as another machine's and with their own setting."""
    for df, source in ((records, MEASURED), (reference, REFERENCE)):
        if df is None or df.empty:
            continue
        rows = comparison_rows(df if source == MEASURED else None, df if source == REFERENCE else None, None)
        pair = _graph_pair(rows) if not rows.empty else None
        if pair is None:
            continue
        gpu = rows[rows["column"] == pair["column"]].iloc[0]
        machine, problem, epochs = gpu["machine"], pair["problem"], int(pair["epochs"])
        eager_fast, graph = pair["seconds without"], pair["seconds with"]
        cpu_fast = _seconds(rows, machine, True, "", problem, epochs, pair["without"])
        loader = pair["without"].replace("fast input", "DataLoader")
        gpu_loader = _seconds(rows, machine, False, pair["column"], problem, epochs, loader)
        cpu_loader = _seconds(rows, machine, True, "", problem, epochs, loader)
        who = ("measured here" if source == MEASURED else
               f"{SOURCE_WORDS[REFERENCE]}: lstmnb on an {pair['device']} ({machine}), another machine than yours")
        setting = pair["without"].split(" · ")[0]
        text = f"**Eager against a CUDA graph, measured** ({who}; {setting}, {problem}, {epochs} epochs): "
        parts = []
        if gpu_loader is not None and cpu_loader is not None:
            parts.append(f"the eager {pair['device']} is {num.ratio(cpu_loader / gpu_loader)} its own CPU on the DataLoader "
                         f"path ({num.seconds(gpu_loader)} against {num.seconds(cpu_loader)})")
        graph_part = (f"the same step captured as a CUDA graph takes {num.seconds(graph)}, {num.ratio(eager_fast / graph)} faster "
                      f"than eager ({num.seconds(eager_fast)}, fast input)")
        if cpu_fast is not None:
            graph_part += f" and {num.ratio(cpu_fast / graph)} its CPU's {num.seconds(cpu_fast)}"
        parts.append(graph_part)
        return (text + "; ".join(parts) + ". A small LSTM's training step is many tiny kernels: run eagerly, the "
                "GPU waits for the CPU to launch each one (launch-bound), so a faster GPU barely helps; a graph "
                "launches the whole step at once.")
    return None


def answer_context(records: pd.DataFrame | None, published: dict[str, Any] | None,
                   reference: pd.DataFrame | None) -> list[str]:
    """The paragraphs that go right under the first screen's sentence (Markdown): what the published
    ratio rests on, and the measured eager-against-graph lesson (``reference`` is lstmnb's reference
    records, passed even when the page does not show them otherwise)."""
    return [t for t in (published_basis(published), graph_lesson(records, reference)) if t]

