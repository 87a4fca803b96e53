"""The comparison across machines under ``repeats``' rule: every source's finished single-device training runs
(the user's, lstmnb's reference records, the published table) as one row per device column x setting x problem x
epochs (``comparison_rows``); and the study's own comparison (``published_comparison``). A GPU over its own
machine's CPU is the ladder's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from . import labels as num
from .labels import (
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM_LABEL,
    PUBLISHED_SETTING,
    PUBLISHED_WORKERS,
    column,
    order_devices,
    present,
    problem_label,
    setting_label,
)
from .published import (
    MEASURED,
    NOTE_MARK,
    PUBLISHED,
    REFERENCE,
    SOURCES,
    column_label,
    device_notes,
    published_epochs_table,
    with_columns,
)
from .repeats import REPEATS_DISAGREE, busy_while_running, unsure_why

# --- the comparison rows across machines, under the one median rule -----------------------------------------

# experiments with tables of their own (and settings chosen for another question) are not compared here
NOT_COMPARED = ("batch-sweep", "speed")
NOT_COMPARED_PREFIXES = ("scaling-", "uneven-", "region-")
KNOBS = tuple(PUBLISHED_SETTING) + ("input_path", "num_workers", "pin_memory", "persistent_workers")
MEDIAN_RULE = ("Every time, samples/s and RMSE shown for a device is the median over all its finished single-device "
               "runs with the same setting, problem and epochs count, from notebooks and `lstmnb train` alike "
               "(batch-sweep, time-to-accuracy and multi-GPU runs have sections of their own), so the same "
               "figure reads the same everywhere on this page; one whose runs differ by more than "
               f"{REPEATS_DISAGREE:.0%} or ran beside busy processes is a rough figure, as in 03's run table.")


def _problem(r: pd.Series) -> dict[str, Any]:
    """A run's problem as ``problem_label`` reads it: its points (how many; where, as sorted (latitude, longitude
    east) pairs), dates, model and lead, data kind (``data.kind``, else from its source) and split (the test start
    of equal split dates, else how it split)."""
    pts, kind, source = r.get("data.points"), r.get("data.kind"), r.get("data.source")
    pairs = isinstance(pts, list) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pts)
    dates, fractions = r.get("config.split_dates"), r.get("config.fractions")
    if isinstance(dates, (list, tuple)) and len(dates) == 2:
        split = str(dates[1])[:10] if str(dates[0])[:10] == str(dates[1])[:10] else f"split at {dates[0]}, {dates[1]}"
    elif isinstance(fractions, (list, tuple)) and len(fractions) == 3:
        split = "split " + "/".join(f"{round(100 * float(f))}" for f in fractions)
    else:
        split = None
    places = tuple(sorted((round(float(lat), 4), round(float(lon) % 360, 4)) for lat, lon in pts)) if pairs else None
    data = kind if present(kind) else ("synthetic" if source == "sample" else "real") if present(source) else None
    return {"points": next((len(v) for v in (r.get("data.cells"), pts) if isinstance(v, list)), None),
            "places": places, "start": r.get("data.start"), "end": r.get("data.end"), "data": data, "split": split,
            **{k: r.get(f"config.{k}") for k in ("window", "hidden", "layers", "cell", "lead_hours", "horizon")}}


def _loader_knobs(row: pd.Series) -> dict[str, bool]:
    """The run's DataLoader knobs beyond the study's (torch's defaults): pinned memory (as asked for, on either
    device, so a CPU and a GPU run of one configuration pair up) and workers kept (older records kept them)."""
    workers, pinned, kept = (row.get(f"config.{k}") for k in ("num_workers", "pin_memory", "persistent_workers"))
    has_workers = (workers if present(workers) else PUBLISHED_WORKERS) > 0  # missing: as setting_label reads it
    return {"pin_memory": present(pinned) and bool(pinned),
            "persistent_workers": (True if not present(kept) else bool(kept)) and has_workers}


def compared_runs(df: pd.DataFrame | None, source: str = MEASURED) -> pd.DataFrame:
    """The runs of one source that enter the comparison, one row each: finished single-device training runs
    outside the experiments with tables of their own, not stopped early (their seconds are not the epochs asked)."""
    if df is None or df.empty or "timing.train_s" not in df or "config.epochs" not in df:
        return pd.DataFrame()
    exp = column(df, "experiment").fillna("").astype(str)
    keep = (column(df, "status") == "ok") & column(df, "config.strategy", "single").fillna("single").eq("single")
    keep &= ~exp.isin(NOT_COMPARED) & ~exp.str.startswith(NOT_COMPARED_PREFIXES)
    keep &= ~column(df, "metrics.stopped_early").eq(True)
    keep &= column(df, "timing.train_s").notna() & column(df, "config.epochs").notna()
    if not keep.any():
        return pd.DataFrame()
    runs = with_columns(df[keep], source)
    rows = []
    for _, r in runs.iterrows():
        config = {k: r.get(f"config.{k}") for k in KNOBS}
        config.update(_loader_knobs(r))
        if present(r.get("cuda_graph.used")):  # what the run did, where the record says (graphs are the default)
            config["cuda_graph"] = bool(r.get("cuda_graph.used"))
        if present(config.get("threads")) and config["threads"] == r.get("threads.default"):
            config["threads"] = None  # the count the run would have taken unasked (the ladder asks it): no change
        config["rung"] = r.get("ladder.name") if 0 < (r.get("ladder.rung") or 0) < 4 else None  # a DataLoader rung's
        label = problem_label(_problem(r))
        setting = setting_label(config)
        rows.append({
            "source": source, "column": r["column"], "device": r["device_label"], "machine": r["machine"],
            "setting": setting, "problem": label, "epochs": int(r["config.epochs"]),
            "seconds": r["timing.train_s"], "samples_per_s": r.get("timing.samples_per_s"), "busy": busy_while_running(
                {"threads": {k: r.get(f"threads.{k}") for k in ("busy_cores", "used", "default", "cores")
                             if present(r.get(f"threads.{k}"))}}),
            "train_samples": r.get("data.sizes.train"), "test_rmse_k": r.get("metrics.test_rmse_k"),
            "persistence_rmse_k": r.get("metrics.persistence_rmse_k"),
            "climatology_rmse_k": r.get("metrics.climatology_rmse_k"), "experiment": r.get("experiment"),
            "like_for_like": setting == LIKE_FOR_LIKE and label == PUBLISHED_PROBLEM_LABEL, **config,
        })
    return pd.DataFrame(rows)


ROW_KEYS = ["source", "column", "setting", "problem", "epochs"]
ROW_VALUES = ["seconds", "samples_per_s", "test_rmse_k", "persistence_rmse_k", "climatology_rmse_k", "train_samples"]
ROW_COLUMNS = ROW_KEYS + ROW_VALUES + ["device", "machine", "like_for_like", *KNOBS, "runs", "rough"]


def comparison_rows(records: pd.DataFrame | None = None, reference: pd.DataFrame | None = None,
                    published: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per (source, device column, setting, problem, epochs) of the user's ``records``, lstmnb's
    ``reference`` records and the ``published`` figures (each or None): median seconds, samples/s and test RMSE
    beside the baselines, the runs' count and ``rough`` (``unsure_why``, '' when not rough)."""
    parts = []
    for df, source in ((records, MEASURED), (reference, REFERENCE)):
        runs = compared_runs(df, source)
        if runs.empty:
            continue
        groups = runs.groupby(ROW_KEYS, sort=False)
        agg = groups[ROW_VALUES].median()
        first = groups[["device", "machine", "like_for_like", *KNOBS]].first()
        rough = groups[["seconds", "busy"]].apply(lambda g: unsure_why(g["seconds"], g["busy"])).rename("rough")
        parts.append(agg.join(first).assign(runs=groups.size()).join(rough).reset_index())
    if published is not None:  # the published epochs x devices table, like for like, seconds only
        table = published_epochs_table(published)
        machines = ((published["era5_lstm_gpu_benchmark"].get("provenance") or {}).get("machine")) or {}
        parts.append(pd.DataFrame([
            {"source": PUBLISHED, "column": column_label(PUBLISHED, device), "setting": LIKE_FOR_LIKE,
             "problem": PUBLISHED_PROBLEM_LABEL, "epochs": int(epochs), "seconds": float(seconds), "device": device,
             "machine": machines.get(device, "not stated"), "like_for_like": True, "input_path": "dataloader",
             "num_workers": PUBLISHED_WORKERS, **PUBLISHED_SETTING}
            for device in table.columns for epochs, seconds in table[device].dropna().items()]))
    if not parts:
        return pd.DataFrame()
    rows = pd.concat(parts, ignore_index=True).reindex(columns=ROW_COLUMNS)  # the same columns from any source
    # reading order: the published problem first, like for like first, devices in the published column order,
    # sources measured, reference, published
    rank = {d: i for i, d in enumerate(order_devices(rows["device"]))}
    key = pd.DataFrame({
        "problem": rows["problem"] != PUBLISHED_PROBLEM_LABEL, "problem_name": rows["problem"],
        "setting": rows["setting"] != LIKE_FOR_LIKE, "setting_name": rows["setting"],
        "device": rows["device"].map(rank), "source": rows["source"].map({s: i for i, s in enumerate(SOURCES)}),
        "column": rows["column"], "epochs": rows["epochs"],
    })
    return rows.loc[key.sort_values(list(key.columns)).index].reset_index(drop=True)


