"""Each notebook's closing "What this showed", written from its own numbers (records, or the tables the notebook
made from them), never fixed text: a list of findings and the next notebook's question."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import labels as num
from .labels import REFERENCE_LABEL, STUDY_SETTING

NEXT = {
    "02": "Next, **03** times this training on your CPU with the study's exact setting, beside the study's CPU.",
    "03": "Next, **04** and **05** run the same training on a GPU and over several workers; **06** puts every "
          "device side by side.",
    "04": "Next, **05** splits each batch among several processes (data parallelism) and measures what the "
          "gradient all-reduce costs.",
    "05": "Next, **06** puts every run of the series beside the study's published table.",
    "06": "Next, **07** writes the LSTM from its equations and shows where the parallel speed comes from.",
    "07": "Next, **08** forecasts a whole area, where neighbours and sharding over ranks come in.",
    "08": "This is the last notebook; **06** is the place to compare machines once you have records from several.",
}


def _heading(lines: list[str], nb: str) -> str:
    return "## What this showed\n" + "\n".join(f"- {line}" for line in lines if line) + f"\n\n{NEXT[nb]}"


def model_conclusion(record: dict[str, Any], skill: pd.DataFrame | None = None) -> str:
    """02: the model's size, how its training ended, its test error against both baselines, and (with the
    skill table) at which leads it beats persistence at every point."""
    m, cfg, model = record.get("metrics") or {}, record.get("config") or {}, record.get("model") or {}
    params = model.get("parameters")
    lines = [f"The forecaster is a {cfg.get('layers', 1)}-layer {str(cfg.get('cell', 'lstm')).upper()} with "
             f"{cfg.get('hidden')} hidden units" + (f" ({params:,} parameters)" if params else "")
             + f", fed {cfg.get('window')} h windows."]
    if record.get("status") == "ok" and m.get("test_rmse_k") is not None:
        ran = m.get("epochs_run")
        timing = record.get("timing") or {}
        train_s, eval_s = timing.get("train_s"), timing.get("eval_s")
        how = ("stopped early: validation stopped improving" if m.get("stopped_early")
               else "the cap" if ran == cfg.get("epochs") else None)
        spent = (f" in {train_s:.1f} s of training steps" + (f" ({train_s + eval_s:.1f} s with the validation "
                                                              "passes)" if eval_s else "")) if train_s else ""
        lines.append(f"Training ran {ran} of at most {cfg.get('epochs')} epochs{spent}" + (f" ({how})" if how else "") + ".")
        rmse, pers, clim = m["test_rmse_k"], m.get("persistence_rmse_k"), m.get("climatology_rmse_k")
        verdict = ("beats" if pers is not None and rmse < pers else "does not beat")
        lines.append(f"On the test part its reported forecast errs by {rmse:.2f} K RMSE at a {cfg.get('lead_hours', 1)} h "
                     f"lead: it {verdict} persistence ({pers:.2f} K)" + (f" and climatology ({clim:.2f} K)" if clim else "")
                     + (f", an MSE skill score of {m['mse_skill_vs_persistence']:.2f} against persistence"
                        if m.get("mse_skill_vs_persistence") is not None else "") + ".")
    else:
        lines.append(f"The fit did not finish ({record.get('status')}: {record.get('reason')}).")
    if skill is not None and not skill.empty and "mse_skill_vs_persistence" in skill:
        per_point = skill.drop(index=[p for p in skill.index.get_level_values(0).unique() if str(p).startswith("all ")],
                               level=0, errors="ignore")
        leads = sorted(set(skill.index.get_level_values("lead_hours")))
        beat = [lead for lead in leads
                if (per_point.xs(lead, level="lead_hours")["mse_skill_vs_persistence"] > 0).all()]
        worst = skill["mse_skill_vs_persistence"].idxmin()
        lines.append(f"Across leads ({', '.join(f'{x} h' for x in leads)}), it beats persistence at every point at "
                     + (", ".join(f"{x} h" for x in beat) if beat else "no lead")
                     + f"; its weakest score is {skill.loc[worst, 'mse_skill_vs_persistence']:.2f} "
                     f"({worst[0]}, {worst[1]} h).")
    return _heading(lines, "02")


def cpu_baseline_conclusion(timings: pd.DataFrame, published_cpu: pd.Series | None = None,
                            verdict: str | None = None) -> str:
    """03: how the seconds grow with epochs on each input path, the DataLoader path against the fast path,
    this CPU against the study's CPU at the same epochs, which rows are marked, and the replication."""
    if timings.empty:
        return _heading(["No timed run finished."], "03")
    lines = []
    pub = timings[timings["setting"] == "published"]
    by_path = {p: g.set_index("epochs")["train s (median)"] for p, g in pub.groupby("input", sort=False)}
    unsure = {(r["input"], r["epochs"]) for _, r in pub.iterrows() if r["check"]}

    def rough(*keys) -> str:
        return " (from rows marked unsure: a rough figure)" if any(k in unsure for k in keys) else ""

    for path, s in by_path.items():
        if len(s) > 1:
            per = (s.iloc[-1] - s.iloc[0]) / (s.index[-1] - s.index[0])
            lines.append(f"{path} path: {s.iloc[0]:.1f} s for {num.count(s.index[0], 'epoch')} to {s.iloc[-1]:.1f} s for "
                         f"{num.count(s.index[-1], 'epoch')}, about {per:.2f} s per extra epoch"
                         + rough((path, s.index[0]), (path, s.index[-1])) + ".")
    if "fast" in by_path and "dataloader" in by_path:
        both = pd.concat([by_path["fast"], by_path["dataloader"]], axis=1, keys=["fast", "dataloader"]).dropna()
        if not both.empty:
            e = both.index.max()
            ratio = both.loc[e, "dataloader"] / both.loc[e, "fast"]
            lines.append(f"At {num.count(e, 'epoch')} the per-sample DataLoader path the study timed takes {ratio:.2f}x the "
                         "time of the fast path on the same work" + rough(("fast", e), ("dataloader", e)) + ".")
    if published_cpu is not None and "dataloader" in by_path:
        common = [e for e in by_path["dataloader"].index if e in published_cpu.dropna().index]
        if common:
            e = max(common)
            mine, theirs = by_path["dataloader"][e], float(published_cpu[e])
            lines.append(f"Against the study's CPU at {num.count(e, 'epoch')} (DataLoader path, the same workload): {mine:.1f} s "
                         f"here against {theirs:.1f} s there, {theirs / mine:.2f}x as fast" + rough(("dataloader", e)) + ".")
    marked = int((timings["check"] != "").sum())
    lines.append(f"{marked} of {len(timings)} timing row(s) are marked as unsure (repeats that disagree or busy "
                 "cores): run 03 again on a quiet machine before quoting them."
                 if marked else f"No timing row is marked: the {int(timings['repeats'].min())} repeats of each agree "
                 "and no run shared its cores.")
    return _heading([*lines, verdict], "03")  # _heading leaves out a verdict of None


