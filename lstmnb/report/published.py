"""The published figures (package data), always labelled as published; the notes that go wherever a
device's published figures are shown; and the side-by-side form that notebooks 03 and 04 use."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import pandas as pd

from . import numbers as num
from .devices import order_devices

# the three sources a figure can come from, always shown with it
PUBLISHED = "published"
MEASURED = "measured here"
REFERENCE = "reference"  # the run records shipped with lstmnb (lstmnb.report.load_reference_records)
SOURCES = (MEASURED, REFERENCE, PUBLISHED)
# how a sentence or a chart's group header names each source
SOURCE_WORDS = {MEASURED: "measured here", REFERENCE: "reference records", PUBLISHED: "published"}


def load_published() -> dict[str, Any]:
    """The published figures shipped as package data: the shared ``published_figures.yaml``, unchanged, plus a
    ``provenance`` block of lstmnb's own (where each column ran, versions, notes per device)."""
    import yaml

    return yaml.safe_load(resources.files("lstmnb").joinpath("published_figures.yaml").read_text(encoding="utf-8"))


def published_epochs_table(published: dict[str, Any] | None = None) -> pd.DataFrame:
    """The published epochs x devices table (seconds of training), in the same shape as ours."""
    pub = (published or load_published())["era5_lstm_gpu_benchmark"]
    table = pd.DataFrame.from_dict(pub["epochs"], orient="index")
    table = table[[d for d in pub.get("devices", table.columns) if d in table]]
    table.index = table.index.astype(int)
    table.index.name, table.columns.name = "epochs", "device"
    return table.sort_index()


def device_notes(published: dict[str, Any] | None = None, devices=None) -> dict[str, str]:
    """The notes a reader must see beside a published device's figures (the T4's), keyed by device,
    each a sentence that names the device and its published seconds; only ``devices`` when given."""
    pub = (published or load_published())["era5_lstm_gpu_benchmark"]
    notes = ((pub.get("provenance") or {}).get("notes")) or {}
    table = published_epochs_table(published or {"era5_lstm_gpu_benchmark": pub})
    out = {}
    for device, note in notes.items():
        if device not in table or (devices is not None and device not in set(devices)):
            continue
        seconds = ", ".join(f"{s:g} s for {e}" for e, s in table[device].dropna().items())
        out[device] = f"{NOTE_MARK} {device} ({PUBLISHED}: {seconds} epochs): {note}."
    return out


NOTE_MARK = "†"  # put after a device's name wherever a note of ``device_notes`` applies to its figures


def side_by_side(ours: pd.DataFrame, published: pd.DataFrame, blank: str | None = None) -> pd.DataFrame:
    """Our table and the published one per device: columns (device, 'measured here' | 'published').
    Rows are the epochs either side has; ``blank`` (e.g. "") fills the cells of epochs one side did not
    run, which otherwise read NaN (the table is then for showing, not computing)."""
    parts = {}
    if not ours.empty:
        parts[MEASURED] = ours
    if not published.empty:
        parts[PUBLISHED] = published
    if not parts:
        return pd.DataFrame()
    both = pd.concat(parts, axis=1, names=["source", "device"])
    both = both.swaplevel(axis=1)
    devices = order_devices([d for d, _ in both.columns])
    sources = [s for s in (MEASURED, PUBLISHED) if s in parts]
    cols = [(d, s) for d in devices for s in sources if (d, s) in both.columns]
    both = both[cols]
    return both if blank is None else both.astype(object).where(both.notna(), blank)


def published_provenance(published: dict[str, Any] | None = None) -> pd.DataFrame:
    """Where each published device column comes from: machine, torch, CUDA, input path, as the source states.

    One row per published device, with the columns of ``provenance.machines_table`` that the source fills.
    """
    pub = (published or load_published())["era5_lstm_gpu_benchmark"]
    prov = pub.get("provenance") or {}
    machines = prov.get("machine") or {}
    rows = []
    for device in published_epochs_table(published).columns:
        rows.append({"device": device, "source": PUBLISHED, "machine": machines.get(device, "not stated"),
                     "dates": "not stated", "lstmnb": "not lstmnb", "torch": prov.get("torch", "not stated"),
                     "CUDA": prov.get("cuda", "not stated") if device != "CPU" else None,
                     "input": prov.get("input"), "records": None, "from": pub.get("source")})
    return pd.DataFrame(rows)