def comparison_epochs(rows: pd.DataFrame, problem: str = PUBLISHED_PROBLEM_LABEL) -> int | None:
    """The epochs count at which most device columns of ``problem`` have runs (the larger on a tie)."""
    sub = rows[rows["problem"] == problem] if not rows.empty else rows
    if sub.empty:
        return None
    counts = sub.groupby("epochs")["column"].nunique()
    return int(max(counts.index, key=lambda e: (counts[e], e)))


def main_problem(rows: pd.DataFrame) -> str | None:
    """The published problem when any source has it, else the problem with the most device columns."""
    if rows.empty:
        return None
    if (rows["problem"] == PUBLISHED_PROBLEM_LABEL).any():
        return PUBLISHED_PROBLEM_LABEL
    return str(rows.groupby("problem")["column"].nunique().idxmax())


# --- the study's own comparison, as it published it ---------------------------------------------------------

TIED_WITHIN = 0.10
OVER_STUDY_CPU = "x the study's one CPU run"  # what a published GPU's ratio divides: never its own machine's CPU


@dataclass
class PublishedComparison:
    """The study's own comparison: ``table`` (per epochs count and device, its rank or why it is left out),
    ``markdown`` (the ranking in words, then the flagged devices' notes) and ``epochs``, the headline count."""

    markdown: str
    table: pd.DataFrame
    epochs: int | None


