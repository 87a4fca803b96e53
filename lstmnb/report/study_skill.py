"""Skill on the study's real data, per point: the study's model (``--preset published``) beside lstmnb's
recommended forecaster, persistence and climatology, on the study's test part (2021-01-01 on).

Read from run records (their ``skill.per_point`` rows), so a table shows what was measured: only finished
runs on the study's data (``data.source`` ``study``) whose test part is 2021-01-01..06-30, every model and
baseline scored on the same target hours. Medians over the runs of one forecaster, epochs, input path and lead:
runs fed by the fast path and by a DataLoader draw other batches, so they are two rows, never one median
that no run produced.
"""

from __future__ import annotations

import pandas as pd

from .devices import column
from .settings import PUBLISHED_PROBLEM, PUBLISHED_SETTING, present

STUDY_TEST_START = "2021-01-01"
STUDY_TEST_END = PUBLISHED_PROBLEM["end"]  # the last day of the study's data, and of its test part
COLUMNS = ["point", "lead h", "forecast", "input", "runs", "model RMSE K", "persistence RMSE K", "climatology RMSE K",
           "MSE skill vs persistence", "MSE skill vs climatology"]


# what makes a run the study's model: the published setting's optimisation and the published problem's model
STUDY_MODEL = {**{k: PUBLISHED_SETTING[k] for k in ("batch_size", "lr", "residual", "calendar", "cycles",
                                                     "point_weights", "blend")},
               **{k: PUBLISHED_PROBLEM[k] for k in ("window", "hidden", "layers", "lead_hours", "horizon")}}


def _test_end(df: pd.DataFrame) -> pd.Series:
    """Each run's last test hour (``data.split_times.test``), else its last requested day (``data.end``)."""
    ends = column(df, "data.split_times.test").map(
        lambda s: str(s[1]) if isinstance(s, (list, tuple)) and len(s) == 2 else None)
    return ends.fillna(column(df, "data.end"))


def _forecast(row: pd.Series) -> str | None:
    """'the study's model, N epochs' for a run of the study's setting, 'recommended (lstmnb)' for the
    recommended preset (', hidden 8' where its window or width is not the study's), None for any other setting
    (left out)."""
    if all(row.get(f"config.{k}") == v for k, v in STUDY_MODEL.items()):
        n = int(row.get("metrics.epochs_run"))
        return f"the study's model, {n} epoch{'s' if n != 1 else ''}"
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
    keep &= _test_end(df).fillna("").astype(str).str.startswith(STUDY_TEST_END)
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