def _fmt(v: float, digits: int = 2) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:,.{digits}f}"


def single_gpu_conclusion(steps_table: pd.DataFrame, fit: dict[str, float], reference: pd.DataFrame, device: str,
                          sync: pd.DataFrame | None = None) -> str:
    """04: its own step times against the batch, the same step timed without and with synchronising (``sync``:
    one row, those two columns in ms) and the reference records' eager and graph step (``reference``:
    ``notebooks.lessons.reference_step_table``)."""
    small, big = steps_table.index.min(), steps_table.index.max()
    lines = [
        f"On this machine ({device}) one training step of the study's model took "
        f"{_fmt(steps_table.loc[small, 'step ms'])} ms at batch {small} and {_fmt(steps_table.loc[big, 'step ms'])} ms "
        f"at batch {big}: {big // small}x the samples for "
        f"{_fmt(steps_table.loc[big, 'step ms'] / steps_table.loc[small, 'step ms'], 1)}x the time.",
        f"Every step paid about {_fmt(fit['fixed_ms'])} ms whatever its batch "
        f"({_fmt(100 * fit['fixed_share_smallest'], 0)}% of the smallest batch's step), and "
        f"{_fmt(fit['per_sample_us'])} µs per sample on top. The useful FLOP rate was "
        f"{_fmt(steps_table.loc[small, 'GFLOP/s'], 1)} GFLOP/s at batch {small}, "
        f"{_fmt(steps_table.loc[big, 'GFLOP/s'], 1)} at batch {big} and at best "
        f"{_fmt(steps_table['GFLOP/s'].max(), 1)} (batch {steps_table['GFLOP/s'].idxmax()}).",
    ]
    flagged = int((steps_table["flag"] != "").sum())
    if flagged:
        lines.append(f"{flagged} of {len(steps_table)} rows are flagged (see the table): read them as rough.")
    if not reference.empty and STUDY_SETTING in reference.index.get_level_values(0):
        study = reference.xs(STUDY_SETTING, level=0)
        if {True, False} <= set(study.index.get_level_values(0)):
            eager, graph = study.xs(False, level=0), study.xs(True, level=0)
            b = min(set(graph.index) & set(eager.index))
            lines.append(
                f"On the reference H100 ({REFERENCE_LABEL}) an eager step at batch {b} took "
                f"{_fmt(eager.loc[b, 'step ms'], 3)} ms and the same step replayed as a CUDA graph "
                f"{_fmt(graph.loc[b, 'step ms'], 3)} ms: launches, not arithmetic, set a small LSTM's step time "
                f"on a GPU.")
    if sync is not None and not sync.empty:
        no_sync, synced = (float(v) for v in sync.iloc[0, :2])
        lines.append(f"Timed without synchronising, a step ({sync.index[0]}) took {_fmt(no_sync, 3)} ms; read "
                     f"after the device had finished, {_fmt(synced, 3)} ms"
                     + (": on a CPU both read finished work." if not str(device).startswith("cuda") else
                        ": the unsynchronised clock counted the launches, not the work."))
    return _heading(lines, "04")


