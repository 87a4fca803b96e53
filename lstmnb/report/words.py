"""The report's sentences that stand on their own: the glossary (every word the report uses, defined once:
notebook 06 ends with it and README carries the same text, a test holds the two together), and each notebook's
closing "What this showed", written from that notebook's own results (records and the tables made from them),
never fixed text, with a pointer to the next notebook. One function per notebook; each takes what its notebook
already holds and returns Markdown.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from . import labels as num
from .compare import TIED_WITHIN
from .repeats import REPEATS_DISAGREE

# --- the glossary -------------------------------------------------------------------------------------------

GLOSSARY: dict[str, str] = {
    "published setting": "the study's training setting: a 2-layer LSTM with 64 hidden units, 24 h window, 1 h "
                         "lead, batch 128, Adam at 1e-3, fp32, a DataLoader with 2 workers (`--preset published`).",
    "published problem": "the study's data and split: its real ERA5 2 m temperature at 40N and 20N, 280E, hourly, "
                         "trained on 2020 and tested on 2021-01..06.",
    "like for like": "the published setting on the published problem, on the DataLoader path as the study ran it "
                     "(2 workers started afresh each epoch, pageable memory): the only runs whose seconds stand "
                     "beside the study's; anything else is shown under its own labels.",
    "fast path / fast input": "the training set held as tensors on the device and batches drawn by shuffled "
                              "index, with no per-sample Python: lstmnb's faster input path.",
    "DataLoader path": "a per-sample PyTorch `Dataset` read through a `DataLoader` with worker processes, as "
                       "the study fed its model.",
    "blend": "lstmnb's reported forecast: per point, a convex mix of the network, persistence and climatology, "
             "its weights fitted on the validation part (never worse than persistence there).",
    "cycles input": "an extra input of the fitted seasonal and diurnal cycle of each point, learned from the "
                    "training part (its seasonal part only where training covers a year; the diurnal part always).",
    "x CPU": "a GPU's speedup: the seconds of a CPU doing the same work divided by the GPU's; every label says "
             "which CPU. It is the GPU's own machine's where the records hold one; every published GPU is put over "
             "the study's one CPU run, whose platform the study does not state.",
    "persistence": "the baseline forecast that the temperature stays what it was at the last observed hour.",
    "climatology": "the baseline forecast of the usual temperature for that date and hour (29 February: 28 "
                   "February's), from the training part (the hour-of-day mean when training is shorter than a year).",
    "MSE skill score": "1 - MSE_model / MSE_baseline: 0 is as good as the baseline, 1 is perfect, below 0 is "
                       "worse than the baseline.",
    "warm-up epoch": "the first epoch of a run (and of each resumption of it), which also pays one-off costs "
                     "(memory, kernels, worker start); each epoch of the record says whether it was one (`warmup`); "
                     "steady figures leave them out, the published table's totals include them.",
    "samples/s": "training samples processed per second of training (an epoch's samples over its seconds).",
    "MFU": "model FLOPs utilisation: the model's FLOPs per second over this machine's own measured matrix-"
           "multiply rate (how much of the hardware the training step uses).",
    "strong scaling": "a fixed global batch split over N workers; speedup = t1 / tN.",
    "weak scaling": "each worker keeps its batch, so the global batch grows N-fold; scaled speedup = "
                    "throughput at N / throughput at 1.",
    "efficiency": "speedup / N: 1.0 means N workers are N times faster.",
    "all-reduce": "the collective that sums (then averages) every rank's gradients so all ranks take the same "
                  "step; ring all-reduce moves 2(N-1)K/N values per rank for K parameters.",
    "busbw": "bus bandwidth of an all-reduce, as nccl-tests define it: algbw (bytes / time) x 2(N-1)/N, "
             "comparable across N.",
    "CUDA graph": "a GPU training step recorded once and replayed with one launch, instead of launching each of "
                  "its kernels from Python every step (`--cuda-graph`).",
    "launch-bound": "a step whose time is set by the CPU launching many small kernels, not by the GPU's "
                    "arithmetic: a faster GPU barely helps, a CUDA graph does.",
    "synthetic vs real data": "real: the study's ERA5 values, shipped with lstmnb (the default); synthetic: "
                              "lstmnb's made-up weather of the same layout, for areas and region mode, always "
                              "labelled synthetic.",
    "reference records": "real run records lstmnb wrote on NVIDIA H100s (another machine: on the study's real data "
                         "its setting, the recommended setting and the from-scratch engines; on synthetic data the "
                         "former one-layer setting), shipped with the package and always labelled as such.",
    "measured here / published": "measured here: your own run records; published: the study's figures as it "
                                 "printed them (one run each).",
    "repeats": f"runs of one setting timed several times, alternated; tables show their median and mark rows "
               f"whose repeats differ by more than {REPEATS_DISAGREE:.0%} or that ran beside busy processes.",
    "flagged": "a published figure whose note says it cannot be what it says (the T4's CPU-like 10- and 15-epoch "
               "times, the P100's equal 5- and 10-epoch times): named beside the study's ranking, never ranked or "
               "called tied.",
    "tied": f"two single-run times within {TIED_WITHIN:.0%} of each other: within run-to-run noise, so neither is "
            "called faster.",
}


def glossary_markdown() -> str:
    """The glossary as a Markdown list, one term a line (06's end and README's Glossary section)."""
    return "\n".join(f"- **{term}**: {text}" for term, text in GLOSSARY.items())

# --- each notebook's "What this showed" ---------------------------------------------------------------------

NEXT = {
    "02": "Next, **03** times this training on your CPU with the study's exact setting, beside the study's CPU.",
    "03": "Next, **04** and **05** run the same training on a GPU and over several workers; **06** puts every "
          "device side by side.",
    "06": "Next, **07** writes the LSTM from its equations and shows where the parallel speed comes from.",
    "07": "Next, **08** forecasts a whole area, where neighbours and sharding over ranks come in.",
    "08": "This is the last notebook; **06** is the place to compare machines once you have records from several.",
}


def _heading(lines: list[str], nb: str) -> str:
    body = "\n".join(f"- {line}" for line in lines if line)
    return f"## What this showed\n{body}\n\n{NEXT[nb]}"


def _epochs(n) -> str:
    return f"{int(n)} epoch{'' if int(n) == 1 else 's'}"


def _k(value: float) -> str:
    return f"{value:.2f} K"


def model_conclusion(record: dict[str, Any], skill: pd.DataFrame | None = None) -> str:
    """02: the model's size, how its training ended, its test error against both baselines, and (with the
    skill table) at which leads it beats persistence at every point."""
    m, cfg, model = record.get("metrics") or {}, record.get("config") or {}, record.get("model") or {}
    lines = []
    params = model.get("parameters")
    lines.append(f"The forecaster is a {cfg.get('layers', 1)}-layer {str(cfg.get('cell', 'lstm')).upper()} with "
                 f"{cfg.get('hidden')} hidden units" + (f" ({params:,} parameters)" if params else "")
                 + f", fed {cfg.get('window')} h windows.")
    if record.get("status") == "ok" and m.get("test_rmse_k") is not None:
        ran = m.get("epochs_run")
        timing = record.get("timing") or {}
        train_s, eval_s = timing.get("train_s"), timing.get("eval_s")
        how = ("stopped early: validation stopped improving" if m.get("stopped_early")
               else "the cap" if ran == cfg.get("epochs") else None)
        spent = ""
        if train_s:
            spent = f" in {train_s:.1f} s of training steps" + (f" ({train_s + eval_s:.1f} s with the validation passes)"
                                                                 if eval_s else "")
        lines.append(f"Training ran {ran} of at most {cfg.get('epochs')} epochs{spent}" + (f" ({how})" if how else "") + ".")
        rmse, pers, clim = m["test_rmse_k"], m.get("persistence_rmse_k"), m.get("climatology_rmse_k")
        verdict = ("beats" if pers is not None and rmse < pers else "does not beat")
        lines.append(f"On the test part its reported forecast errs by {_k(rmse)} RMSE at a {cfg.get('lead_hours', 1)} h "
                     f"lead: it {verdict} persistence ({_k(pers)})" + (f" and climatology ({_k(clim)})" if clim else "")
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
            lines.append(f"{path} path: {s.iloc[0]:.1f} s for {_epochs(s.index[0])} to {s.iloc[-1]:.1f} s for "
                         f"{_epochs(s.index[-1])}, about {per:.2f} s per extra epoch"
                         + rough((path, s.index[0]), (path, s.index[-1])) + ".")
    if "fast" in by_path and "dataloader" in by_path:
        both = pd.concat([by_path["fast"], by_path["dataloader"]], axis=1, keys=["fast", "dataloader"]).dropna()
        if not both.empty:
            e = both.index.max()
            ratio = both.loc[e, "dataloader"] / both.loc[e, "fast"]
            lines.append(f"At {_epochs(e)} the per-sample DataLoader path the study timed takes {ratio:.2f}x the "
                         "time of the fast path on the same work" + rough(("fast", e), ("dataloader", e)) + ".")
    if published_cpu is not None and "dataloader" in by_path:
        common = [e for e in by_path["dataloader"].index if e in published_cpu.dropna().index]
        if common:
            e = max(common)
            mine, theirs = by_path["dataloader"][e], float(published_cpu[e])
            lines.append(f"Against the study's CPU at {_epochs(e)} (DataLoader path, the same workload): {mine:.1f} s "
                         f"here against {theirs:.1f} s there, {theirs / mine:.2f}x as fast" + rough(("dataloader", e)) + ".")
    marked = int((timings["check"] != "").sum())
    lines.append(f"{marked} of {len(timings)} timing row(s) are marked as unsure (repeats that disagree or busy "
                 "cores): run 03 again on a quiet machine before quoting them."
                 if marked else f"No timing row is marked: the {int(timings['repeats'].min())} repeats of each agree "
                 "and no run shared its cores.")
    if verdict:
        lines.append(verdict)
    return _heading(lines, "03")


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
        lines.append(f"The study's published table at {_epochs(comparison.epochs)} ranks "
                     + ", ".join(ranked["device"]) + " (one run each, not measured here)"
                     + (f"; {' and '.join(left)} are left out as flagged" if left else "") + ".")
    n = 0 if records is None else len(records)
    lines.append(f"{n} record(s) of your own went into this page.")
    return _heading(lines, "06")


def scratch_conclusion(table: pd.DataFrame) -> str:
    """07: the fastest version that ran, how far each step of parallelism took it, what was skipped."""
    ok = table[table["status"] == "ok"] if "status" in table else table
    lines = []
    if ok.empty:
        return _heading(["No version finished."], "07")
    best = ok["run_s"].idxmin()
    lines.append(f"Fastest here: `{best}`, {num.seconds(ok.loc[best, 'run_s'])}"
                 + (f", {ok.loc[best, 'speedup_vs_loops']:.0f}x the Python loops" if "speedup_vs_loops" in ok else "")
                 + ".")
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
