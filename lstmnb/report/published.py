"""Where every figure comes from: the published figures (package data, always labelled so) and the notes shown
with a device's figures; the provenance of every device column (machine, told apart beyond host names, dates,
lstmnb commit, torch, CUDA, source), in a table and in the findings' first line (``found``); and lstmnb's
reference records (real H100 and H200 runs, shipped, shown beside a user's records, never mixed into them).
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pandas as pd

from .labels import column, count, device_label, link, order_devices, with_device_labels

# --- the published figures and their notes ------------------------------------------------------------------

# the three sources a figure can come from, always shown with it
PUBLISHED = "published"
MEASURED = "measured here"
REFERENCE = "reference"  # the run records shipped with lstmnb (lstmnb.report.load_reference_records)
SOURCES = (MEASURED, REFERENCE, PUBLISHED)


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
    published = published or load_published()
    notes = ((published["era5_lstm_gpu_benchmark"].get("provenance") or {}).get("notes")) or {}
    table = published_epochs_table(published)
    return {device: f"{NOTE_MARK} {device} ({PUBLISHED}: "
                    + ", ".join(f"{s:g} s for {e}" for e, s in table[device].dropna().items()) + f" epochs): {note}."
            for device, note in notes.items() if device in table and (devices is None or device in set(devices))}


NOTE_MARK = "†"  # put after a device's name wherever a note of ``device_notes`` applies to its figures


def published_tables(published: dict[str, Any] | None = None) -> dict[str, pd.DataFrame]:
    """The other published figures as tables, keyed by a title that says they are published."""
    pub = published or load_published()
    out: dict[str, pd.DataFrame] = {}
    if "from_scratch_versions" in pub:
        p = pub["from_scratch_versions"]
        t = pd.DataFrame({"seconds (5 epochs)": p["versions"], "speedup vs sequential": p.get("speedup_vs_sequential", {})})
        # the sequential row is the reference: no speedup of its own
        out[f"{PUBLISHED}: from-scratch LSTM versions ({p['task']})"] = t.rename_axis("version").astype(object).where(
            t.notna(), "")
    if "dataparallel_resnet18" in pub:
        p = pub["dataparallel_resnet18"]
        out[f"{PUBLISHED}: DataParallel ResNet-18, {p['unit']}"] = pd.DataFrame.from_dict(
            p["dataparallel_per_gpu_batch"], orient="index").rename_axis(index="per-GPU batch", columns="GPUs")
    for key, what, rows, index in (("distributed_rnn_cost", "distributed RNN on AWS", "runs", "setup"),
                                   ("multi_gpu_spatiotemporal", "multi-GPU spatio-temporal network", "rows", "model")):
        if key in pub:
            out[f"{PUBLISHED}: {what}, {pub[key]['unit']}"] = pd.DataFrame(pub[key][rows]).set_index(index)
    return out


# --- where each device column comes from --------------------------------------------------------------------

REFERENCE_PACKAGE = "reference_records"


def column_label(source: str, device: str, machine: str | None = None, cpu_cores: Any = None) -> str:
    """The label of one device column: device (with its cores for a CPU), machine, and the source when it
    is not the user's own records: 'H100 · node7', 'CPU (16 cores) · vm · reference', 'A40 · published'."""
    cores = isinstance(cpu_cores, (int, float)) and not isinstance(cpu_cores, bool) and cpu_cores == cpu_cores
    name = f"CPU ({int(cpu_cores)} cores)" if device == "CPU" and cores else device
    if source == PUBLISHED:
        return f"{name} · {PUBLISHED}"
    return f"{name} · {machine or 'unknown host'}" + (f" · {REFERENCE}" if source == REFERENCE else "")


