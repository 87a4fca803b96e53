"""Tables from run records: one run's epochs and metrics, many runs, the published epochs x devices form (from
the comparison rows: 03, 04 and 06), accuracy per device column, loss curves, status counts, the findings' table;
and skill on the study's real data per point (``skill.per_point`` of finished runs tested on 2021-01..06, every
forecast scored on the same hours; the fast path and a DataLoader draw other batches: two rows, never one median).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import labels as num
from .compare import comparison_epochs, compared_runs, main_problem
from .labels import (
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM,
    PUBLISHED_PROBLEM_LABEL,
    PUBLISHED_SETTING,
    column,
    ok_single_runs,
    order_devices,
    present,
    with_device_labels,
)
from .published import NOTE_MARK, PUBLISHED, SOURCES, with_columns

# --- one run and many runs ----------------------------------------------------------------------------------

def epochs_table(record: dict[str, Any]) -> pd.DataFrame:
    """One row per epoch: seconds, cumulative seconds, losses, validation RMSE (K), samples/s."""
    df = pd.DataFrame(record.get("epochs") or [])
    if df.empty:
        return df
    cols = ["epoch", "train_s", "cumulative_s", "train_loss", "val_loss", "val_rmse_k", "samples_per_s"]
    df = df[[c for c in cols if c in df]].set_index("epoch")
    if "samples_per_s" in df:  # a rate to three or four figures, not 9733.0427
        df["samples_per_s"] = df["samples_per_s"].round(-1).astype("Int64")
    return df


SKILL_COLUMN = "model's MSE skill score vs row"  # 1 - MSE_model / MSE_row (training.evaluate.mse_skill_score)


def metrics_table(record: dict[str, Any]) -> pd.DataFrame:
    """Test RMSE and MAE (K) of the reported forecast (and of the network alone where that is a blend) beside
    persistence and climatology, with the model's MSE skill score against each (``metrics.mse_skill_vs_*``)."""
    m = record.get("metrics") or {}
    cell = "LSTM" if (record.get("config") or {}).get("cell", "lstm") == "lstm" else "GRU"
    blended = (record.get("config") or {}).get("blend", "off") != "off" and m.get("network_test_rmse_k") is not None
    rows = []
    for name, key in ((f"{cell} (reported: blend)" if blended else cell, "test"),
                      *(((f"{cell} network alone", "network_test"),) if blended else ()),
                      ("persistence", "persistence"), ("climatology", "climatology")):
        rmse, mae = m.get(f"{key}_rmse_k"), m.get(f"{key}_mae_k")
        if rmse is not None:
            rows.append({"model": name, "test RMSE (K)": rmse, "test MAE (K)": mae,
                         SKILL_COLUMN: m.get(f"mse_skill_vs_{key}", float("nan"))})
    df = pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame()
    if not df.empty and df[SKILL_COLUMN].isna().all():
        df = df.drop(columns=SKILL_COLUMN)  # a record from before the MSE skill score was recorded
    elif not df.empty:  # a score only on the baselines' rows: the model's own rows stay blank, not NaN
        df[SKILL_COLUMN] = df[SKILL_COLUMN].map(lambda v: "" if pd.isna(v) else f"{v:.3f}")
    return df


def runs_table(df: pd.DataFrame) -> pd.DataFrame:
    """A compact view of many records (from ``load_records``): one row per run."""
    if df.empty:
        return df
    cols = {
        "started": "started", "experiment": "experiment", "status": "status", "device.kind": "device",
        "device.name": "device name", "profile": "profile", "data.source": "source", "data.box": "box",
        "data.variables": "variables", "config.preset": "preset", "config.lead_hours": "lead h",
        "config.seed": "seed", "config.input_path": "input", "config.batch_size": "batch", "config.lr": "lr",
        "config.residual": "residual", "config.variant": "variant", "config.epochs": "epochs",
        "metrics.epochs_run": "epochs run", "timing.train_s": "train s", "timing.samples_per_s": "samples/s",
        "metrics.test_rmse_k": "test RMSE K", "metrics.persistence_rmse_k": "persistence K",
        "metrics.climatology_rmse_k": "climatology K",
        # region mode's own figures: what it ran on and what it measured
        "region.variant": "region variant", "region.neighbours": "k", "region.mode": "region mode",
        "region.cells": "cells", "region.peak_mib": "peak MiB", "region.step_s": "step s", "region.speedup": "speedup",
        "device.load_avg": "load (1/5/15 min)", "reason": "reason"}
    present = {k: v for k, v in cols.items() if k in df}
    out = df[list(present)].rename(columns=present)
    for name in [n for n in ("cells", "k") if n in out]:
        out[name] = out[name].astype("Int64")
    for name in ("box", "variables"):  # lists, written as the options take them
        if name in out:
            out[name] = out[name].map(lambda v: ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
                                      if isinstance(v, (list, tuple)) else v)
    if "load (1/5/15 min)" in out:  # as uptime writes it
        out["load (1/5/15 min)"] = out["load (1/5/15 min)"].map(
            lambda v: "/".join(f"{x:.2f}" for x in v) if isinstance(v, (list, tuple)) else v)
    if "samples/s" in out:  # a rate to three or four figures, not 8,972.068
        out["samples/s"] = pd.to_numeric(out["samples/s"], errors="coerce").round().astype("Int64")
    return out.dropna(axis=1, how="all")  # a column no record fills (box for points, reason when all ran)