def multi_gpu_conclusion(scaling_table: pd.DataFrame, allreduce_table: pd.DataFrame, ring: pd.DataFrame | None = None,
                         amdahl: tuple[dict[str, float], pd.DataFrame] | None = None) -> str:
    """05: its own scaling and all-reduce tables, the ring by hand (one row per ranks) and Amdahl's law
    (``notebooks.amdahl.amdahl_table``'s output)."""
    lines = []
    if ring is not None and not ring.empty:
        for n, r in ring.iterrows():
            lines.append(f"The ring all-reduce by hand on {n} ranks gave `dist.all_reduce`'s sums (largest "
                         f"difference {r['max |ring - all_reduce|']:.1e}); each rank sent {int(r['bytes sent per rank']):,} "
                         f"bytes against 2(N-1)K/N x 4 = {r['2(N-1)K/N x 4 bytes']:,.0f}, in {_fmt(r['ring us'], 0)} µs "
                         f"against {_fmt(r['all_reduce us'], 0)} µs for `dist.all_reduce` (medians).")
    if amdahl is not None and amdahl[0]["serial share"] >= 1:
        lines.append("Amdahl's law from these runs: the ranks were no faster than one rank (serial share s = 1), "
                     "so the law allows no speedup on any number of ranks here; read the flags above.")
    elif amdahl is not None:
        fit, table = amdahl
        far = table.index.max()
        lines.append(f"Amdahl's law from these runs: a serial share s = {_fmt(fit['serial share'])} of the "
                     f"one-rank step (the all-reduce {_fmt(fit['comm share of s'])} of it) allows at most "
                     f"{_fmt(fit['bound'], 1)}x on any number of ranks; it predicts "
                     f"{_fmt(table.loc[far, 'Amdahl'])}x at {far} ranks, "
                     f"{_fmt(table.loc[far, 'comm growing as N - 1'])}x with the all-reduce growing with them.")
    for mode in ("strong", "weak"):
        if scaling_table.empty or mode not in scaling_table.index.get_level_values(0):
            continue
        g = scaling_table.xs(mode, level=0)
        top = g.index.max()
        row = g.loc[top]
        if np.isfinite(row["speedup"]):
            what = (f"{'speedup' if mode == 'strong' else 'scaled speedup'} {_fmt(row['speedup'])}x, "
                    f"efficiency {_fmt(row['efficiency'])}")
        else:
            what = row["note"] or "no speedup"
        lines.append(f"{mode.capitalize()} scaling to {top} ranks ({row['input path']} input path, "
                     f"per-rank batch {int(row['per-rank batch'])}, {_fmt(row['threads'], 0)} threads in all): "
                     f"{_fmt(row['epoch s'])} s per epoch against {_fmt(g.loc[1, 'epoch s'])} s on one rank; "
                     f"{what}." + (f" Flagged: {row['flag']}." if row["flag"] else ""))
        if mode == "strong" and np.isfinite(row.get("comm ms", np.nan)):
            lines.append(f"Of a {_fmt(row['step ms'])} ms step on {top} ranks, {_fmt(row['comm ms'])} ms "
                         f"({_fmt(row['comm %'], 0)}%) was the gradient all-reduce the backward pass did not hide.")
    if not allreduce_table.empty:
        grad = allreduce_table[allreduce_table["gradients of one step"]]
        big = allreduce_table.loc[allreduce_table["bytes"].idxmax()]
        small = allreduce_table.loc[allreduce_table["bytes"].idxmin()]
        if not grad.empty:
            g = grad.iloc[0]
            lines.append(f"One step's gradients ({grad.index[0]}) took {_fmt(g['time us'], 0)} µs to all-reduce "
                         f"({_fmt(g['busbw GB/s'], 3)} GB/s bus bandwidth); the smallest message ({small.name}) took "
                         f"{_fmt(small['time us'], 0)} µs at {_fmt(small['busbw GB/s'], 4)} GB/s and the largest "
                         f"({big.name}) {_fmt(big['time us'], 0)} µs at {_fmt(big['busbw GB/s'], 3)} GB/s."
                         + (f" Flagged: {g['flag']}; read these times as rough." if g["flag"] else ""))
    return _heading(lines, "05")



