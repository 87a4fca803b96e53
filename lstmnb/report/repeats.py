"""The timing rule, in one home: repeated runs of one setting are one row, the median of their repeats, marked
where the repeats disagree by more than ``REPEATS_DISAGREE`` or where other processes kept ``BUSY_CORES`` or
more cores busy (each record's ``threads`` section says so).

- 03's run table (``timing_rows``, ``timing_note``) and ``unsure_why``, the same mark on every figure of 06
  that states such a median;
- ``median_of_repeats`` for the alternated repeats of 04/05 (steps, DDP runs, all-reduce sweeps), with their
  flags (``flag_text``, ``flag_lines``) and no speedup over a baseline slower than the same work on fewer
  threads (``speedup_note``);
- the comparison across machines (``comparison_rows``): every finished single-device training run of every
  source (the user's records, lstmnb's reference records, the published table) as one row per device column
  x setting x problem x epochs under the one median rule (``MEDIAN_RULE``); each device's speedup over a CPU
  (its own machine's, or for a published GPU the study's one CPU run); what one knob (CUDA graphs) changes
  where runs differ in it alone.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from .labels import (
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM_LABEL,
    PUBLISHED_SETTING,
    PUBLISHED_WORKERS,
    column,
    order_devices,
    present,
    problem_label,
    record_problem_data,
    setting_label,
)
from .published import (
    MEASURED,
    PUBLISHED,
    REFERENCE,
    SOURCES,
    column_label,
    load_published,
    published_epochs_table,
    with_columns,
)

# --- 03's run table: repeated runs as one row, marked where they disagree -----------------------------------

# repeats whose slowest is more than this above their fastest are marked: their median is not one figure
REPEATS_DISAGREE = 0.20
# a run that started while others kept at least this many cores busy is marked (it shared its cores)
BUSY_CORES = 0.5
MARK = "⚠"


def _value(record: dict[str, Any], *keys: str) -> Any:
    for key in keys[:-1]:
        record = record.get(key) or {}
    return record.get(keys[-1])


def _setting(record: dict[str, Any]) -> str:
    """The setting a run timed, by its experiment: the study's (published) or the profile's recommended."""
    experiment = str(record.get("experiment") or "")
    if experiment.endswith("-recommended"):
        return "recommended (profile)"
    return "published" if _value(record, "config", "preset") == "published" else str(_value(record, "config", "preset"))


def spread(values: Sequence[float]) -> float:
    """(max - min) / min of ``values`` (NaN left out): how much longer the slowest repeat took than the
    fastest (the one rule of 03's table and 04/05's repeats); 0 when they agree, NaN without a positive minimum."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0 or v.min() <= 0:
        return float("nan")
    return float((v.max() - v.min()) / v.min())


def busy_while_running(record: dict[str, Any]) -> str | None:
    """Why a run's time may be slowed by other processes (its ``threads`` section), or None."""
    threads = record.get("threads") or {}
    busy, used, default = threads.get("busy_cores"), threads.get("used"), threads.get("default")
    if busy is not None and busy >= BUSY_CORES:
        cut = f", so it took {used} of {default} threads" if used is not None and default and used < default else ""
        return f"others kept {busy:.1f} of {threads.get('cores')} cores busy as it started{cut}"
    return None


def unsure_why(seconds: Iterable[float], busy: Iterable[str | None]) -> str:
    """Why the median of one row's repeats is a rough figure, in the words of 03's ``check`` column ('' when
    nothing makes it so): its repeats' ``seconds`` differ by more than ``REPEATS_DISAGREE``, or some ran
    beside busy processes (``busy``: each repeat's ``busy_while_running``). The one rule of every sentence or
    table that shows such a median, so a figure marked in 03 is marked wherever else it is shown."""
    why, differ = [], spread(list(seconds))
    if differ > REPEATS_DISAGREE:
        why.append(f"repeats differ by {differ:.0%}")
    busy = list(busy)
    said = [b for b in busy if isinstance(b, str)]
    if said:
        why.append(f"{len(said)} of {len(busy)} ran beside busy processes ({said[0]})")
    return "; ".join(why)


