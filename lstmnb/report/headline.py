"""The answer a reader sees first: for every device found (measured here, lstmnb's reference records,
published), its 15-epoch training time at the published setting on the DataLoader path (like for
like), with its speedup over a CPU (its own machine's; a published GPU's, the study's CPU run); then
each device's fastest setting. One sentence says the same in words, the like-for-like ratio first;
``headline_plot`` draws it.

Devices whose records hold no like-for-like run, or only skipped runs, are listed as such (never as a
measured figure). A ratio across machines appears only for a published GPU whose machine had no CPU
in the study, and then names both machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from . import numbers as num
from .answer import TIED_WITHIN, tied_with_fastest
from .compare import FASTEST, ROW_COLUMNS, comparison_rows, own_cpu_speedups
from .devices import column as _column
from .devices import order_devices
from .provenance import machine_descriptions, with_columns
from .published import MEASURED, NOTE_MARK, PUBLISHED, REFERENCE, SOURCE_WORDS, device_notes, published_epochs_table
from .settings import LIKE_FOR_LIKE, PUBLISHED_EPOCHS, PUBLISHED_PROBLEM_LABEL, link

LIKE = "like for like"
FAST = "fastest setting"
ENTRY_COLUMNS = ["panel", "source", "machine", "group", "column", "device", "seconds", "setting", "x_own_cpu",
                 "cpu_column", "cpu_machine", "cpu_seconds", "cpu_setting", "same_machine", "state", "why", "note"]


@dataclass
class Headline:
    """The first screen: ``entries`` (one row per device column and panel, see ``ENTRY_COLUMNS``; ``state``
    is 'measured', 'no run', 'skipped' or 'failed', and ``why`` says why a row has no seconds),
    ``sentence`` (Markdown), the ``notes`` of the devices shown (the published T4's), the description of
    every machine, keyed by its group label, and the epochs compared."""

    entries: pd.DataFrame
    sentence: str
    epochs: int | None = None
    notes: dict[str, str] = field(default_factory=dict)
    machines: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether there is a figure to draw (some device has a measured or published time)."""
        return not self.entries.empty and (self.entries["state"] == "measured").any()


def _group(source: str, machine: Any) -> str:
    return f"{SOURCE_WORDS[source]} · {machine}"


def headline_epochs(rows: pd.DataFrame) -> int | None:
    """15 (the published table's longest run) when any like-for-like row has it, else the most epochs
    of a like-for-like row; None without one."""
    if rows.empty:
        return None
    lfl = rows[rows["like_for_like"].astype(bool)]
    if lfl.empty:
        return None
    return PUBLISHED_EPOCHS if (lfl["epochs"] == PUBLISHED_EPOCHS).any() else int(lfl["epochs"].max())


def record_states(df: pd.DataFrame | None, source: str) -> pd.DataFrame:
    """One row per device column of a records DataFrame: its device, machine, how many records are ok,
    and the reason of its skipped or failed ones."""
    if df is None or df.empty:
        return pd.DataFrame()
    runs = with_columns(df, source)
    status = _column(runs, "status").fillna("unknown")
    reason = _column(runs, "reason").fillna("no reason given").astype(str)
    out = []
    for col, g in runs.groupby("column", sort=False):
        st, why = status.loc[g.index], reason.loc[g.index]
        out.append({"column": col, "device": g["device_label"].iloc[0], "machine": g["machine"].iloc[0],
                    "ok": int((st == "ok").sum()), "skipped": int((st == "skipped").sum()),
                    "skip_reasons": list(dict.fromkeys(why[st == "skipped"])),
                    "failed": list(dict.fromkeys(f"{s}: {w}" for s, w in zip(st, why) if s not in ("ok", "skipped")))})
    return pd.DataFrame(out)


def _epochs_words(epochs) -> str:
    e = [str(int(x)) for x in sorted(set(epochs))]
    return (", ".join(e[:-1]) + " and " + e[-1] if len(e) > 1 else e[0]) + " epoch" + ("s" if e != ["1"] else "")


def _no_run_why(col_rows: pd.DataFrame, epochs: int | None) -> str:
    """Why a device column with finished runs has no like-for-like time: what it ran instead."""
    if col_rows.empty:
        return "no finished training run to compare (only other experiments)"
    problems = sorted(set(col_rows["problem"]), key=lambda p: p != PUBLISHED_PROBLEM_LABEL)
    ran = "; ".join(f"{p}, {_epochs_words(col_rows[col_rows['problem'] == p]['epochs'])}" for p in problems)
    return f"no {epochs}-epoch run of the published setting; ran {ran}"


def _entry(panel: str, source: str, machine: Any, col: str, device: str, **values) -> dict:
    base = {k: None for k in ENTRY_COLUMNS}
    return {**base, "panel": panel, "source": source, "machine": machine, "group": _group(source, machine),
            "column": col, "device": device, **values}


def _like_entries(rows, speed, states, source, epochs, notes) -> list[dict]:
    """Panel 1 rows of one records source (``states``) or of the published table (``states`` None)."""
    lfl = rows[(rows["source"] == source) & (rows["setting"] == LIKE_FOR_LIKE)
               & (rows["problem"] == PUBLISHED_PROBLEM_LABEL) & (rows["epochs"] == epochs)] if not rows.empty else rows
    ratios = speed[(speed["source"] == source) & (speed["setting"] == LIKE_FOR_LIKE)] if not speed.empty else speed
    columns = (states.to_dict("records") if states is not None else
               [{"column": c, "device": d, "machine": m}
                for c, d, m in lfl.drop_duplicates("column")[["column", "device", "machine"]].itertuples(index=False)])
    out = []
    for st in columns:
        col, device, machine = st["column"], st["device"], st["machine"]
        note = notes.get(device) if source == PUBLISHED else None
        hit = lfl[lfl["column"] == col]
        if not hit.empty:
            r = hit.iloc[0]
            ratio = ratios[ratios["column"] == col]
            extra = ratio.iloc[0][["x_own_cpu", "cpu_column", "cpu_machine", "cpu_seconds", "cpu_setting",
                                   "same_machine"]].to_dict() if not ratio.empty else {}
            if device == "CPU":
                extra = {"x_own_cpu": 1.0, "cpu_column": col, "cpu_machine": machine, "same_machine": True}
            out.append(_entry(LIKE, source, machine, col, device, seconds=float(r["seconds"]), setting=LIKE_FOR_LIKE,
                              state="measured", note=note, **extra))
        elif st.get("ok"):
            own = rows[(rows["source"] == source) & (rows["column"] == col)] if not rows.empty else rows
            out.append(_entry(LIKE, source, machine, col, device, state="no run", why=_no_run_why(own, epochs)))
        elif st.get("skipped"):
            out.append(_entry(LIKE, source, machine, col, device, state="skipped",
                              why="skipped: " + "; ".join(st["skip_reasons"])))
        elif st.get("failed"):
            out.append(_entry(LIKE, source, machine, col, device, state="failed", why="; ".join(st["failed"])))
    return out


def _fast_entries(rows, speed, source, epochs) -> list[dict]:
    """Panel 2 rows of one records source: each device column's fastest setting at the published
    problem and ``epochs``, with the speedup over the CPU of its machine at that CPU's fastest."""
    at = rows[(rows["source"] == source) & (rows["problem"] == PUBLISHED_PROBLEM_LABEL)
              & (rows["epochs"] == epochs)] if not rows.empty else rows
    out = []
    for col, g in at.groupby("column", sort=False):
        best = g.loc[g["seconds"].idxmin()]
        extra = {}
        if best["device"] == "CPU":
            extra = {"x_own_cpu": 1.0, "cpu_column": col, "cpu_machine": best["machine"], "same_machine": True}
        elif not speed.empty:
            fast = speed[(speed["column"] == col) & (speed["setting"] == FASTEST)]
            if not fast.empty:
                extra = fast.iloc[0][["x_own_cpu", "cpu_column", "cpu_machine", "cpu_seconds", "cpu_setting",
                                      "same_machine"]].to_dict()
        out.append(_entry(FAST, source, best["machine"], col, best["device"], seconds=float(best["seconds"]),
                          setting=best["setting"], state="measured", **extra))
    return out


def _order(entries: pd.DataFrame) -> pd.DataFrame:
    """Panels in order; in each, sources measured, reference, published; machines as found; devices in
    the published column order."""
    if entries.empty:
        return pd.DataFrame(columns=ENTRY_COLUMNS)
    rank = {d: i for i, d in enumerate(order_devices(entries["device"]))}
    groups = {g: i for i, g in enumerate(dict.fromkeys(entries["group"]))}
    key = pd.DataFrame({"panel": entries["panel"] != LIKE,
                        "source": entries["source"].map({MEASURED: 0, REFERENCE: 1, PUBLISHED: 2}),
                        "group": entries["group"].map(groups), "device": entries["device"].map(rank)})
    return entries.loc[key.sort_values(list(key.columns), kind="stable").index].reset_index(drop=True)


def headline(records: pd.DataFrame | None, published: dict[str, Any] | None = None,
             reference: pd.DataFrame | None = None) -> Headline:
    """The first screen from the user's ``records``, the published figures (``load_published()`` or None)
    and lstmnb's ``reference`` records (or None)."""
    rows = comparison_rows(records, reference, published)
    if rows.empty:
        rows = pd.DataFrame(columns=ROW_COLUMNS)
    epochs = headline_epochs(rows)
    speed = own_cpu_speedups(rows, PUBLISHED_PROBLEM_LABEL, epochs) if epochs else own_cpu_speedups(pd.DataFrame())
    notes = device_notes(published) if published is not None else {}
    entries: list[dict] = []
    machines: dict[str, str] = {}
    for df, source in ((records, MEASURED), (reference, REFERENCE)):
        states = record_states(df, source)
        if states.empty:
            continue
        entries += _like_entries(rows, speed, states, source, epochs, notes)
        entries += _fast_entries(rows, speed, source, epochs) if epochs else []
        machines.update({_group(source, m): d for m, d in machine_descriptions(df, source).items()})
    if published is not None and epochs:
        entries += _like_entries(rows, speed, None, PUBLISHED, epochs, notes)
        prov = published["era5_lstm_gpu_benchmark"].get("provenance") or {}
        for machine in dict.fromkeys((prov.get("machine") or {}).values()):
            machines[_group(PUBLISHED, machine)] = f"{machine} (as the study states it)"
    table = _order(pd.DataFrame(entries, columns=ENTRY_COLUMNS))
    shown = set(table.loc[table["source"] == PUBLISHED, "device"]) if not table.empty else set()
    notes = {d: n for d, n in notes.items() if d in shown}
    table["note"] = table["device"].map(lambda d: NOTE_MARK if d in notes else None).where(table["source"] == PUBLISHED)
    sentence = " ".join(filter(None, (headline_sentence(table, epochs), study_cpu_sentence(rows, published))))
    return Headline(table, sentence, epochs, notes, machines)


def study_cpu_sentence(rows: pd.DataFrame, published: dict[str, Any] | None) -> str:
    """Each CPU measured here at the study's setting on its data against the study's CPU run: the same workload
    on two machines (at the most epochs both have; the study's CPU platform is not stated, so it is named so),
    marked as a rough figure where 03 marks the same runs (``rows``' ``rough``)."""
    if published is None or rows.empty:
        return ""
    study = published_epochs_table(published).get("CPU", pd.Series(dtype=float)).dropna()
    mine = rows[(rows["source"] == MEASURED) & (rows["device"] == "CPU") & rows["like_for_like"].astype(bool)
                & rows["epochs"].isin(study.index)]
    parts = []
    for column, g in mine.groupby("column", sort=False):
        r = g.loc[g["epochs"].idxmax()]
        ratio = study[r["epochs"]] / r["seconds"]
        if 0.5 < ratio < 2:  # near 1 a percentage reads better than a ratio
            how = f"{abs(1 - 1 / ratio):.0%} {'less' if ratio >= 1 else 'more'} time here"
        else:
            how = f"{num.ratio(ratio)} faster here" if ratio >= 1 else f"{num.ratio(1 / ratio)} slower here"
        rough = r.get("rough")  # its runs' times disagree or shared the cores: 03 marks the same figure
        how += f" (a rough figure: {rough})" if isinstance(rough, str) and rough else ""
        parts.append(f"{column} took {num.seconds(r['seconds'])} for {int(r['epochs'])} epochs, the study's CPU run (platform "
                     f"not stated) {num.seconds(study[r['epochs']])}: {how}")
    if not parts:
        return ""
    return (f"**Your CPU against the study's CPU**, the same workload on two machines (the {link()} on the study's "
            "data): " + "; ".join(parts) + ".")


# --- the sentence --------------------------------------------------------------------------------

def _who(r: pd.Series) -> str:
    mark = r["note"] if isinstance(r["note"], str) else ""
    return f"{r['device']}{mark}"


def _like_text(gpus: pd.DataFrame) -> str:
    """'H100 1.52x (reference records, vm: over its own machine's CPU); T4† 1.17x, P100† 14.6x (published:
    GPUs on Google Colab, CARC cluster, all over one CPU run: the study's CPU run, platform not stated)'; a
    ratio over a CPU that is not the GPU's own machine's names that CPU."""
    parts = []
    for (source, machine), g in gpus.groupby(["source", "machine"], sort=False):
        same = g[g["same_machine"].astype(bool)]
        if not same.empty:
            items = ", ".join(f"{_who(r)} {num.ratio(r['x_own_cpu'])}" for _, r in same.iterrows())
            parts.append(f"{items} ({SOURCE_WORDS[source]}, {machine}: over its own machine's CPU)")
    other = gpus[~gpus["same_machine"].astype(bool)]
    for (source, cpu_machine), g in other.groupby(["source", "cpu_machine"], sort=False):
        items = ", ".join(f"{_who(r)} {num.ratio(r['x_own_cpu'])}" for _, r in g.iterrows())
        where = ", ".join(dict.fromkeys(g["machine"]))
        over = "all over one CPU run" if len(g) > 1 else "over a CPU run"
        parts.append(f"{items} ({SOURCE_WORDS[source]}: GPUs on {where}, {over}: {cpu_machine})")
    return "; ".join(parts)


def headline_sentence(entries: pd.DataFrame, epochs: int | None) -> str:
    """The answer in words: like for like first (each GPU over a CPU, its own machine's where the records
    have one, else the study's CPU run; the fastest), then
    the fastest setting of all, then what the user's own records lack."""
    if entries.empty or epochs is None:
        return ("**No like-for-like figure to show:** no run of the " + link() + " on the DataLoader path in these "
                "records, and no published figures (`show_published`). Run 03 with `--profile cpu`, or 04 on a GPU.")
    like = entries[(entries["panel"] == LIKE) & (entries["state"] == "measured")]
    gpus = like[(like["device"] != "CPU") & like["x_own_cpu"].notna()]
    text = f"**Like for like** ({epochs} epochs at the {link()}, DataLoader path), "
    if gpus.empty:
        text += "no GPU has a CPU run of its own machine to compare with"
    else:
        text += "each GPU is this much faster than a CPU doing the same: " + _like_text(gpus)
    any_gpu = like[like["device"] != "CPU"]
    if not any_gpu.empty:
        tied = tied_with_fastest(any_gpu["seconds"])
        if len(tied) > 1:
            text += ". Fastest like for like, tied within run-to-run noise (under " + f"{TIED_WITHIN:.0%}): " + ", ".join(
                f"{_who(r)} ({SOURCE_WORDS[r['source']]}, {num.seconds(r['seconds'])})" for _, r in any_gpu.loc[tied.index].iterrows())
        else:
            top = any_gpu.loc[any_gpu["seconds"].idxmin()]
            text += f". The fastest like for like is the {_who(top)} ({SOURCE_WORDS[top['source']]}, {num.seconds(top['seconds'])})"
    fast = entries[(entries["panel"] == FAST) & (entries["device"] != "CPU")]
    if not fast.empty:
        top = fast.loc[fast["seconds"].idxmin()]
        text += (f"; **at its fastest setting**, the {top['device']} ({SOURCE_WORDS[top['source']]}) takes "
                 f"{num.seconds(top['seconds'])}")
        if pd.notna(top["x_own_cpu"]):
            whose = "its own machine's CPU" if bool(top["same_machine"]) else top["cpu_machine"]
            text += f", {num.ratio(top['x_own_cpu'])} {whose} at that CPU's fastest"
    text += "."
    mine = entries[(entries["source"] == MEASURED) & (entries["panel"] == LIKE)]
    if not mine.empty and not (mine["state"] == "measured").any():
        text += (f" *Your own records have no like-for-like run of {epochs} epochs yet* (their rows at the top of the "
                 "figure say why).")
    return text
