"""The comparison across machines: every finished single-device training run of every source (the
user's records, lstmnb's reference records, the published table) as one long table of rows, one per
device column x setting x problem x epochs; the speedup against one stated reference; and what one knob
(CUDA graphs) changes where runs differ in it alone.

A setting is named by how it differs from the published one (batch 64, Adam 1e-3, no residual, fp32,
DataLoader with 2 workers); a problem by how it differs from the published one (2 points,
2020-01-01..2021-06-30, window 24 h, hidden 64, 1 layer). Only runs of the same problem and epochs are
compared in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from .devices import column, order_devices
from .provenance import column_label, with_columns
from .published import MEASURED, PUBLISHED, REFERENCE, SOURCES, load_published, published_epochs_table

# the published experiment (published_figures.yaml, era5_lstm_gpu_benchmark.task)
PUBLISHED_SETTING = {"batch_size": 64, "lr": 0.001, "residual": False, "lr_schedule": "constant", "amp": "off",
                     "compile": False, "cuda_graph": False, "threads": None}
PUBLISHED_WORKERS = 2
PUBLISHED_PROBLEM = {"points": 2, "start": "2020-01-01", "end": "2021-06-30", "window": 24, "hidden": 64,
                     "layers": 1, "cell": "lstm", "lead_hours": 1, "horizon": 1}
PUBLISHED_PROBLEM_LABEL = "published problem"
LIKE_FOR_LIKE = "published setting · DataLoader"
# experiments with tables of their own (and settings chosen for another question) are not compared here
NOT_COMPARED = ("batch-sweep", "speed")
NOT_COMPARED_PREFIXES = ("scaling-", "uneven-", "region-")
KNOBS = tuple(PUBLISHED_SETTING) + ("input_path", "num_workers")


def setting_label(config: Mapping[str, Any]) -> str:
    """A run's speed settings as they differ from the published ones, then its input path:
    'published setting · DataLoader', 'batch 256, lr 0.004, residual, AMP auto · fast input'."""
    config = {k: v for k, v in config.items() if _present(v)}  # missing knobs take the published value
    c = {**PUBLISHED_SETTING, **config}
    diffs = []
    if c["batch_size"] != PUBLISHED_SETTING["batch_size"]:
        diffs.append(f"batch {int(c['batch_size'])}")
    if c["lr"] != PUBLISHED_SETTING["lr"]:
        diffs.append(f"lr {c['lr']:g}")
    if c["residual"]:
        diffs.append("residual")
    if c["lr_schedule"] != "constant":
        diffs.append(f"{c['lr_schedule']} lr")
    if c["amp"] not in ("off", None):
        diffs.append(f"AMP {c['amp']}")
    if c["compile"]:
        diffs.append("torch.compile")
    if c["cuda_graph"]:
        diffs.append("CUDA graph")
    if _present(c.get("threads")):
        diffs.append(f"{int(c['threads'])} threads")
    optimiser = ("batch_size", "lr", "residual", "lr_schedule")
    if all(c[k] == PUBLISHED_SETTING[k] for k in optimiser):
        diffs.insert(0, "published setting")  # the same optimisation, only run differently
    base = ", ".join(diffs)
    if config.get("input_path") == "dataloader":
        workers = config.get("num_workers", PUBLISHED_WORKERS)
        path = "DataLoader" if workers == PUBLISHED_WORKERS else f"DataLoader ({int(workers)} workers)"
    else:
        path = "fast input"
    return f"{base} · {path}"


def problem_label(problem: Mapping[str, Any]) -> str:
    """The problem as it differs from the published one ('90 points'), or 'published problem'."""
    p, ref = {k: v for k, v in problem.items() if _present(v)}, PUBLISHED_PROBLEM  # missing: as published
    diffs = []
    if _present(p.get("points")) and p["points"] != ref["points"]:
        diffs.append(f"{int(p['points'])} points")
    if (p.get("start"), p.get("end")) != (ref["start"], ref["end"]) and p.get("start"):
        diffs.append(f"{p['start']}..{p['end']}")
    for key in ("window", "hidden", "layers"):
        if _present(p.get(key)) and p[key] != ref[key]:
            diffs.append(f"{key} {int(p[key])}")
    if p.get("cell") and p["cell"] != ref["cell"]:
        diffs.append(str(p["cell"]).upper())
    for key in ("lead_hours", "horizon"):
        if _present(p.get(key)) and p[key] != ref[key]:
            diffs.append(f"{key.replace('_', ' ')} {int(p[key])}")
    return ", ".join(diffs) or PUBLISHED_PROBLEM_LABEL


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)


def _points(row: pd.Series) -> int | None:
    for name in ("data.cells", "data.points"):
        value = row.get(name)
        if isinstance(value, list):
            return len(value)
    return None


def compared_runs(df: pd.DataFrame | None, source: str = MEASURED) -> pd.DataFrame:
    """The runs of one source that enter the comparison, one row each: finished single-device training
    runs (not stopped early) outside the batch sweep, speed and parallel experiments."""
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
        if _present(r.get("cuda_graph.used")):  # what the run did, where the record says (graphs are the default)
            config["cuda_graph"] = bool(r.get("cuda_graph.used"))
        problem = {"points": _points(r), "start": r.get("data.start"), "end": r.get("data.end"),
                   **{k: r.get(f"config.{k}") for k in ("window", "hidden", "layers", "cell", "lead_hours", "horizon")}}
        label = problem_label(problem)
        setting = setting_label(config)
        rows.append({
            "source": source, "column": r["column"], "device": r["device_label"], "machine": r["machine"],
            "setting": setting, "problem": label, "epochs": int(r["config.epochs"]),
            "seconds": r["timing.train_s"], "samples_per_s": r.get("timing.samples_per_s"),
            "train_samples": r.get("data.sizes.train"), "test_rmse_k": r.get("metrics.test_rmse_k"),
            "persistence_rmse_k": r.get("metrics.persistence_rmse_k"),
            "climatology_rmse_k": r.get("metrics.climatology_rmse_k"), "experiment": r.get("experiment"),
            "like_for_like": setting == LIKE_FOR_LIKE and label == PUBLISHED_PROBLEM_LABEL, **config,
        })
    return pd.DataFrame(rows)


ROW_KEYS = ["source", "column", "setting", "problem", "epochs"]
ROW_VALUES = ["seconds", "samples_per_s", "test_rmse_k", "persistence_rmse_k", "climatology_rmse_k", "train_samples"]
ROW_COLUMNS = ROW_KEYS + ROW_VALUES + ["device", "machine", "like_for_like", *KNOBS, "runs"]


def comparison_rows(records: pd.DataFrame | None = None, reference: pd.DataFrame | None = None,
                    published: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per (source, device column, setting, problem, epochs): median training seconds and
    samples/s over the runs, their count, median test RMSE beside the baselines. ``records`` are the
    user's, ``reference`` lstmnb's reference records, ``published`` the published figures (or None)."""
    parts = []
    for df, source in ((records, MEASURED), (reference, REFERENCE)):
        runs = compared_runs(df, source)
        if runs.empty:
            continue
        groups = runs.groupby(ROW_KEYS, sort=False)
        agg = groups[ROW_VALUES].median()
        first = groups[["device", "machine", "like_for_like", *KNOBS]].first()
        parts.append(agg.join(first).assign(runs=groups.size()).reset_index())
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
    rows = []
    for device in table.columns:
        for epochs, seconds in table[device].dropna().items():
            rows.append({"source": PUBLISHED, "column": column_label(PUBLISHED, device), "setting": LIKE_FOR_LIKE,
                         "problem": PUBLISHED_PROBLEM_LABEL, "epochs": int(epochs), "seconds": float(seconds),
                         "device": device, "machine": None, "like_for_like": True, "input_path": "dataloader",
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


# --- speedup against one stated reference -----------------------------------------------------------

@dataclass
class Speedups:
    """x faster than one reference run (its seconds / each row's seconds), settings x device columns,
    all at one problem and one epochs count. ``table`` is empty where there is nothing to compare, and
    ``why`` then says what to run."""

    table: pd.DataFrame
    reference: str = ""  # the reference in words, with its seconds
    reference_column: str | None = None
    reference_setting: str | None = None
    problem: str | None = None
    epochs: int | None = None
    seconds: float | None = None
    why: str = ""
    left_out: list[str] = field(default_factory=list)  # device columns with runs of other problems or epochs
    devices: dict[str, str] = field(default_factory=dict)  # device column -> device label


def pick_reference(rows: pd.DataFrame, problem: str, epochs: int) -> pd.Series | None:
    """The reference row: a CPU at the published setting on the DataLoader path (the published CPU
    first, then the user's, then the reference records'), else a CPU on the DataLoader path, else any CPU."""
    cand = rows[(rows["problem"] == problem) & (rows["epochs"] == epochs) & (rows["device"] == "CPU")]
    if cand.empty:
        return None
    source_rank = cand["source"].map({PUBLISHED: 0, MEASURED: 1, REFERENCE: 2})
    key = pd.DataFrame({"lfl": ~cand["like_for_like"].astype(bool), "dl": cand["input_path"] != "dataloader",
                        "src": source_rank, "slow": -cand["seconds"]})
    return cand.loc[key.sort_values(list(key.columns)).index[0]]


def speedups(rows: pd.DataFrame, reference: tuple[str, str] | None = None, epochs: int | None = None) -> Speedups:
    """Speedup of every row of the reference's problem and epochs over the reference row.

    ``reference`` is (column, setting) of the reference row; by default ``pick_reference`` chooses one.
    A speedup needs two device columns: with fewer, the table is empty and ``why`` says what to run.
    """
    if rows.empty:
        return Speedups(pd.DataFrame(), why="no finished training runs: run 03 (`lstmnb notebooks run --profile cpu`)")
    problem = main_problem(rows)
    if reference is not None:
        hit = rows[(rows["column"] == reference[0]) & (rows["setting"] == reference[1])]
        if hit.empty:
            raise ValueError(f"no comparison row for reference {reference!r}")
        problem = hit["problem"].iloc[0]
        epochs = epochs or comparison_epochs(hit, problem)
        ref = hit[hit["epochs"] == epochs]
        ref = ref.iloc[0] if not ref.empty else None
    else:
        epochs = epochs or comparison_epochs(rows, problem)
        ref = pick_reference(rows, problem, epochs)
    if ref is None:
        return Speedups(pd.DataFrame(), problem=problem, epochs=epochs,
                        why=f"no CPU run of the {problem} at {epochs} epochs to measure speedups against: "
                            "run 03 (`lstmnb notebooks run --profile cpu`) on the same problem")
    same = rows[(rows["problem"] == problem) & (rows["epochs"] == epochs)]
    table = same.pivot_table(index="setting", columns="column", values="seconds", aggfunc="median", sort=False)
    table = float(ref["seconds"]) / table
    settings = sorted(table.index, key=lambda s: (s != LIKE_FOR_LIKE, s != "published setting · fast input",
                                                  -table.loc[s].max()))
    table = table.loc[settings, list(dict.fromkeys(same["column"]))]
    left_out = sorted(set(rows["column"]) - set(table.columns))
    words = (f"{ref['column']}, {ref['setting']}, {epochs} epochs of the {problem} "
             f"({float(ref['seconds']):.3g} s)")
    result = Speedups(table, words, ref["column"], ref["setting"], problem, epochs, float(ref["seconds"]),
                      left_out=left_out, devices=dict(zip(same["column"], same["device"])))
    if same["device"].nunique() < 2:
        result.table = pd.DataFrame()
        result.why = (f"only {same['device'].iloc[0]} runs of the {problem} at {epochs} epochs: a speedup needs a "
                      "second device (run 04 on a GPU, e.g. `lstmnb notebooks run --profile colab-t4`)")
    return result


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