def published_tables(published: dict[str, Any] | None = None) -> dict[str, pd.DataFrame]:
    """The other published figures as tables, keyed by a title that says they are published."""
    pub = published or load_published()
    out: dict[str, pd.DataFrame] = {}
    if "from_scratch_versions" in pub:
        p = pub["from_scratch_versions"]
        t = pd.DataFrame({"seconds (5 epochs)": p["versions"], "speedup vs sequential": p.get("speedup_vs_sequential", {})})
        t.index.name = "version"
        t = t.astype(object).where(t.notna(), "")  # the sequential row is the reference: no speedup of its own
        out[f"{PUBLISHED}: from-scratch LSTM versions ({p['task']})"] = t
    if "dataparallel_resnet18" in pub:
        p = pub["dataparallel_resnet18"]
        t = pd.DataFrame.from_dict(p["dataparallel_per_gpu_batch"], orient="index")
        t.index.name, t.columns.name = "per-GPU batch", "GPUs"
        out[f"{PUBLISHED}: DataParallel ResNet-18, {p['unit']}"] = t
    if "distributed_rnn_cost" in pub:
        p = pub["distributed_rnn_cost"]
        t = pd.DataFrame(p["runs"]).set_index("setup")
        out[f"{PUBLISHED}: distributed RNN on AWS, {p['unit']}"] = t
    if "multi_gpu_spatiotemporal" in pub:
        p = pub["multi_gpu_spatiotemporal"]
        out[f"{PUBLISHED}: multi-GPU spatio-temporal network, {p['unit']}"] = pd.DataFrame(p["rows"]).set_index("model")
    return out


# Two single runs whose times differ by less than this are called tied: one run each has no spread of its
# own, and repeats of one training job on one machine differ by more than this (03's repeats show it)
TIED_WITHIN = 0.10
OVER_STUDY_CPU = "x the study's one CPU run"  # what a published GPU's ratio divides: never its own machine's CPU


@dataclass
class PublishedComparison:
    """The study's own comparison: ``table`` (one row per epochs count and device: its rank, or why it is left
    out), ``markdown`` (the ranking in words, the headline epochs count first, then the flagged devices' notes)
    and ``epochs``, the headline count (the longest one both the study and the records have)."""

    markdown: str
    table: pd.DataFrame
    epochs: int | None


def flagged_devices(published: dict[str, Any] | None = None) -> list[str]:
    """The published devices whose figures are flagged (``provenance.flagged``): named, never ranked."""
    pub = (published or load_published())["era5_lstm_gpu_benchmark"]
    return list(((pub.get("provenance") or {}).get("flagged")) or [])


def headline_epochs(published: dict[str, Any], records: pd.DataFrame | None = None) -> int:
    """The longest epochs count both the study and the ``records``' runs of the published setting and problem
    have (like for like); the study's longest where the records have none in common."""
    from .compare import comparison_rows  # compare builds on this module

    study = set(published_epochs_table(published).index)
    rows = comparison_rows(records) if records is not None and not records.empty else pd.DataFrame()
    mine = set(rows.loc[rows["like_for_like"].astype(bool), "epochs"]) if not rows.empty else set()
    return int(max(study & mine or study))


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
    (``flagged_devices``) left out of the ranking and named with their notes; never tied on a flagged figure."""
    if published is None:
        return PublishedComparison("", pd.DataFrame(), None)
    table = published_epochs_table(published)
    flagged, notes = flagged_devices(published), device_notes(published)
    epochs = headline_epochs(published, records)
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
    text = (f"At {epochs} epochs (the longest count both the study and these records have), fastest first: "
            f"{_ranked_text(out, epochs)}. {'Other counts, ' + others + '. ' if others else ''}"
            f"Every time is one run; the column *{OVER_STUDY_CPU}* divides that CPU run (its platform not "
            "stated) by each GPU's time: it is not any GPU's own machine's CPU."
            + (f" Left out of the ranking: {left}, whose published figures are flagged:" if left else ""))
    flagged_notes = [notes[d] for d in flagged if d in notes]
    return PublishedComparison("\n\n".join([text, *flagged_notes]), out, epochs)
