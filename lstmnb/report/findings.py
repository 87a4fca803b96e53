"""The findings under the study's sections: what was found (machines told apart, skipped
devices counted as skipped), what CUDA graphs, batch size and problem size change, the model's skill
against the baselines, what is missing with the command that fills it; and a small table, one row per
device column. Every number comes from the comparison rows (``repeats``: one median rule), the records,
or the published figures, and names its source.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import labels as num
from .compare import (
    FASTEST,
    compared_runs,
    comparison_epochs,
    comparison_rows,
    knob_effects,
    main_problem,
    own_cpu_speedups,
)
from .labels import LIKE_FOR_LIKE, PUBLISHED_PROBLEM_LABEL, column, link
from .published import (
    MEASURED,
    NOTE_MARK,
    PUBLISHED,
    REFERENCE,
    SOURCE_WORDS,
    device_notes,
    joined,
    machine_descriptions,
    over_which_cpu,
    with_columns,
)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _group(row: pd.Series) -> str:
    """Runs compared as 'the same machine': one machine of one source."""
    return f"{row['machine']} ({SOURCE_WORDS[row['source']]})"


def record_states(df: pd.DataFrame | None, source: str) -> pd.DataFrame:
    """One row per device column of a records DataFrame: its device, machine, how many records are ok,
    and the reason of its skipped or failed ones."""
    if df is None or df.empty:
        return pd.DataFrame()
    runs = with_columns(df, source)
    status = column(runs, "status").fillna("unknown")
    reason = column(runs, "reason").fillna("no reason given").astype(str)
    out = []
    for col, g in runs.groupby("column", sort=False):
        st, why = status.loc[g.index], reason.loc[g.index]
        out.append({"column": col, "device": g["device_label"].iloc[0], "machine": g["machine"].iloc[0],
                    "ok": int((st == "ok").sum()), "skipped": int((st == "skipped").sum()),
                    "skip_reasons": list(dict.fromkeys(why[st == "skipped"])),
                    "failed": list(dict.fromkeys(f"{s}: {w}" for s, w in zip(st, why) if s not in ("ok", "skipped")))})
    return pd.DataFrame(out)


def _found_source(df: pd.DataFrame, source: str) -> str:
    """'10 records from 1 machine (vm: AMD EPYC, 2 cores; 2026-11-24): CPU (2 cores) measured (6 finished
    runs); CUDA skipped (4 records: no usable CUDA GPU ...)'."""
    states = record_states(df, source)
    machines = machine_descriptions(df, source)
    parts = []
    for _, st in states.iterrows():
        name = st["column"].split(" · ")[0] + (f" on {st['machine']}" if len(machines) > 1 else "")
        if st["ok"]:
            parts.append(f"{name} measured ({_n(st['ok'], 'finished run')})")
        elif st["skipped"]:
            parts.append(f"{name} skipped, not measured ({_n(st['skipped'], 'record')}: {'; '.join(st['skip_reasons'])})")
        else:
            parts.append(f"{name} not measured ({'; '.join(st['failed'])})")
    where = "; ".join(machines.values())
    return f"{_n(len(df), 'record')} from {_n(len(machines), 'machine')} ({where}): " + "; ".join(parts)


def _found(records: pd.DataFrame | None, reference: pd.DataFrame | None, published: dict | None) -> str:
    parts = []
    if records is not None and not records.empty:
        text = "measured here: " + _found_source(records, MEASURED)
        diverged = int((column(records, "status") == "diverged").sum())
        if diverged:  # a run whose loss or forecast went non-finite: an outcome, never a figure
            text += f"; {diverged} diverged (their reason says at which epoch and step, and what to try)"
        parts.append(text)
    else:
        parts.append("no run records of your own")
    if reference is not None and not reference.empty:
        made_by = " @ ".join(v for v in (joined(column(reference, "software.lstmnb")),
                                          joined(column(reference, "software.git_commit"), short=7)) if v)
        parts.append("beside them, lstmnb's reference records: " + _found_source(reference, REFERENCE)
                     + (f" (lstmnb {made_by})" if made_by else ""))
    if published is not None:
        notes = device_notes(published)
        devices = [d + (NOTE_MARK if d in notes else "") for d in published["era5_lstm_gpu_benchmark"]["epochs"][5]]
        parts.append(f"the published figures of the study ({', '.join(devices)}; see the {link()})")
    return "**Found:** " + "; ".join(parts) + "."


