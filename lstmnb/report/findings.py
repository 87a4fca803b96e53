"""The answer up front: a short paragraph (Markdown bullets) and a small table, built from the records,
that open 06_analysis. Every number in them comes from the comparison rows (``compare``), the
records, or the published figures, and names its source; what the records cannot answer is listed
with what to run."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .compare import (
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM_LABEL,
    comparison_epochs,
    comparison_rows,
    compared_runs,
    knob_effects,
    main_problem,
    speedups,
)
from .devices import column
from .provenance import machines_table, with_columns
from .published import MEASURED, PUBLISHED, REFERENCE


def _s(seconds: float) -> str:
    return f"{seconds:.3g} s"


def _rate(value: float) -> str:
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if value >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.3g}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _x(ratio: float) -> str:
    return f"{ratio:.3g}x"


def _group(row: pd.Series) -> str:
    """Runs compared as 'the same machine': a machine of one source; the published table as one group."""
    return PUBLISHED if row["source"] == PUBLISHED else f"{row['machine']} ({row['source']})"


def _found(records: pd.DataFrame | None, reference: pd.DataFrame | None, published: dict | None) -> str:
    parts = []
    if records is not None and not records.empty:
        machines = machines_table(records)
        by_host = machines.groupby("machine", sort=False)["device"].apply(lambda d: ", ".join(d))
        where = "; ".join(f"`{host}` ({devices})" for host, devices in by_host.items())
        status = column(records, "status")
        text = f"{_n(len(records), 'record')} measured here on {_n(len(by_host), 'machine')}: {where}"
        skipped = records[status == "skipped"]
        if not skipped.empty:
            reasons = column(skipped, "reason").fillna("no reason").value_counts()
            text += f"; {len(skipped)} skipped ({'; '.join(f'{r} x{n}' for r, n in reasons.head(2).items())})"
        diverged = records[status == "diverged"]
        if not diverged.empty:  # a run whose loss or forecast went non-finite: an outcome, never a figure
            text += f"; {len(diverged)} diverged (their reason says at which epoch and step, and what to try)"
        parts.append(text)
    else:
        parts.append("no run records of your own")
    if reference is not None and not reference.empty:
        ref = machines_table(reference, REFERENCE)
        parts.append(f"shown beside them: lstmnb's reference records ({', '.join(ref['device'])} on "
                     f"`{ref['machine'].iloc[0]}`, {ref['dates'].iloc[0]}, lstmnb {ref['lstmnb'].iloc[0]})")
    if published is not None:
        devices = list(published["era5_lstm_gpu_benchmark"]["epochs"][5])
        parts.append(f"the published figures ({', '.join(devices)})")
    return "**Found:** " + "; ".join(parts) + "."


def _like_for_like(rows: pd.DataFrame, epochs: int | None) -> str | None:
    lfl = rows[rows["like_for_like"].astype(bool) & (rows["epochs"] == epochs)].sort_values("seconds")
    if lfl.empty:
        return None
    items = ", ".join(f"{c} {_s(s)}" for c, s in zip(lfl["column"], lfl["seconds"]))
    return f"**Like for like** ({LIKE_FOR_LIKE}, {epochs} epochs of the published problem): {items}."


def fastest(rows: pd.DataFrame, problem: str | None, epochs: int | None) -> pd.DataFrame:
    """The fastest row per device column at ``problem`` and ``epochs``."""
    at = rows[(rows["problem"] == problem) & (rows["epochs"] == epochs)]
    if at.empty:
        return at
    return at.loc[at.groupby("column", sort=False)["seconds"].idxmin()]


def _fastest_text(best: pd.DataFrame, epochs: int | None) -> str | None:
    best = best[best["source"] != PUBLISHED]
    if best.empty:
        return None
    items = "; ".join(f"{r['column']}: {_s(r['seconds'])} with {r['setting']}" for _, r in best.iterrows())
    return f"**Fastest setting per device** ({epochs} epochs): {items}."


def gpu_over_cpu(rows: pd.DataFrame, problem: str | None, epochs: int | None) -> pd.DataFrame:
    """Per machine (the published table counting as one), each GPU column over that machine's CPU:
    at the published setting on the DataLoader path, and fastest setting against fastest setting."""
    at = rows[(rows["problem"] == problem) & (rows["epochs"] == epochs)].copy()
    if at.empty:
        return pd.DataFrame()
    at["group"] = at.apply(_group, axis=1)
    out = []
    for group, g in at.groupby("group", sort=False):
        cpu = g[g["device"] == "CPU"]
        if cpu.empty:
            continue
        cpu_lfl = cpu[cpu["setting"] == LIKE_FOR_LIKE]["seconds"]
        for col, gpu in g[g["device"] != "CPU"].groupby("column", sort=False):
            gpu_lfl = gpu[gpu["setting"] == LIKE_FOR_LIKE]["seconds"]
            fast_gpu, fast_cpu = gpu.loc[gpu["seconds"].idxmin()], cpu.loc[cpu["seconds"].idxmin()]
            out.append({"group": group, "column": col, "cpu column": cpu["column"].iloc[0],
                        "published setting": cpu_lfl.min() / gpu_lfl.min() if len(cpu_lfl) and len(gpu_lfl) else None,
                        "fastest vs fastest": fast_cpu["seconds"] / fast_gpu["seconds"],
                        "gpu setting": fast_gpu["setting"], "cpu setting": fast_cpu["setting"]})
    return pd.DataFrame(out)


def _gpu_text(ratios: pd.DataFrame, rows: pd.DataFrame, epochs: int | None) -> str | None:
    if ratios.empty:
        return None
    device = rows.drop_duplicates("column").set_index("column")["device"]
    items = []
    for group, g in ratios.groupby("group", sort=False):
        parts = []
        for _, r in g.iterrows():
            lfl = _x(r["published setting"]) if pd.notna(r["published setting"]) else "no pair"
            fast = "" if group == PUBLISHED else f" (fastest against fastest: {_x(r['fastest vs fastest'])})"
            parts.append(f"{device[r['column']]} {lfl}{fast}")
        where = "published" if group == PUBLISHED else f"`{group}`"
        items.append(f"{where}: {', '.join(parts)}")
    text = (f"**GPU over the same machine's CPU** at the published setting (DataLoader, {epochs} epochs): "
            + "; ".join(items) + ".")
    cpus = rows[rows["like_for_like"].astype(bool) & (rows["epochs"] == epochs) & (rows["device"] == "CPU")]
    if cpus["column"].nunique() > 1:  # the baselines differ: say by how much
        slow, quick = cpus.loc[cpus["seconds"].idxmax()], cpus.loc[cpus["seconds"].idxmin()]
        text += (f" The CPUs differ: at that setting {slow['column']} took {_s(slow['seconds'])} and "
                 f"{quick['column']} {_s(quick['seconds'])} ({_x(slow['seconds'] / quick['seconds'])} faster), "
                 "so speedups over each machine's own CPU do not compare across machines; the speedup chart "
                 "puts every device over one reference.")
    return text


def _in_short(rows: pd.DataFrame, best: pd.DataFrame, sp, epochs: int | None) -> str | None:
    """The headline: the fastest run of all against the reference, and like for like beside the best other."""
    if best.empty:
        return None
    top = best.loc[best["seconds"].idxmin()]
    text = f"**In short:** fastest run: {top['column']}, {_s(top['seconds'])} for {epochs} epochs with {top['setting']}"
    if sp is not None and sp.seconds and top["column"] != sp.reference_column:
        text += (f", {_x(sp.seconds / top['seconds'])} faster than the speedup reference ({sp.reference_column}, "
                 f"{sp.reference_setting}: {_s(sp.seconds)}; the table's `x vs reference`)")
    lfl = rows[rows["like_for_like"].astype(bool) & (rows["epochs"] == epochs)]
    mine, others = lfl[lfl["column"] == top["column"]], lfl[lfl["column"] != top["column"]]
    if not mine.empty and not others.empty:
        rival = others.loc[others["seconds"].idxmin()]
        text += (f". Like for like ({LIKE_FOR_LIKE}) it takes {_s(mine['seconds'].min())}, "
                 f"against {_s(rival['seconds'])} for {rival['column']}, the fastest other device there")
    return text + "."


def _graph_text(rows: pd.DataFrame) -> str | None:
    effects = knob_effects(rows, "cuda_graph")
    if effects.empty:
        return None
    items = []
    for col, g in effects.groupby("column", sort=False):
        parts = [f"{_x(r['x faster'])} at {r['without'].replace(' · ', ', ')}"
                 f"{'' if r['problem'] == PUBLISHED_PROBLEM_LABEL else ' [' + r['problem'] + ']'} "
                 f"({_s(r['seconds without'])} → {_s(r['seconds with'])}, {r['epochs']} epochs"
                 f"{'' if r['same otherwise'] else '; the graph run: ' + r['with'].replace(' · ', ', ')})"
                 for _, r in g.sort_values("problem", key=lambda p: p != PUBLISHED_PROBLEM_LABEL).iterrows()]
        items.append(f"{col}: " + "; ".join(parts))
    return "**CUDA graphs** (the same run without and with `--cuda-graph`): " + "; ".join(items) + "."


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
            g = g.sort_values("config.batch_size")
            if len(g) < 2:
                continue
            lo, hi = g.iloc[0], g.iloc[-1]
            text = (f"{col} (sweep at lr {lo['config.lr']:g}, {int(lo['config.epochs'])} epochs): "
                    f"{_rate(lo['timing.samples_per_s'])} samples/s at batch {int(lo['config.batch_size'])} → "
                    f"{_rate(hi['timing.samples_per_s'])} at batch {int(hi['config.batch_size'])} "
                    f"({_x(hi['timing.samples_per_s'] / lo['timing.samples_per_s'])})")
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
            text = f"{problem}{scale} on `{group}`: " + ", ".join(f"{c} {_rate(v)} samples/s" for c, v in best.items())
            ratio = _gpu_cpu_rate(here)
            if ratio is not None:
                text += f"; GPU over CPU {_x(ratio)} in samples/s (fastest of each)"
                base_ratio = _gpu_cpu_rate(base)
                if base_ratio is not None:
                    text += f" against {_x(base_ratio)} on the {main}"
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
        runs = compared_runs(df, source)
        if runs.empty or runs["test_rmse_k"].isna().all():
            continue
        runs = runs.dropna(subset=["test_rmse_k"])
        problem = main if (runs["problem"] == main).any() else runs["problem"].mode().iloc[0]
        runs = runs[runs["problem"] == problem]
        pers, clim = runs["persistence_rmse_k"].median(), runs["climatology_rmse_k"].median()
        both = int(((runs["test_rmse_k"] < runs["persistence_rmse_k"]) &
                    (runs["test_rmse_k"] < runs["climatology_rmse_k"])).sum())
        where = "" if problem == main else f" [{problem}]"
        items.append(f"{source}{where}: test RMSE {runs['test_rmse_k'].min():.3g}-{runs['test_rmse_k'].max():.3g} K "
                     f"(median {runs['test_rmse_k'].median():.3g} K) over {_n(len(runs), 'run')}, against persistence "
                     f"{pers:.3g} K and climatology {clim:.3g} K on the same hours; {both} of {len(runs)} beat both "
                     f"(skill over persistence {1 - runs['test_rmse_k'].median() / pers:.2f})")
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
                       "`cpu` profile's 03 times it (one run: `lstmnb train --input-path dataloader --epochs 15`)")
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


def summary_table(rows: pd.DataFrame, problem: str | None, epochs: int | None, sp) -> pd.DataFrame:
    """One row per device column, the user's first: its source and machine, the problem and epochs
    compared (``problem`` and ``epochs`` where the column has them, else its own most common ones),
    like-for-like and fastest seconds, the fastest setting and its input path, x faster than the
    speedup reference, best samples/s, median test RMSE. '—' where a figure does not exist."""
    if rows.empty:
        return pd.DataFrame()
    out = []
    for col, g in rows.groupby("column", sort=False):
        at = g[(g["problem"] == problem) & (g["epochs"] == epochs)]
        if at.empty:  # a column with other runs only: its own problem and epochs, and no speedup
            own = main_problem(g)
            at = g[(g["problem"] == own) & (g["epochs"] == comparison_epochs(g, own))]
        best = at.loc[at["seconds"].idxmin()]
        lfl = at[at["setting"] == LIKE_FOR_LIKE]["seconds"]
        comparable = sp is not None and sp.seconds and best["problem"] == problem and best["epochs"] == epochs
        rate = at["samples_per_s"].max() if "samples_per_s" in at else None
        rmse = at["test_rmse_k"].median() if "test_rmse_k" in at else None
        setting, _, path = best["setting"].rpartition(" · ")
        out.append({
            "device column": col, "source": best["source"], "machine": best["machine"] or "—",
            "problem": best["problem"], "epochs": int(best["epochs"]),
            "like for like s": round(float(lfl.min()), 3) if len(lfl) else "—",
            "fastest s": round(float(best["seconds"]), 3), "fastest setting": setting, "input": path,
            "x vs reference": round(sp.seconds / best["seconds"], 2) if comparable else "—",
            "best samples/s": int(round(rate)) if pd.notna(rate) else "—",
            "test RMSE K": round(float(rmse), 3) if pd.notna(rmse) else "—",
        })
    table = pd.DataFrame(out)
    rank = {s: i for i, s in enumerate((MEASURED, REFERENCE, PUBLISHED))}
    table = table.iloc[sorted(range(len(table)), key=lambda i: rank[table["source"].iloc[i]])]
    return table.set_index("device column")


def findings(records: pd.DataFrame | None, published: dict[str, Any] | None = None,
             reference: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """The report's answer: (Markdown paragraph, small table) from the user's ``records``, the published
    figures (``load_published()``, or None to leave them out) and lstmnb's ``reference`` records (or None).

    The paragraph says which devices and machines were found, like-for-like seconds, the fastest setting
    per device, GPU over CPU at the published and the fastest setting, what CUDA graphs, batch size and
    problem size change (where records have them), the model's skill against the baselines, and what is
    missing with the command that fills it. The table has one row per device column.
    """
    rows = comparison_rows(records, reference, published)
    frames = [(records, MEASURED), (reference, REFERENCE)]
    lines = [_found(records, reference, published)]
    problem = main_problem(rows)
    epochs = comparison_epochs(rows, problem) if problem else None
    sp = speedups(rows) if not rows.empty else None
    if not rows.empty:
        best = fastest(rows, problem, epochs)
        lines.insert(0, _in_short(rows, best, sp, epochs))
        lines += [_like_for_like(rows, epochs) if problem == PUBLISHED_PROBLEM_LABEL else None,
                  _fastest_text(best, epochs),
                  _gpu_text(gpu_over_cpu(rows, problem, epochs), rows, epochs)]
        lines += [_graph_text(rows), _problem_text(rows, problem)]
    lines += [_batch_text(frames), _skill_text(frames, problem)]
    missing = _missing(records, reference, rows)
    if missing:
        lines.append("**Missing:** " + "; ".join(missing) + ".")
    paragraph = "\n".join(f"- {line}" for line in lines if line)
    table = summary_table(rows, problem, epochs, sp) if sp is not None else pd.DataFrame()
    return paragraph, table