def analysis_conclusion(screen, comparison, records: pd.DataFrame | None) -> str:
    """06: what lstmnb's own measurement answered (the first screen's opening sentence), which published
    devices the study's comparison ranks and which it leaves out as flagged, and how many records went in."""
    lines = []
    said = str(getattr(screen, "markdown", "") or "").strip()
    if said:
        lines.append("Our own measurement: " + said.split("\n")[0].split(". ")[0].rstrip(".") + ".")
    table = getattr(comparison, "table", pd.DataFrame())
    if not table.empty:
        at = table[table["epochs"] == comparison.epochs]
        ranked = at[at["rank"].map(lambda r: isinstance(r, int))]
        left = at.drop(ranked.index)["device"].tolist()
        lines.append(f"The study's published table at {num.count(comparison.epochs, 'epoch')} ranks "
                     + ", ".join(ranked["device"]) + " (one run each, not measured here)"
                     + (f"; {' and '.join(left)} are left out as flagged" if left else "") + ".")
    n = 0 if records is None else len(records)
    lines.append(f"{n} record(s) of your own went into this page.")
    return _heading(lines, "06")


def scratch_conclusion(table: pd.DataFrame) -> str:
    """07: the fastest version that ran, how far each step of parallelism took it, what was skipped."""
    ok = table[table["status"] == "ok"] if "status" in table else table
    if ok.empty:
        return _heading(["No version finished."], "07")
    best = ok["run_s"].idxmin()
    lines = [f"Fastest here: `{best}`, {num.seconds(ok.loc[best, 'run_s'])}"
             + (f", {ok.loc[best, 'speedup_vs_loops']:.0f}x the Python loops" if "speedup_vs_loops" in ok else "") + "."]
    if "numpy" in ok.index and "loops" in ok.index:
        gain = ok.loc["loops", "run_s"] / ok.loc["numpy", "run_s"]
        runs = ok.loc["numpy", "run_s_repeats"] if "run_s_repeats" in ok else None
        once = isinstance(runs, (list, tuple)) and len(runs) == 1
        lines.append(f"Vectorising over the batch (`numpy`) alone gave {gain:.1f}x over one sample at a time"
                     + (", from one run per version" if once else "") + "." if gain >= 1
                     else f"Vectorising over the batch (`numpy`) was slower here than one sample at a time "
                          f"({gain:.2f}x the loops' speed)"
                          + (": one run per version of a fraction of a second, which other work on the machine can "
                             "turn round; `scratch_repeats` 3 or more takes medians" if once else "") + ".")
    if "train_loss" in ok:
        spread = ok["train_loss"].max() - ok["train_loss"].min()
        lines.append(f"Every version ends at the same training loss (spread {spread:.1e}): only the time differs.")
    skipped = table.index[table["status"] != "ok"].tolist() if "status" in table else []
    if skipped:
        lines.append(f"Not run here: {', '.join(f'`{v}`' for v in skipped)} (their rows say why).")
    return _heading(lines, "07")