def timing_rows(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per (setting, input path, batch, epochs) of finished runs: the median training seconds
    over its repeats, their spread, the threads the repeats used, the median samples/s (rounded), the
    median test RMSE in kelvin (what those seconds bought: settings differ in accuracy per epoch), and
    ``check``: why the row's figure is marked (repeats that disagree, cores kept busy by others), empty
    when none."""
    rows = []
    for r in records:
        if r.get("status") != "ok" or _value(r, "timing", "train_s") is None:
            continue
        rows.append({"setting": _setting(r), "input": _value(r, "config", "input_path"),
                     "batch": _value(r, "config", "batch_size"), "epochs": _value(r, "config", "epochs"),
                     "seconds": _value(r, "timing", "train_s"), "samples_per_s": _value(r, "timing", "samples_per_s"),
                     "threads": _value(r, "threads", "used"), "busy": busy_while_running(r),
                     "rmse": _value(r, "metrics", "test_rmse_k")})
    if not rows:
        return pd.DataFrame(columns=["setting", "input", "batch", "epochs", "repeats", "train s (median)",
                                     "spread", "threads", "samples/s", "test RMSE K", "check"])
    runs = pd.DataFrame(rows)
    out = []
    for (setting, path, batch, epochs), g in runs.groupby(["setting", "input", "batch", "epochs"], sort=False):
        why = unsure_why(g["seconds"], g["busy"])
        threads = sorted({int(t) for t in g["threads"].dropna()})
        out.append({"setting": setting, "input": path, "batch": int(batch), "epochs": int(epochs), "repeats": len(g),
                    "train s (median)": round(float(g["seconds"].median()), 2),
                    "spread": f"{spread(list(g['seconds'])):.0%}" if len(g) > 1 else "one run",
                    "threads": "/".join(map(str, threads)) or "?",
                    "samples/s": int(round(float(g["samples_per_s"].median()), -1)) if g["samples_per_s"].notna().any() else None,
                    "test RMSE K": round(float(g["rmse"].median()), 3) if g["rmse"].notna().any() else None,
                    "check": (MARK + " " + why) if why else ""})
    return pd.DataFrame(out)


def timing_note(table: pd.DataFrame) -> str:
    """One Markdown sentence under a ``timing_rows`` table: the rule, and how many rows it marked."""
    marked = int((table["check"] != "").sum()) if not table.empty else 0
    repeats = sorted(set(table["repeats"])) if not table.empty else []
    rule = (f"Each row is the median of its repeats ({'/'.join(map(str, repeats)) or 'none'} run(s), alternated: "
            "every setting once before any twice, so a busy minute does not fall on one row). "
            f"{MARK} marks a row whose repeats differ by more than {REPEATS_DISAGREE:.0%} or that ran while other "
            "processes kept cores busy (its records' `threads` section): read it as a rough figure")
    if not marked:
        return rule + "; no row is marked."
    return rule + f"; {marked} of {len(table)} row(s) marked."

# --- 04/05: medians of alternated repeats, their flags, speedups only over a sound baseline -----------------

MIN_REPEATS = 3

RULE = (f"Each row is the median of its repeats, run alternated with the other rows (setting A, B, ..., then "
        f"A, B, ... again). A flag marks a row whose slowest repeat took more than {REPEATS_DISAGREE:.0%} longer "
        "than its "
        f"fastest, that has fewer than {MIN_REPEATS} repeats, or that ran while other processes kept "
        f"{BUSY_CORES} core(s) or more busy; such a row is a rough figure, not a result.")


def flag_text(n: int, spread_value: float, busy: float | None) -> str:
    """What makes a median untrustworthy, in few words (a table column); '' when nothing does. 'cores busy
    elsewhere': the cores other processes kept busy while it ran."""
    parts = []
    if n < MIN_REPEATS:
        parts.append(f"only {n} repeat(s)")
    if np.isfinite(spread_value) and spread_value > REPEATS_DISAGREE:
        parts.append(f"repeats differ {spread_value:.0%}")
    if busy is not None and np.isfinite(busy) and busy >= BUSY_CORES:
        parts.append(f"{busy:.1f} cores busy elsewhere")
    return "; ".join(parts)


def median_of_repeats(rows: pd.DataFrame | list[dict[str, Any]], keys: Sequence[str], time_col: str,
                      busy_col: str = "busy cores") -> pd.DataFrame:
    """One row per ``keys``: the median of every numeric column over the repeats, with ``repeats``,
    ``spread %`` (of ``time_col``), ``busy cores`` (the most seen during any repeat) and ``flag``.

    ``rows`` holds one row per timed repeat; columns that are not numbers and not keys are dropped."""
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame()
    keys = list(keys)
    grouped = df.groupby(keys, sort=False, dropna=False)
    numeric = [c for c in df.columns if c not in keys and c != busy_col and pd.api.types.is_numeric_dtype(df[c])]
    out = grouped[numeric].median()
    out["repeats"] = grouped[time_col].count()
    out["spread %"] = grouped[time_col].agg(lambda s: 100 * spread(list(s)))
    busy = (pd.to_numeric(df[busy_col], errors="coerce") if busy_col in df
            else pd.Series(np.nan, index=df.index))
    out[busy_col] = busy.groupby([df[k] for k in keys], sort=False, dropna=False).max()
    out["flag"] = [flag_text(int(n), s / 100, b) for n, s, b in zip(out["repeats"], out["spread %"], out[busy_col])]
    return out


def speedup_note(baseline: pd.Series, others: pd.DataFrame, *, rate_col: str = "samples/s",
                 threads_col: str = "threads") -> tuple[bool, str]:
    """Whether a speedup over ``baseline`` (a row of ``median_of_repeats``) may be printed, and a note.

    Never when some row of ``others`` doing the same work on fewer threads ran faster than the baseline
    (then something other than the work slowed it: a speedup over it would be an artefact). A flagged
    baseline gives a speedup marked rough."""
    if threads_col in others and threads_col in baseline and rate_col in others:
        fewer = others[(others[threads_col] < baseline[threads_col]) & (others[rate_col] > baseline[rate_col])]
        if not fewer.empty:
            return False, (f"no speedup: the baseline ran slower than the same work on "
                           f"{int(fewer[threads_col].min())} thread(s)")
    if baseline.get("flag"):
        return True, f"rough: the baseline is flagged ({baseline['flag']})"
    return True, ""


def flag_lines(table: pd.DataFrame, label: str = "{0}") -> str:
    """The flags and notes of a table's rows as Markdown bullets (so the table itself stays narrow), each
    row named by ``label`` formatted with its index values ('{0}, {1} rank(s)'); '' when no row has either."""
    lines = []
    for key, row in table.iterrows():
        name = label.format(*(key if isinstance(key, tuple) else (key,)))
        said = [str(row[c]) for c in ("flag", "note") if c in row and isinstance(row[c], str) and row[c]]
        if said:
            lines.append(f"- {name}: " + "; ".join(said))
    return "\n".join(lines)

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


def _busy(row: pd.Series) -> str | None:
    """Why a run's time may be slowed by other processes (its record's ``threads`` section), or None."""
    threads = {k: row.get(f"threads.{k}") for k in ("busy_cores", "used", "default", "cores")}
    return busy_while_running({"threads": {k: v for k, v in threads.items() if present(v)}})


def _points(row: pd.Series) -> int | None:
    for name in ("data.cells", "data.points"):
        value = row.get(name)
        if isinstance(value, list):
            return len(value)
    return None


def _places(row: pd.Series) -> tuple | None:
    """The run's points as sorted (latitude, longitude east) pairs; None for a box or a record without them."""
    value = row.get("data.points")
    if not isinstance(value, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return None
    return tuple(sorted((round(float(lat), 4), round(float(lon) % 360, 4)) for lat, lon in value))


def _loader_knobs(row: pd.Series) -> dict[str, bool]:
    """What the run's DataLoader was asked for beyond the study's (torch's defaults): pinned memory (which the
    trainer applies on CUDA only; asked for, it names the setting on either device, so a CPU run and a GPU run
    of one configuration pair up) and workers kept between epochs (records written before that knob kept them)."""
    workers, pinned, kept = (row.get(f"config.{k}") for k in ("num_workers", "pin_memory", "persistent_workers"))
    has_workers = (workers if present(workers) else PUBLISHED_WORKERS) > 0  # missing: as setting_label reads it
    return {"pin_memory": present(pinned) and bool(pinned),
            "persistent_workers": (True if not present(kept) else bool(kept)) and has_workers}


def compared_runs(df: pd.DataFrame | None, source: str = MEASURED, *, stopped_early: bool = False) -> pd.DataFrame:
    """The runs of one source that enter the comparison, one row each: finished single-device training
    runs outside the batch sweep, speed and parallel experiments; not stopped early (their seconds are not
    the epochs asked for) unless ``stopped_early`` (skill: their forecasts are as real)."""
    if df is None or df.empty or "timing.train_s" not in df or "config.epochs" not in df:
        return pd.DataFrame()
    exp = column(df, "experiment").fillna("").astype(str)
    keep = (column(df, "status") == "ok") & column(df, "config.strategy", "single").fillna("single").eq("single")
    keep &= ~exp.isin(NOT_COMPARED) & ~exp.str.startswith(NOT_COMPARED_PREFIXES)
    if not stopped_early:
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
        problem = {"points": _points(r), "places": _places(r),
                   "start": r.get("data.start"), "end": r.get("data.end"),
                   **{k: r.get(f"config.{k}") for k in ("window", "hidden", "layers", "cell", "lead_hours", "horizon")},
                   **record_problem_data({"kind": r.get("data.kind"), "source": r.get("data.source")},
                                         {"split_dates": r.get("config.split_dates"), "fractions": r.get("config.fractions")})}
        label = problem_label(problem)
        setting = setting_label(config)
        rows.append({
            "source": source, "column": r["column"], "device": r["device_label"], "machine": r["machine"],
            "setting": setting, "problem": label, "epochs": int(r["config.epochs"]),
            "seconds": r["timing.train_s"], "samples_per_s": r.get("timing.samples_per_s"), "busy": _busy(r),
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
    """One row per (source, device column, setting, problem, epochs): median training seconds and
    samples/s over the runs, their count, median test RMSE beside the baselines, and ``rough``: why the
    seconds are a rough figure (``unsure_why``: 03's rule), '' when not. ``records`` are the
    user's, ``reference`` lstmnb's reference records, ``published`` the published figures (or None)."""
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
    if published is not None:
        parts.append(published_rows(published))
    if not parts:
        return pd.DataFrame()
    rows = pd.concat(parts, ignore_index=True).reindex(columns=ROW_COLUMNS)  # the same columns from any source
    return sort_rows(rows)


def published_rows(published: dict[str, Any] | None = None) -> pd.DataFrame:
    """The published epochs x devices table as comparison rows (like for like; seconds only)."""
    published = published or load_published()
    table = published_epochs_table(published)
    machines = ((published["era5_lstm_gpu_benchmark"].get("provenance") or {}).get("machine")) or {}
    rows = []
    for device in table.columns:
        for epochs, seconds in table[device].dropna().items():
            rows.append({"source": PUBLISHED, "column": column_label(PUBLISHED, device), "setting": LIKE_FOR_LIKE,
                         "problem": PUBLISHED_PROBLEM_LABEL, "epochs": int(epochs), "seconds": float(seconds),
                         "device": device, "machine": machines.get(device, "not stated"), "like_for_like": True,
                         "input_path": "dataloader",
                         "num_workers": PUBLISHED_WORKERS, **PUBLISHED_SETTING})
    return pd.DataFrame(rows)


def sort_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows in reading order: the published problem first, like for like first, devices in the
    published column order, sources measured, reference, published."""
    rank = {d: i for i, d in enumerate(order_devices(rows["device"]))}
    key = pd.DataFrame({
        "problem": rows["problem"] != PUBLISHED_PROBLEM_LABEL, "problem_name": rows["problem"],
        "setting": rows["setting"] != LIKE_FOR_LIKE, "setting_name": rows["setting"],
        "device": rows["device"].map(rank), "source": rows["source"].map({s: i for i, s in enumerate(SOURCES)}),
        "column": rows["column"], "epochs": rows["epochs"],
    })
    order = key.sort_values(list(key.columns)).index
    return rows.loc[order].reset_index(drop=True)


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
    counts = rows.groupby("problem")["column"].nunique()
    return str(counts.idxmax())


# --- each device over a CPU: its own machine's, a published GPU the study's -------------------------

SPEEDUP_COLUMNS = ["source", "machine", "column", "device", "problem", "epochs", "setting", "fastest_setting", "seconds",
                   "cpu_column", "cpu_machine", "cpu_setting", "cpu_seconds", "x_own_cpu", "same_machine"]
FASTEST = "fastest of each"  # the setting of a speedup row that puts each side's fastest setting against the other's


def own_cpu_speedups(rows: pd.DataFrame, problem: str | None = None, epochs: int | None = None) -> pd.DataFrame:
    """Each non-CPU device column over the CPU of its own machine (one source, one machine), at the
    same problem and epochs: per setting both have run (``x_own_cpu`` = CPU seconds / device seconds),
    then one row with setting ``FASTEST``: the device's fastest setting against the CPU's fastest.

    The published table's GPUs ran on two machines (CARC cluster, Google Colab) and the study timed
    its CPU on one: a published GPU with no CPU on its machine is put over the study's CPU with
    ``same_machine`` False, and whatever shows it names both machines. ``problem`` and ``epochs``
    restrict the rows (default: all)."""
    if rows.empty:
        return pd.DataFrame(columns=SPEEDUP_COLUMNS)
    at = rows.dropna(subset=["seconds"])
    if problem is not None:
        at = at[at["problem"] == problem]
    if epochs is not None:
        at = at[at["epochs"] == epochs]
    out = []
    for (problem_, epochs_), same in at.groupby(["problem", "epochs"], sort=False):
        study_cpu = same[(same["source"] == PUBLISHED) & (same["device"] == "CPU")]
        for (source, machine), g in same.groupby(["source", "machine"], sort=False, dropna=False):
            cpu = g[g["device"] == "CPU"]
            same_machine = not cpu.empty
            if cpu.empty and source == PUBLISHED:
                cpu = study_cpu
            if cpu.empty:
                continue
            for col, dev in g[g["device"] != "CPU"].groupby("column", sort=False):
                base = {"source": source, "machine": machine, "column": col, "device": dev["device"].iloc[0],
                        "problem": problem_, "epochs": epochs_, "cpu_column": cpu["column"].iloc[0],
                        "cpu_machine": cpu["machine"].iloc[0], "same_machine": same_machine}
                for _, r in dev.iterrows():
                    match = cpu[cpu["setting"] == r["setting"]]
                    if not match.empty:
                        out.append({**base, "setting": r["setting"], "seconds": r["seconds"],
                                    "cpu_setting": r["setting"], "cpu_seconds": match["seconds"].iloc[0]})
                quick, cpu_quick = dev.loc[dev["seconds"].idxmin()], cpu.loc[cpu["seconds"].idxmin()]
                if len(dev) > 1 or len(cpu) > 1:
                    out.append({**base, "setting": FASTEST, "seconds": quick["seconds"], "fastest_setting": quick["setting"],
                                "cpu_setting": cpu_quick["setting"], "cpu_seconds": cpu_quick["seconds"]})
    table = pd.DataFrame(out)
    if table.empty:
        return pd.DataFrame(columns=SPEEDUP_COLUMNS)
    table["x_own_cpu"] = table["cpu_seconds"] / table["seconds"]
    return table.reindex(columns=SPEEDUP_COLUMNS)


def knob_effects(rows: pd.DataFrame, knob: str = "cuda_graph", ignore: tuple[str, ...] = ("amp",)) -> pd.DataFrame:
    """Where a device column has runs that differ only in ``knob`` (and the ``ignore``d knobs), at the
    same problem and epochs: the fastest seconds without and with it, and the ratio."""
    if rows.empty or knob not in rows:
        return pd.DataFrame()
    same = [k for k in KNOBS if k != knob and k not in ignore and k in rows]
    keys = ["source", "column", "problem", "epochs", *same]
    out = []
    for _, g in rows.dropna(subset=["seconds"]).groupby(keys, sort=False, dropna=False):
        flag = g[knob].eq(True)
        if flag.all() or not flag.any():
            continue
        off, on = g[~flag].loc[g[~flag]["seconds"].idxmin()], g[flag].loc[g[flag]["seconds"].idxmin()]
        out.append({"column": off["column"], "device": off["device"], "problem": off["problem"],
                    "epochs": off["epochs"], "without": off["setting"], "with": on["setting"],
                    "same otherwise": all(off.get(k) == on.get(k) for k in ignore),
                    "seconds without": off["seconds"], "seconds with": on["seconds"],
                    "x faster": off["seconds"] / on["seconds"]})
    return pd.DataFrame(out)