def format_table(df: pd.DataFrame, floatfmt: str = "{:,.3f}") -> str:
    """Plain text for the terminal: ``floatfmt`` for every number but a loss below 1, which gets three
    significant figures (a loss falling from 0.0049 to 0.0047 is not printed 0.005 twice)."""
    if df.empty:
        return "(no rows)"

    def loss(v) -> str:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
            return "—" if v is None or v != v else str(v)
        return floatfmt.format(v) if abs(v) >= 1 or v == 0 else f"{v:#.3g}"

    return df.to_string(float_format=lambda v: floatfmt.format(v), na_rep="—",
                        formatters={c: loss for c in df.columns if "loss" in str(c)})


# --- per device column: accuracy, loss curves, status, the published epochs x devices form, the findings ---

def rmse_by_device(df: pd.DataFrame, experiment: str | None = "epochs") -> pd.DataFrame:
    """Test RMSE (K) of the model beside persistence and climatology per device column, problem, setting and
    epochs count (``compare.MEDIAN_RULE``: a one-epoch run never blurs a five-epoch one)."""
    runs = compared_runs(df)
    if not runs.empty and experiment is not None:
        runs = runs[runs["experiment"] == experiment]
    if runs.empty or runs["test_rmse_k"].isna().all():
        return pd.DataFrame()
    cols = {"test_rmse_k": "model RMSE (K)", "persistence_rmse_k": "persistence RMSE (K)",
            "climatology_rmse_k": "climatology RMSE (K)"}
    keys = ["column", "problem", "setting", "epochs"]
    groups = runs.groupby(keys, sort=False)
    table = groups[list(cols)].median().rename(columns=cols)
    table.insert(0, "runs", groups.size())
    rank = {d: i for i, d in enumerate(order_devices(runs["device"]))}
    device = runs.drop_duplicates("column").set_index("column")["device"]
    table = table.loc[sorted(table.index, key=lambda k: (rank[device[k[0]]], k[0], k[1], k[2], k[3]))]
    for base in ("persistence", "climatology"):
        known = table[f"{base} RMSE (K)"].notna()
        table[f"beats {base}"] = (table["model RMSE (K)"] < table[f"{base} RMSE (K)"]).where(known, None)
    table.index.names = ["device column", "problem", "setting", "epochs"]
    return table.dropna(axis=1, how="all")


def loss_curves(df: pd.DataFrame, experiment: str | None = "epochs") -> pd.DataFrame:
    """Per-epoch losses of every ok single-device run, long form (one row per run and epoch); ``device``
    is the device column (device on a machine)."""
    runs = ok_single_runs(df, experiment)
    if runs.empty or "epochs" not in runs:
        return pd.DataFrame()
    runs = with_columns(runs)
    return pd.DataFrame([{"run_id": run.get("run_id"), "device": run["column"],
                          "input_path": run.get("config.input_path"), "epochs": run.get("config.epochs"),
                          "val_persistence_rmse_k": run.get("metrics.val_persistence_rmse_k"),
                          **{k: entry.get(k) for k in ("epoch", "train_loss", "val_loss", "val_rmse_k")}}
                         for _, run in runs.iterrows() if isinstance(run["epochs"], list) for entry in run["epochs"]])


def status_table(df: pd.DataFrame) -> pd.DataFrame:
    """Count of records by experiment, device and status; skipped and failed runs keep their reason."""
    if df.empty:
        return df
    out = with_device_labels(df).assign(reason=column(df, "reason").fillna(""))
    return (out.groupby(["experiment", "device_label", "status", "reason"]).size()
            .rename("records").reset_index().rename(columns={"device_label": "device"}))


