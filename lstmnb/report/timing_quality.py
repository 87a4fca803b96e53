"""Whether a timing can be trusted: repeated runs of one setting as one row (the median of the repeats),
with what the reader needs beside the time (input path, batch, threads) and a mark on a row whose repeats
disagree by more than ``REPEATS_DISAGREE`` or that ran while other processes kept cores busy (each record's
``threads`` section says so: the cores others kept busy when the run started, and the threads it took).

Used by notebook 03's run table; any timing table of runs made the same way can use ``timing_rows``."""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

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
    s = pd.Series(list(seconds), dtype=float).dropna()
    why = []
    if len(s) > 1 and s.min() > 0 and s.max() / s.min() - 1 > REPEATS_DISAGREE:
        why.append(f"repeats differ by {s.max() / s.min() - 1:.0%}")
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
        spread = g["seconds"].max() / g["seconds"].min() - 1
        why = unsure_why(g["seconds"], g["busy"])
        threads = sorted({int(t) for t in g["threads"].dropna()})
        out.append({"setting": setting, "input": path, "batch": int(batch), "epochs": int(epochs), "repeats": len(g),
                    "train s (median)": round(float(g["seconds"].median()), 2),
                    "spread": f"{spread:.0%}" if len(g) > 1 else "one run",
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