def _graph_text(rows: pd.DataFrame) -> str | None:
    effects = knob_effects(rows, "cuda_graph")
    if effects.empty:
        return None
    items = []
    for col, g in effects.groupby("column", sort=False):
        parts = [f"{num.ratio(r['x faster'])} at {r['without'].replace(' · ', ', ')}"
                 f"{'' if r['problem'] == PUBLISHED_PROBLEM_LABEL else ' [' + r['problem'] + ']'} "
                 f"({num.seconds(r['seconds without'])} → {num.seconds(r['seconds with'])}, {r['epochs']} epochs"
                 f"{'' if r['same otherwise'] else '; the graph run: ' + r['with'].replace(' · ', ', ')})"
                 for _, r in g.sort_values("problem", key=lambda p: p != PUBLISHED_PROBLEM_LABEL).iterrows()]
        items.append(f"{col}: " + "; ".join(parts))
    return "**CUDA graphs** (the same run without and with `--cuda-graph`): " + "; ".join(items) + "."


# what makes batch-sweep records one sweep: the same run of `bench batch-sweep` (or notebook 04) on the same problem
SWEEP_KEYS = ("config.lr", "config.epochs", "sweep.start", "sweep.factor", "data.source", "config.layers",
              "config.hidden", "config.window", "software.git_commit")