def epochs_tables(rows: pd.DataFrame, notes: dict[str, str] | None = None) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """The published form of ``compare.comparison_rows`` (the same medians as everywhere): (title, table,
    notes) per problem and input path at the published setting, seconds as text ('—': no run), epochs x device
    columns. Published columns stand only beside the published problem on the DataLoader path (what the study
    timed); a device with a note (``notes``, by device) carries its mark and its note."""
    if rows.empty:
        return []
    notes = notes or {}
    base = rows[rows["setting"].str.startswith("published setting · ")]
    out = []
    for (problem, setting), g in base.groupby(["problem", "setting"], sort=False):
        if setting != LIKE_FOR_LIKE or problem != PUBLISHED_PROBLEM_LABEL:
            g = g[g["source"] != PUBLISHED]
        if g.empty:
            continue
        noted = {d for s, d in zip(g["source"], g["device"]) if s == PUBLISHED and d in notes}
        label = {c: c + (NOTE_MARK if s == PUBLISHED and d in noted else "")
                 for c, s, d in zip(g["column"], g["source"], g["device"])}
        table = g.pivot_table(index="epochs", columns="column", values="seconds", aggfunc="first", sort=False)
        # the rows come in the published device order: the measured columns first, then reference, published
        order = g.drop_duplicates("column").sort_values("source", key=lambda s: s.map(SOURCES.index), kind="stable")
        table = table[list(order["column"])].rename(columns=label).sort_index()
        table = table.map(lambda v: "—" if v != v else num.figure(v))  # as the charts and sentences write seconds
        table.index.name, table.columns.name = "epochs", None
        path = setting.split(" · ", 1)[1]
        out.append((f"{problem}, published setting, {path} path: training seconds", table,
                    [notes[d] for d in notes if d in noted]))
    return out


def summary_table(rows: pd.DataFrame, problem: str | None, epochs: int | None,
                  notes: dict[str, str] | None = None) -> pd.DataFrame:
    """The findings' table, one row per device column (the user's first): source, machine, the problem and
    epochs compared (``problem`` and ``epochs``, else the column's own), like-for-like and fastest seconds, the
    fastest setting, best samples/s, median test RMSE; as text ('—': none), a noted device marked. No speedups:
    those are the ladder's and the study's comparison's."""
    if rows.empty:
        return pd.DataFrame()
    out = []
    for col, g in rows.groupby("column", sort=False):
        at = g[(g["problem"] == problem) & (g["epochs"] == epochs)]
        if at.empty:  # a column with other runs only: its own problem and epochs
            own = main_problem(g)
            at = g[(g["problem"] == own) & (g["epochs"] == comparison_epochs(g, own))]
        best = at.loc[at["seconds"].idxmin()]
        lfl = at[at["setting"] == LIKE_FOR_LIKE]["seconds"]
        rate = at["samples_per_s"].max() if "samples_per_s" in at else None
        rmse = at["test_rmse_k"].median() if "test_rmse_k" in at else None
        setting, _, path = best["setting"].rpartition(" · ")
        mark = NOTE_MARK if best["source"] == PUBLISHED and best["device"] in (notes or {}) else ""
        out.append({
            "device column": col + mark, "source": best["source"], "machine": best["machine"] or "—",
            "problem": best["problem"], "epochs": int(best["epochs"]),
            "like for like s": num.figure(lfl.min()) if len(lfl) else "—",
            "fastest s": num.figure(best["seconds"]), "fastest setting": setting, "input": path,
            "best samples/s": int(round(rate)) if pd.notna(rate) else "—",
            "test RMSE K": round(float(rmse), 3) if pd.notna(rmse) else "—",
        })
    table = pd.DataFrame(out).sort_values("source", key=lambda s: s.map(SOURCES.index), kind="stable")
    return table.set_index("device column")

# --- skill on the study's data, per point and input path ----------------------------------------------------

STUDY_TEST_START = "2021-01-01"
STUDY_TEST_END = PUBLISHED_PROBLEM["end"]  # the last day of the study's data, and of its test part
COLUMNS = ["point", "lead h", "forecast", "input", "runs", "model RMSE K", "persistence RMSE K", "climatology RMSE K",
           "MSE skill vs persistence", "MSE skill vs climatology"]


# what makes a run the study's model: the published setting's optimisation and the published problem's model
STUDY_MODEL = {**{k: PUBLISHED_SETTING[k] for k in ("batch_size", "lr", "residual", "calendar", "cycles",
                                                     "point_weights", "blend")},
               **{k: PUBLISHED_PROBLEM[k] for k in ("window", "hidden", "layers", "lead_hours", "horizon")}}