def with_columns(df: pd.DataFrame, source: str = MEASURED) -> pd.DataFrame:
    """A copy of a records DataFrame with ``device_label``, ``machine``, ``source`` and ``column`` (the
    device column each record belongs to, see ``column_label``)."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r} is not one of {SOURCES}")
    out = with_device_labels(df)
    out["machine"] = machine_names(out)
    out["source"] = source
    cores = column(out, "device.cpu_cores")
    out["column"] = [column_label(source, d, m, c) for d, m, c in zip(out["device_label"], out["machine"], cores)]
    return out


def machine_names(df: pd.DataFrame) -> pd.Series:
    """The machine of each record: its host name, with its CPU model where one host name had several, and the GPU
    its host ran that day where one such name ran several ('vm (H200)' and 'vm (H100)': alike in name and CPU)."""
    hosts = column(df, "device.hostname").map(lambda v: str(v) if isinstance(v, str) and v else "unknown host")
    cpus = column(df, "device.cpu_model").map(lambda v: v if isinstance(v, str) else "")
    several = cpus.groupby(hosts).transform("nunique") > 1
    names = hosts.where(~several, hosts + " (" + cpus.where(cpus != "", "CPU not stated") + ")")
    gpus = pd.Series([device_label(k, n) if k == "cuda" and isinstance(n, str) else None for k, n in
                      zip(column(df, "device.kind"), column(df, "device.name"))], index=df.index, dtype=object)
    if not (split := gpus.groupby(names).transform("nunique") > 1).any():
        return names
    day = column(df, "started").astype(str).str[:10]
    ran = gpus.dropna().groupby([names, day]).agg(lambda g: "+".join(sorted(set(g))))  # each host's GPUs each day
    return pd.Series([f"{n} ({ran[(n, d)]})" if s and (n, d) in ran.index else n for n, d, s in zip(names, day, split)],
                     index=df.index)


def machine_descriptions(df: pd.DataFrame | None, source: str = MEASURED) -> dict[str, str]:
    """Per machine of a records DataFrame (``machine_names``): host, CPU model and cores, the GPUs its
    finished runs used, and the dates, e.g. 'vm: Intel Xeon, 16 cores, NVIDIA H100 80GB HBM3; 2026-11-22'. What tells two machines apart beyond their host names."""
    if df is None or df.empty:
        return {}
    runs = with_columns(df, source)
    out = {}
    for machine, g in runs.groupby("machine", sort=False):
        host = str(column(g, "device.hostname").fillna("unknown host").iloc[0])
        # the CPU model without trademarks and clock: 'Intel(R) Xeon(R) Processor' -> 'Intel Xeon'
        cpu = joined(column(g, "device.cpu_model").dropna().map(
            lambda m: " ".join(re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|@.*$", " ", str(m)).split()) or str(m))
        ) or "CPU not stated"
        cores = column(g, "device.cpu_cores").dropna()
        ok_gpu = g[(column(g, "status") == "ok") & (column(g, "device.kind") == "cuda")]
        gpus = joined(column(ok_gpu, "device.name"))
        parts = [cpu + (f", {int(cores.iloc[0])} cores" if len(cores) else "")] + ([gpus] if gpus else [])
        dates = _dates(column(g, "started"))
        out[machine] = f"{host}: {', '.join(parts)}" + (f"; {dates}" if dates else "")
    return out


def joined(values: pd.Series, short: int | None = None) -> str | None:
    def cut(v: str) -> str:  # a commit's "-dirty" mark (records.commit_of) outlives the shortening
        return v[:short] + ("-dirty" if v.endswith("-dirty") else "") if short else v
    seen = [cut(str(v)) for v in values.dropna().unique() if str(v)]
    return ", ".join(seen) if seen else None


def _dates(started: pd.Series) -> str | None:
    days = sorted({str(s)[:10] for s in started.dropna()})
    return (days[0] if len(days) == 1 else f"{days[0]}..{days[-1]}") if days else None


def _found_in(df: pd.DataFrame, source: str) -> str:
    """'10 records from 1 machine (vm: AMD EPYC, 2 cores; 2026-11-24): CPU (2 cores) measured (6 finished
    runs); CUDA skipped (4 records: no usable CUDA GPU ...)'."""
    machines = machine_descriptions(df, source)
    runs = with_columns(df, source)
    status = column(runs, "status").fillna("unknown")
    reason = column(runs, "reason").fillna("no reason given").astype(str)
    parts = []
    for col, g in runs.groupby("column", sort=False):  # each device column: measured, skipped (why) or failed
        st, why = status.loc[g.index], reason.loc[g.index]
        name = col.split(" · ")[0] + (f" on {g['machine'].iloc[0]}" if len(machines) > 1 else "")
        if (st == "ok").any():
            parts.append(f"{name} measured ({count(int((st == 'ok').sum()), 'finished run')})")
        elif (st == "skipped").any():
            parts.append(f"{name} skipped, not measured ({count(int((st == 'skipped').sum()), 'record')}: "
                         f"{'; '.join(dict.fromkeys(why[st == 'skipped']))})")
        else:
            parts.append(f"{name} not measured ({'; '.join(dict.fromkeys(f'{s}: {w}' for s, w in zip(st, why)))})")
    where = "; ".join(machines.values())
    return f"{count(len(df), 'record')} from {count(len(machines), 'machine')} ({where}): " + "; ".join(parts)


def found(records: pd.DataFrame | None, reference: pd.DataFrame | None, published: dict | None) -> str:
    """The findings' first line: what each source holds (``_found_in``), lstmnb's version and commits of the
    reference records, and the published devices, each flagged one marked."""
    parts = []
    if records is not None and not records.empty:
        text = "measured here: " + _found_in(records, MEASURED)
        diverged = int((column(records, "status") == "diverged").sum())
        if diverged:  # a run whose loss or forecast went non-finite: an outcome, never a figure
            text += f"; {diverged} diverged (their reason says at which epoch and step, and what to try)"
        parts.append(text)
    else:
        parts.append("no run records of your own")
    if reference is not None and not reference.empty:
        made_by = " @ ".join(v for v in (joined(column(reference, "software.lstmnb")),
                                          joined(column(reference, "software.git_commit"), short=7)) if v)
        parts.append("beside them, lstmnb's reference records: " + _found_in(reference, REFERENCE)
                     + (f" (lstmnb {made_by})" if made_by else ""))
    if published is not None:
        notes = device_notes(published)
        devices = [d + (NOTE_MARK if d in notes else "") for d in published["era5_lstm_gpu_benchmark"]["epochs"][5]]
        parts.append(f"the published figures of the study ({', '.join(devices)}; see the {link()})")
    return "**Found:** " + "; ".join(parts) + "."


