"""The timing rule, in one home: repeated runs of one setting are one row, the median of their repeats, marked
where the repeats disagree by more than ``REPEATS_DISAGREE`` or other processes kept ``BUSY_CORES`` or more cores
busy (each record's ``threads`` section). 03's run table (``timing_rows``) and 06's comparison rows mark with
``unsure_why``; the alternated repeats of 04/05 and the ladder's rungs with ``flag_text`` (``median_of_repeats``),
and no speedup over a baseline slower than the same work on fewer threads (``speedup_note``).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from .labels import get

# --- 03's run table: repeated runs as one row, marked where they disagree -----------------------------------

# repeats whose slowest is more than this above their fastest are marked: their median is not one figure
REPEATS_DISAGREE = 0.20
# a run that started while others kept at least this many cores busy is marked (it shared its cores)
BUSY_CORES = 0.5
MARK = "⚠"


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
    """Why the median of one row's repeats is rough, in 03's ``check`` words ('' when not): its ``seconds``
    differ by more than ``REPEATS_DISAGREE``, or some ran beside busy processes (``busy``: each repeat's
    ``busy_while_running``). A figure marked in 03 is so marked wherever else it is shown."""
    why, differ = [], spread(list(seconds))
    if differ > REPEATS_DISAGREE:
        why.append(f"repeats differ by {differ:.0%}")
    busy = list(busy)
    said = [b for b in busy if isinstance(b, str)]
    if said:
        why.append(f"{len(said)} of {len(busy)} ran beside busy processes ({said[0]})")
    return "; ".join(why)


def timing_rows(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """03's run table, one row per (setting, input path, batch, epochs) of finished runs: the median seconds
    over its repeats, their spread and threads, median samples/s and test RMSE (what those seconds bought),
    and ``check`` (``unsure_why``, marked)."""
    rows = []
    for r in records:
        if r.get("status") != "ok" or get(r, "timing.train_s") is None:
            continue
        # the setting a run timed: the profile's recommended (by its experiment), else its preset (published)
        setting = ("recommended (profile)" if str(r.get("experiment") or "").endswith("-recommended")
                   else str(get(r, "config.preset")))
        rows.append({"setting": setting, "input": get(r, "config.input_path"),
                     "batch": get(r, "config.batch_size"), "epochs": get(r, "config.epochs"),
                     "seconds": get(r, "timing.train_s"), "samples_per_s": get(r, "timing.samples_per_s"),
                     "threads": get(r, "threads.used"), "busy": busy_while_running(r),
                     "rmse": get(r, "metrics.test_rmse_k")})
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
    return rule + (f"; {marked} of {len(table)} row(s) marked." if marked else "; no row is marked.")

# --- 04/05: medians of alternated repeats, their flags, speedups only over a sound baseline -----------------

MIN_REPEATS = 3

RULE = (f"Each row is the median of its repeats, run alternated with the other rows (setting A, B, ..., then "
        f"A, B, ... again). A flag marks a row whose slowest repeat took more than {REPEATS_DISAGREE:.0%} longer "
        f"than its fastest, that has fewer than {MIN_REPEATS} repeats, or that ran while other processes kept "
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
    """One row per ``keys`` of ``rows`` (one per timed repeat): the median of every numeric column, with
    ``repeats``, ``spread %`` (of ``time_col``), ``busy cores`` (the most in any repeat) and ``flag``."""
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
    """Whether a speedup over ``baseline`` (a row of ``median_of_repeats``) may be printed, and a note: never
    when a row of ``others`` ran the same work faster on fewer threads (something else slowed the baseline);
    marked rough over a flagged baseline."""
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
