"""Timings worth reading: medians over alternated repeats, and the flags that say when not to trust one.

Every timing table of 04 and 05 goes through ``median_of_repeats``: one row per setting with the median
of its repeats, how many there were, how far they spread, the most cores other processes kept busy
during them, and a ``flag`` naming what is wrong (empty when nothing is). ``speedup_note`` says when a
speedup must not be printed at all.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from .timing_quality import BUSY_CORES as BUSY_LIMIT  # cores others kept busy from which a timing is flagged
from .timing_quality import REPEATS_DISAGREE as SPREAD_LIMIT  # slowest repeat this much above the fastest: flagged
MIN_REPEATS = 3

RULE = (f"Each row is the median of its repeats, run alternated with the other rows (setting A, B, ..., then "
        f"A, B, ... again). A flag marks a row whose slowest repeat took more than {SPREAD_LIMIT:.0%} longer than its "
        f"fastest, that has fewer than {MIN_REPEATS} repeats, or that ran while other processes kept "
        f"{BUSY_LIMIT} core(s) or more busy; such a row is a rough figure, not a result.")


def spread(values: Sequence[float]) -> float:
    """(max - min) / min of ``values`` (NaN left out): how much longer the slowest repeat took than the
    fastest (``report.timing_quality``'s rule); 0 when they agree, NaN without a positive minimum."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0 or v.min() <= 0:
        return float("nan")
    return float((v.max() - v.min()) / v.min())


def flag_text(n: int, spread_value: float, busy: float | None) -> str:
    """What makes a median untrustworthy, in few words (a table column); '' when nothing does. 'cores busy
    elsewhere': the cores other processes kept busy while it ran."""
    parts = []
    if n < MIN_REPEATS:
        parts.append(f"only {n} repeat(s)")
    if np.isfinite(spread_value) and spread_value > SPREAD_LIMIT:
        parts.append(f"repeats differ {spread_value:.0%}")
    if busy is not None and np.isfinite(busy) and busy >= BUSY_LIMIT:
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