def region_conclusion(skill: pd.DataFrame, memory: pd.DataFrame | None = None,
                      scaling: pd.DataFrame | None = None, data_kind: str | None = None) -> str:
    """08: whether neighbours beat the point model on this area (on synthetic data, said so; models still
    improving at their epoch cap, said so), and what the memory cases measured."""
    lines = []
    col = "MSE skill score vs none"
    where = "this synthetic area and period" if data_kind == "synthetic" else "this area and period"
    if not skill.empty and col in skill:
        models = skill.drop(index=["persistence", "climatology"], errors="ignore")
        for variant, row in models.drop(index=["none"], errors="ignore").iterrows():
            score = row[col]
            lines.append(f"`{variant}` against the point model: MSE skill score {score:.2f} "
                         f"({'better' if score > 0 else 'not better'} on {where}).")
        if {"epochs", "best_epoch"} <= set(models) and len(models) and (models["best_epoch"] == models["epochs"]).all():
            lines.append(f"Every model was still improving at its last epoch (the cap of {int(models['epochs'].max())}): "
                         "a longer run may order them differently; `lstmnb region skill` runs the sizes that mean "
                         "something.")
    if memory is not None and not memory.empty and "measured_bytes" in memory:
        done = memory.dropna(subset=["measured_bytes"])
        if not done.empty:
            big = done.loc[done["cells"].idxmax()]
            lines.append(f"Largest memory case measured: `{big['variant']}` on {int(big['cells'])} cells, "
                         f"{big['measured_bytes'] / 2**20:.0f} MiB.")
    if scaling is not None and not scaling.empty:
        shared = scaling[scaling["mode"] != "one process"]
        withheld = shared[shared["note"].astype(bool)] if "note" in shared else shared.iloc[:0]
        shown = shared.drop(withheld.index).dropna(subset=["speedup"])
        for _, r in shown.iterrows():
            lines.append(f"`{r['mode']}` on {int(r['ranks'])} ranks: {r['speedup']:.2f}x one process of "
                         f"{int(r['threads'])} threads (equal total threads).")
        if len(withheld):
            lines.append(f"{len(withheld)} sharding case(s) print no speed-up ("
                         + withheld["note"].iloc[0].removeprefix("no speed-up: ") + ").")
    return _heading(lines, "08")