def _forecast(row: pd.Series) -> str | None:
    """'the study's model, N epochs', 'recommended (lstmnb)' (', hidden 8' where its window or width is not
    the study's), or None for any other setting (left out)."""
    if all(row.get(f"config.{k}") == v for k, v in STUDY_MODEL.items()):
        n = int(row.get("metrics.epochs_run"))
        return f"the study's model, {num.count(n, 'epoch')}"
    if row.get("config.preset") == "recommended":  # its model is the study's window and width (one layer)
        sizes = [f"{k} {int(row.get(f'config.{k}'))}" for k in ("window", "hidden")
                 if present(row.get(f"config.{k}")) and row.get(f"config.{k}") != PUBLISHED_PROBLEM[k]]
        return "recommended (lstmnb)" + "".join(f", {s}" for s in sizes)  # a smaller model is not called the same
    return None


def study_skill_table(df: pd.DataFrame | None) -> pd.DataFrame:
    """One row per point, lead, forecast and input path (medians over runs; ``runs`` counts them), the study's
    model first by epochs, then lstmnb's; empty without such records."""
    if df is None or df.empty or "skill.per_point" not in df:
        return pd.DataFrame(columns=COLUMNS)
    keep = (column(df, "status") == "ok") & (column(df, "data.source") == "study")
    first = (column(df, "data.scored.test.first") if "data.scored.test.first" in df else
             column(df, "data.scored.test").map(lambda s: s.get("first") if isinstance(s, dict) else None))
    keep &= first.fillna("").astype(str).str.startswith(STUDY_TEST_START)
    # and ends where the study's data ends: a run with an earlier --end was scored on fewer hours (its own
    # persistence and climatology too), and the table speaks for 2021-01..06
    ends = column(df, "data.split_times.test").map(  # the last test hour, else the last requested day
        lambda s: str(s[1]) if isinstance(s, (list, tuple)) and len(s) == 2 else None).fillna(column(df, "data.end"))
    keep &= ends.fillna("").astype(str).str.startswith(STUDY_TEST_END)
    keep &= column(df, "data.box").isna()
    rows = []
    for _, r in df[keep].iterrows():
        per_point = r.get("skill.per_point")
        if not isinstance(per_point, list):
            continue
        forecast = _forecast(r)
        if forecast is None:
            continue
        for p in per_point:
            rows.append({"point": p.get("requested") or p["point"], "lead h": int(p["lead_hours"]), "forecast": forecast,
                         "input": "DataLoader" if r.get("config.input_path") == "dataloader" else "fast",
                         "model RMSE K": p["model_rmse_k"], "persistence RMSE K": p["persistence_rmse_k"],
                         "climatology RMSE K": p["climatology_rmse_k"],
                         "MSE skill vs persistence": p["mse_skill_vs_persistence"],
                         "MSE skill vs climatology": p["mse_skill_vs_climatology"]})
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    long = pd.DataFrame(rows)
    keys = ["point", "lead h", "forecast", "input"]
    table = long.groupby(keys, sort=False).median(numeric_only=True)
    table.insert(0, "runs", long.groupby(keys, sort=False).size())
    table = table.reset_index()
    study_first = table["forecast"].str.startswith("the study's model").map({True: 0, False: 1})
    epochs = table["forecast"].str.extract(r"(\d+) epoch")[0].astype(float).fillna(0)
    order = pd.DataFrame({"point": table["point"].map({p: i for i, p in enumerate(dict.fromkeys(long["point"]))}),
                          "lead": table["lead h"], "study": study_first, "epochs": epochs,
                          "input": table["input"] != "DataLoader"})
    return table.loc[order.sort_values(list(order.columns), kind="stable").index, COLUMNS].reset_index(drop=True)


def study_skill_summary(table: pd.DataFrame) -> str:
    """One sentence per point: which forecasts beat persistence there, from the table's own figures."""
    if table.empty:
        return ("No run on the study's data tested on 2021-01..06 in these records: run 02 and 03 (or "
                "`lstmnb replicate` and `lstmnb skill --split-dates 2020-10-01,2021-01-01`).")
    out = []
    for point, g in table.groupby("point", sort=False):
        lose = g[g["MSE skill vs persistence"] <= 0]
        text = f"at {point}, {len(g) - len(lose)} of {len(g)} forecasts beat persistence"
        if not lose.empty:
            text += "; " + "; ".join(f"{r['forecast']} ({r['input']}) at {r['lead h']} h does not (MSE skill "
                                     f"{r['MSE skill vs persistence']:.2f})" for _, r in lose.iterrows())
        out.append(text)
    return "On the study's test part (2021-01..06): " + "; ".join(out) + "."