def _latest_sweep(g: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """A device column's batch-sweep records as sweeps (``SWEEP_KEYS``): the latest one's points by batch size,
    and how many sweeps the column has. Mixing two sweeps put one sweep's smallest batch beside another's largest."""
    keys = [k for k in SWEEP_KEYS if k in g]
    sweeps = [part for _, part in g.groupby([g[k].astype(str) for k in keys], sort=False)] if keys else [g]
    latest = max(sweeps, key=lambda part: str(part["started"].max()) if "started" in part else "")
    return latest.sort_values("config.batch_size"), len(sweeps)


def _batch_text(frames: list[tuple[pd.DataFrame, str]]) -> str | None:
    items = []
    for df, source in frames:
        if df is None or df.empty or "experiment" not in df:
            continue
        sweep = df[(df["experiment"] == "batch-sweep") & (column(df, "status") == "ok")]
        if sweep.empty or "config.batch_size" not in sweep:
            continue
        sweep = with_columns(sweep, source)
        for col, g in sweep.groupby("column", sort=False):
            g, n_sweeps = _latest_sweep(g)
            if len(g) < 2:
                continue
            lo, hi = g.iloc[0], g.iloc[-1]
            which = f", the latest of {n_sweeps} sweeps" if n_sweeps > 1 else ""
            text = (f"{col} (sweep at lr {lo['config.lr']:g}, {int(lo['config.epochs'])} epochs{which}): "
                    f"{num.rate(lo['timing.samples_per_s'])} samples/s at batch {int(lo['config.batch_size'])} → "
                    f"{num.rate(hi['timing.samples_per_s'])} at batch {int(hi['config.batch_size'])} "
                    f"({num.ratio(hi['timing.samples_per_s'] / lo['timing.samples_per_s'])})")
            beats = g[g["metrics.test_rmse_k"] < g["metrics.persistence_rmse_k"]]
            if not beats.empty and len(beats) < len(g):
                last = beats.iloc[-1]
                text += (f", but the model beats persistence ({g['metrics.persistence_rmse_k'].median():.3g} K) only "
                         f"up to batch {int(last['config.batch_size'])} ({last['metrics.test_rmse_k']:.3g} K; "
                         f"{hi['metrics.test_rmse_k']:.3g} K at batch {int(hi['config.batch_size'])}): fewer steps "
                         "per epoch need a larger learning rate or more epochs")
            items.append(text)
    return ("**Batch size:** " + "; ".join(items) + ".") if items else None


def _problem_text(rows: pd.DataFrame, main: str | None) -> str | None:
    recs = rows[rows["source"] != PUBLISHED].dropna(subset=["samples_per_s"])
    others = [p for p in recs["problem"].unique() if p != main]
    if not others:
        return None
    items = []
    for problem in others:
        for group, g in recs.assign(group=recs.apply(_group, axis=1)).groupby("group", sort=False):
            here = g[g["problem"] == problem]
            base = g[g["problem"] == main]
            if here.empty:
                continue
            size = here["train_samples"].dropna()
            base_size = base["train_samples"].dropna()
            scale = (f" ({int(size.iloc[0]):,} training samples, {size.iloc[0] / base_size.iloc[0]:.3g}x the "
                     f"{main}'s)" if len(size) and len(base_size) else "")
            best = here.groupby("column", sort=False)["samples_per_s"].max()
            text = f"{problem}{scale} on {group}: " + ", ".join(f"{c} {num.rate(v)} samples/s" for c, v in best.items())
            ratio = _gpu_cpu_rate(here)
            if ratio is not None:
                text += f"; GPU over the same machine's CPU {num.ratio(ratio)} in samples/s (fastest setting of each)"
                base_ratio = _gpu_cpu_rate(base)
                if base_ratio is not None:
                    text += f" against {num.ratio(base_ratio)} on the {main}"
            items.append(text)
    return ("**Problem size:** " + "; ".join(items) + ".") if items else None


def _gpu_cpu_rate(rows: pd.DataFrame) -> float | None:
    cpu, gpu = rows[rows["device"] == "CPU"], rows[rows["device"] != "CPU"]
    if cpu.empty or gpu.empty:
        return None
    return float(gpu["samples_per_s"].max() / cpu["samples_per_s"].max())


def _skill_text(frames: list[tuple[pd.DataFrame, str]], main: str | None) -> str | None:
    """Test RMSE against persistence and climatology per source, on ``main`` (or the source's own most
    common problem where it has no run of ``main``)."""
    items = []
    for df, source in frames:
        runs = compared_runs(df, source, stopped_early=True)
        if runs.empty or runs["test_rmse_k"].isna().all():
            continue
        runs = runs.dropna(subset=["test_rmse_k"])
        problem = main if (runs["problem"] == main).any() else runs["problem"].mode().iloc[0]
        runs = runs[runs["problem"] == problem]
        pers, clim = runs["persistence_rmse_k"].median(), runs["climatology_rmse_k"].median()
        both = int(((runs["test_rmse_k"] < runs["persistence_rmse_k"]) &
                    (runs["test_rmse_k"] < runs["climatology_rmse_k"])).sum())
        where = "" if problem == main else f" [{problem}]"
        items.append(f"{SOURCE_WORDS[source]}{where}: test RMSE {runs['test_rmse_k'].min():.3g}-{runs['test_rmse_k'].max():.3g} K "
                     f"(median {runs['test_rmse_k'].median():.3g} K) over {_n(len(runs), 'run')}, against persistence "
                     f"{pers:.3g} K and climatology {clim:.3g} K on the same hours; {both} of {len(runs)} beat both "
                     f"(median MSE skill score against persistence "
                     f"{(1 - runs['test_rmse_k'] ** 2 / runs['persistence_rmse_k'] ** 2).median():.2f}; above 0 is better)")
    return (f"**Skill** ({main}): " + "; ".join(items) + ".") if items else None


def _missing(records: pd.DataFrame | None, reference: pd.DataFrame | None, rows: pd.DataFrame) -> list[str]:
    own = rows[rows["source"] == MEASURED] if not rows.empty else rows
    out = []
    if records is None or records.empty:
        out.append("no run records of your own: run the series (`lstmnb notebooks run --profile cpu`, then 04 and "
                   "05 on GPU machines) and point `results_paths` at the results")
    else:
        if own.empty or not (own["device"] == "CPU").any():
            out.append("no CPU runs measured here: run 03 (`lstmnb notebooks run --profile cpu --only 03`)")
        if own.empty or not (own["device"] != "CPU").any():
            note = " (the GPU rows shown are lstmnb's reference records)" if reference is not None and not reference.empty else ""
            out.append(f"no GPU runs measured here{note}: run 04 on a GPU (`--profile colab-t4` or `carc-a100`)")
        if own.empty or not own["like_for_like"].astype(bool).any():
            out.append("no run of the published setting on the DataLoader path for the published problem here: the "
                       "`cpu` profile's 03 times it (one run: `lstmnb train --preset published --epochs 15`)")
    multi = False
    for df in (records, reference):
        if df is not None and not df.empty and "world_size" in df:
            multi |= bool(((column(df, "status") == "ok") & (pd.to_numeric(df["world_size"], errors="coerce") >= 2)).any())
    if not multi:
        out.append("no multi-GPU records: run 05 on a node with 2+ GPUs (`sbatch carc/ddp_single_node.sbatch`)")
    gpu_rows = rows[rows["device"] != "CPU"] if not rows.empty else rows
    if not gpu_rows.empty and knob_effects(rows, "cuda_graph").empty and (gpu_rows["source"] != PUBLISHED).any():
        out.append("no CUDA graph pair: time `lstmnb train --device cuda --cuda-graph` beside the same run without it")
    return out


def summary_table(rows: pd.DataFrame, problem: str | None, epochs: int | None,
                  notes: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per device column, the user's first: its source and machine, the problem and epochs
    compared (``problem`` and ``epochs`` where the column has them, else its own most common ones),
    like-for-like and fastest seconds with each one's speedup over a CPU (its own machine's; a published
    GPU's over the study's CPU run, which its machine cell names), the fastest setting and its input path,
    best samples/s, median test RMSE. Figures are text as the report writes them (``labels``); '—' where
    a figure does not exist; a published device with a note (``notes``, by device) carries its mark."""
    if rows.empty:
        return pd.DataFrame()
    notes = notes or {}
    speed = own_cpu_speedups(rows, problem, epochs)
    out = []
    for col, g in rows.groupby("column", sort=False):
        at = g[(g["problem"] == problem) & (g["epochs"] == epochs)]
        if at.empty:  # a column with other runs only: its own problem and epochs, and no speedup
            own = main_problem(g)
            at = g[(g["problem"] == own) & (g["epochs"] == comparison_epochs(g, own))]
        best = at.loc[at["seconds"].idxmin()]
        lfl = at[at["setting"] == LIKE_FOR_LIKE]["seconds"]
        mine = speed[speed["column"] == col]
        x_lfl = mine[mine["setting"] == LIKE_FOR_LIKE]["x_own_cpu"]
        x_fast = mine[mine["setting"] == FASTEST]["x_own_cpu"]
        if x_fast.empty:  # one setting each side: fastest against fastest is that setting
            x_fast = x_lfl if len(at) == 1 else x_fast
        cross = not mine.empty and not bool(mine["same_machine"].iloc[0])
        rate = at["samples_per_s"].max() if "samples_per_s" in at else None
        rmse = at["test_rmse_k"].median() if "test_rmse_k" in at else None
        setting, _, path = best["setting"].rpartition(" · ")
        mark = NOTE_MARK if best["source"] == PUBLISHED and best["device"] in notes else ""
        out.append({
            "device column": col + mark, "source": best["source"], "machine": best["machine"] or "—",
            "problem": best["problem"], "epochs": int(best["epochs"]),
            "like for like s": num.figure(lfl.min()) if len(lfl) else "—",
            "x CPU, like for like": num.ratio(x_lfl.iloc[0]) if len(x_lfl) else "—",
            "fastest s": num.figure(best["seconds"]), "fastest setting": setting, "input": path,
            "x CPU, fastest of each": num.ratio(x_fast.iloc[0]) if len(x_fast) else "—",
            "x CPU: over": over_which_cpu(not cross, best["source"]) if not mine.empty else "—",
            "best samples/s": int(round(rate)) if pd.notna(rate) else "—",
            "test RMSE K": round(float(rmse), 3) if pd.notna(rmse) else "—",
        })
    table = pd.DataFrame(out)
    rank = {s: i for i, s in enumerate((MEASURED, REFERENCE, PUBLISHED))}
    table = table.iloc[sorted(range(len(table)), key=lambda i: rank[table["source"].iloc[i]])]
    return table.set_index("device column")


def findings(records: pd.DataFrame | None, published: dict[str, Any] | None = None,
             reference: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """The findings under the first screen: (Markdown bullets, small table) from the user's ``records``,
    the published figures (``load_published()``, or None to leave them out) and lstmnb's ``reference``
    records (or None).

    The bullets say which devices and machines were found (skipped ones as skipped), what CUDA graphs, batch size
    and problem size change (where records have
    them), the model's skill against the baselines, what is missing with the command that fills it, and
    the notes of the published devices shown (the T4's). The table has one row per device column.
    """
    rows = comparison_rows(records, reference, published)
    frames = [(records, MEASURED), (reference, REFERENCE)]
    lines = [_found(records, reference, published)]
    problem = main_problem(rows)
    epochs = comparison_epochs(rows, problem) if problem else None
    if not rows.empty:
        lines += [_graph_text(rows), _problem_text(rows, problem)]  # why a GPU is launch-bound: the first screen
    lines += [_batch_text(frames), _skill_text(frames, problem)]
    missing = _missing(records, reference, rows)
    if missing:
        lines.append("**Missing:** " + "; ".join(missing) + ".")
    shown = set(rows.loc[rows["source"] == PUBLISHED, "device"]) if not rows.empty else set()
    notes = device_notes(published, shown) if published is not None and shown else {}
    lines += [f"*{note}*" for note in notes.values()]
    paragraph = "\n".join(f"- {line}" for line in lines if line)
    table = summary_table(rows, problem, epochs, notes)
    return paragraph, table