def machines_table(df: pd.DataFrame, source: str = MEASURED) -> pd.DataFrame:
    """One row per device column of a records DataFrame (``lstmnb results --by machine``): machine, device
    name, CPU, dates, lstmnb commit(s), torch, CUDA, and how many records are ok, skipped or other."""
    if df.empty:
        return pd.DataFrame()
    runs = with_columns(df, source)
    status = column(runs, "status")
    rows = []
    for label, g in runs.groupby("column", sort=False):
        commits = joined(column(g, "software.git_commit"), short=7)
        version = joined(column(g, "software.lstmnb"))
        st = status.loc[g.index]
        rows.append({
            "column": label, "device": g["device_label"].iloc[0], "source": source, "machine": g["machine"].iloc[0],
            "device name": joined(column(g, "device.name")), "CPU": joined(column(g, "device.cpu_model")),
            "cores": joined(column(g, "device.cpu_cores").dropna().astype(int)), "dates": _dates(column(g, "started")),
            "lstmnb": " @ ".join(v for v in (version, commits) if v) or None,
            "torch": joined(column(g, "software.torch")), "CUDA": joined(column(g, "software.cuda")),
            "records": str(len(g)), "ok": str(int((st == "ok").sum())), "skipped": str(int((st == "skipped").sum())),
            "oom/failed/diverged": str(int(st.isin(["oom", "failed", "diverged"]).sum())),
        })
    table = pd.DataFrame(rows).set_index("column")
    rank = {d: i for i, d in enumerate(order_devices(table["device"]))}
    order = sorted(table.index, key=lambda c: (table.at[c, "machine"], rank[table.at[c, "device"]]))
    return table.loc[order]


def provenance_table(records: pd.DataFrame | None = None, reference: pd.DataFrame | None = None,
                     published: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every device column shown (labelled as the charts are) against its source, machine, dates, lstmnb
    commit, torch and CUDA; ``published`` (``load_published()``) or None to leave those out."""
    parts = []
    for df, source in ((records, MEASURED), (reference, REFERENCE)):
        if df is not None and not df.empty:
            part = machines_table(df, source)
            # a column whose every record was skipped measured nothing: its source cell says so
            none = part["ok"].astype(int).eq(0) & part["skipped"].astype(int).eq(part["records"].astype(int))
            part.loc[none, "source"] = f"{'reference records' if source == REFERENCE else source}: all skipped, nothing measured"
            parts.append(part)
    if published is not None:  # each published column as the source states it
        bench = published["era5_lstm_gpu_benchmark"]
        prov = bench.get("provenance") or {}
        machines = prov.get("machine") or {}
        devices = list(published_epochs_table(published).columns)
        parts.append(pd.DataFrame([{
            "source": PUBLISHED, "machine": machines.get(d, "not stated"), "dates": "not stated", "lstmnb": "not lstmnb",
            "torch": prov.get("torch", "not stated"), "CUDA": prov.get("cuda", "not stated") if d != "CPU" else None,
        } for d in devices], index=[column_label(PUBLISHED, d) for d in devices]))
    if not parts:
        return pd.DataFrame()
    rows = ["source", "machine", "device name", "dates", "lstmnb", "torch", "CUDA", "records", "skipped"]
    table = pd.concat(parts)
    table = table[[r for r in rows if r in table]].T.astype(object)
    return table.where(table.notna(), "—")  # not stated, or not applicable (CUDA of a CPU)


# --- the reference records shipped with the package ------------------------------------------------

def load_reference_records() -> pd.DataFrame:
    """The reference records shipped with lstmnb (an NVIDIA H100 and an H200; the README beside them), as
    ``records.load_records`` gives a user's own: pass them to the report apart, as ``reference``."""
    from ..records import load_records

    folder = resources.files("lstmnb").joinpath(REFERENCE_PACKAGE)
    with resources.as_file(folder) as path:
        return load_records(sorted(path.glob("*.jsonl")))


def reference_note() -> str:
    """The first paragraph of the reference records' README: what they are, where and when measured."""
    text = resources.files("lstmnb").joinpath(REFERENCE_PACKAGE, "README.md").read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip() and not p.startswith("#")]
    return " ".join(paragraphs[0].split()) if paragraphs else ""