def _ranked_text(table: pd.DataFrame, epochs: int) -> str:
    at = table[table["epochs"] == epochs]
    ranked = at[at["rank"].map(lambda r: isinstance(r, int))]
    text = ", ".join(f"{r['device']} {num.seconds(r['published s'])}" for _, r in ranked.iterrows())
    gpus = ranked[ranked["device"] != "CPU"]
    if len(gpus) > 1 and gpus["published s"].iloc[1] <= gpus["published s"].iloc[0] * (1 + TIED_WITHIN):
        text += (f" ({gpus['device'].iloc[0]} and {gpus['device'].iloc[1]} tied: under {TIED_WITHIN:.0%} apart, "
                 "one run each)")
    return text


def published_comparison(published: dict[str, Any] | None, records: pd.DataFrame | None = None) -> PublishedComparison:
    """The study's published table as the study's comparison, per epochs count (5, 10, 15): the devices ranked
    fastest first, each GPU's ratio over the study's one CPU run (platform not stated), the flagged devices
    (``provenance.flagged``) left out of the ranking and named with their notes; never tied on a flagged figure."""
    if published is None:
        return PublishedComparison("", pd.DataFrame(), None)
    table = published_epochs_table(published)
    flagged = list(((published["era5_lstm_gpu_benchmark"].get("provenance") or {}).get("flagged")) or [])
    notes = device_notes(published)
    # the headline: the longest count both the study and the records' like-for-like runs have, else the study's
    ours = comparison_rows(records) if records is not None and not records.empty else pd.DataFrame()
    mine = set(ours.loc[ours["like_for_like"].astype(bool), "epochs"]) if not ours.empty else set()
    shared = set(table.index) & mine
    epochs = int(max(shared or table.index))
    rows = []
    for e in [epochs] + [x for x in table.index if x != epochs]:
        row = table.loc[e].dropna()
        kept = row.drop([d for d in flagged if d in row]).sort_values()
        for rank, (device, s) in enumerate(kept.items(), 1):
            rows.append({"epochs": int(e), "rank": rank, "device": device, "published s": float(s),
                         OVER_STUDY_CPU: None if device == "CPU" else round(float(row["CPU"] / s), 2)})
        for device in (d for d in flagged if d in row):
            rows.append({"epochs": int(e), "rank": f"left out ({NOTE_MARK} flagged)", "device": device + NOTE_MARK,
                         "published s": float(row[device]), OVER_STUDY_CPU: None})
    out = pd.DataFrame(rows)
    left = " and ".join(f"{d}{NOTE_MARK}" for d in flagged if d in table)
    others = "; ".join(f"at {e}: {_ranked_text(out, e)}" for e in table.index if e != epochs)
    why = ("the longest count both the study and these records have" if shared else
           "the study's longest; these records hold no like-for-like run of a count the study timed")
    text = (f"At {epochs} epochs ({why}), fastest first: "
            f"{_ranked_text(out, epochs)}. {'Other counts, ' + others + '. ' if others else ''}"
            f"Every time is one run; the column *{OVER_STUDY_CPU}* divides that CPU run (its platform not "
            "stated) by each GPU's time: it is not any GPU's own machine's CPU."
            + (f" Left out of the ranking: {left}, whose published figures are flagged:" if left else ""))
    flagged_notes = [notes[d] for d in flagged if d in notes]
    return PublishedComparison("\n\n".join([text, *flagged_notes]), out, epochs)
