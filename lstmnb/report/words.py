"""The report's sentences, in one home, each written from records, never fixed text: the first screen's
(``first_screen``), the findings under it (``findings``: what was found, what is missing and the command that
fills it), each notebook's closing "What this showed", and the glossary (``glossary.yaml``, README's too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pandas as pd
import yaml

from . import labels as num
from .compare import TIED_WITHIN, comparison_epochs, comparison_rows, main_problem
from .figures import plot_ladder
from .labels import column
from .ladder import fastest, ladder_rows, machine_words, machines, panels, rung_name, seconds_at
from .published import MEASURED, PUBLISHED, device_notes, found, load_published
from .repeats import REPEATS_DISAGREE
from .tables import summary_table

# --- the first screen ---------------------------------------------------------------------------------------

@dataclass
class Screen:
    markdown: str
    figure: Any = None  # a matplotlib Figure, or None without ladder records
    note: str = ""
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)


HOW_TO_GET_GPU = ("No GPU half here: run 04 on a machine with an NVIDIA GPU (`lstmnb bench ladder --device cuda`), "
                  "or show lstmnb's reference records (an H200 and an H100, each with its CPU): `-p reference_records true`.")

def gpu_sentence(m: pd.DataFrame) -> str | None:
    """How much faster the machine's GPU is than its own CPU: on the slowest rungs measured on both (the study's
    code where both ran it) and at each one's fastest step of the study's workload."""
    cpu, gpu = m[(m.device == "cpu") & m.seconds.notna()], m[(m.device == "cuda") & m.seconds.notna()]
    if cpu.empty or gpu.empty:
        return None
    c_r, g_r = int(cpu.rung.min()), int(gpu.rung.min())
    c, g = seconds_at(m, "cpu", c_r), seconds_at(m, "cuda", g_r)
    on = ("on the study's code (rung 0)" if c_r == g_r == 0 else
          f"on the slowest rungs measured on both (CPU rung {c_r}, {rung_name(m, c_r)}; "
          f"GPU rung {g_r}, {rung_name(m, g_r)})")
    text = (f"On {machine_words(m)}, the GPU trains the study's workload ({int(m.epochs.iloc[0])} epochs) "
            f"{c / g:.2g}x as fast as the same machine's CPU {on}: {num.figure(g)} s against {num.figure(c)} s")
    cb, gb = fastest(m, "cpu"), fastest(m, "cuda")
    if cb and gb and (cb[0], gb[0]) != (c_r, g_r):
        text += (f"; at each one's fastest step {cb[1] / gb[1]:.2g}x (GPU rung {gb[0]}, {rung_name(m, gb[0])}: "
                 f"{num.figure(gb[1])} s; CPU rung {cb[0]}, {rung_name(m, cb[0])}: {num.figure(cb[1])} s)")
    return text + "."


def cpu_sentence(m: pd.DataFrame) -> str | None:
    """The CPU ladder alone: lstmnb's fastest step against the study's code on the same CPU."""
    c0, best = seconds_at(m, "cpu", 0), fastest(m, "cpu")
    if c0 is None or best is None:
        return None
    e = int(m.epochs.iloc[0])
    if best[0] == 0:
        return (f"On {machine_words(m)}, the study's code (rung 0) was the fastest rung of the study's workload "
                f"measured ({num.figure(c0)} s for {num.count(e, 'epoch')}): no later rung gained here.")
    return (f"On {machine_words(m)}, lstmnb's fastest step (rung {best[0]}, {rung_name(m, best[0])}) trains the "
            f"study's workload ({e} epochs) {c0 / best[1]:.2g}x as fast as the study's code on the same CPU: "
            f"{num.figure(best[1])} s against {num.figure(c0)} s.")


def limits_sentence(m: pd.DataFrame, there: bool = True) -> str | None:
    """What the ladder says limits a small LSTM: feeding the data (the DataLoader rungs against in-memory
    batches), launching kernels (eager against the CUDA graph), and the device's own work (what is left)."""
    feed, parts = [], []
    for device, where in (("cpu", "the CPU's"), ("cuda", "the GPU's")):
        low, fast = m[(m.device == device) & (m.rung < 4) & m.seconds.notna()], seconds_at(m, device, 4)
        if len(low) and fast:
            k, slow = int(low.rung.min()), float(low.loc[low.rung.idxmin()].seconds)
            if fast < slow:
                feed.append(f"{1 - fast / slow:.0%} of {where} time at rung {k}")
            else:
                parts.append(f"in-memory batches were no faster than {where} rung {k} ({num.figure(fast)} s against "
                             f"{num.figure(slow)} s)")
    parts[:0] = ["feeding the data (the DataLoader and per-sample tensors) is " + " and ".join(feed)] if feed else []
    eager, graph = seconds_at(m, "cuda", 4), seconds_at(m, "cuda", 5)
    if eager and graph and graph < eager:
        parts.append(f"launching kernels one by one is {1 - graph / eager:.0%} of the GPU's in-memory eager time "
                     f"(the CUDA graph leaves {num.figure(graph)} s of the device's own work)")
    if not parts:
        return None
    end = (": for a model this small, 'which GPU is fastest' is first a question of how fast the host feeds it "
           "and launches its kernels, and the GPU's own speed shows only once both are gone (the CUDA-graph rung)"
           if eager and graph and graph < eager else "")
    return ("There, " if there else f"On {machine_words(m)}, ") + "; ".join(parts) + end + "."


def study_sentence(published: dict | None, own: list[pd.DataFrame]) -> str | None:
    """The study's ratios, named as the study's claim: its GPUs over its one CPU run, and what this machine's
    CPU takes for that run's work (the study's code, rung 0)."""
    table = ((published or {}).get("era5_lstm_gpu_benchmark") or {}) if published else {}
    epochs = table.get("epochs") or {}
    if not epochs:
        return None
    notes = ((table.get("provenance") or {}).get("notes") or {})
    top = max(epochs)
    cpu = epochs[top]["CPU"]
    ratios = {d: cpu / s for d, s in epochs[top].items() if d != "CPU" and d not in notes}
    flagged = [d for d in epochs[top] if d != "CPU" and d in notes]
    text = (f"The study's {min(ratios.values()):.0f}-{max(ratios.values()):.0f}x is the study's claim: its "
            f"{', '.join(ratios)} runs over one CPU run of unstated platform ({num.figure(cpu)} s for {top} epochs; "
            f"{' and '.join(flagged)} left out, their figures flagged)")
    here = [(int(m.epochs.iloc[0]), seconds_at(m, "cpu", 0)) for m in own]
    here = [(e, s) for e, s in here if s is not None and e in epochs]
    if here:
        e, s = here[0]
        text += (f"; this machine's CPU does that run's work (the study's code, {e} epochs, where the study's CPU "
                 f"took {num.figure(epochs[e]['CPU'])} s) in {num.figure(s)} s")
    return text + "."


def first_screen(df: pd.DataFrame | None, reference: pd.DataFrame | None = None,
                 published: dict | None = None) -> Screen:
    """The figure and at most three sentences that open 06 and the site: each machine's rungs on its CPU and
    GPU (the reader's first, ``reference`` labelled as another machine's); the first ratio of one machine's
    runs, what limits a small LSTM, the study's ratios last, as its claim."""
    published = published if published is not None else load_published()
    own, ref = ladder_rows(df, "measured here"), ladder_rows(reference, "reference records, another machine")
    mine = machines(own)
    every = mine + machines(ref)[:1]  # the reference's most complete ladder (its others are in the tables below)
    both = [m for m in every if {"cpu", "cuda"} <= set(m[m.seconds.notna()].device)]
    if both and (both[0].source.iloc[0] == "measured here" or not mine):  # a GPU and its own CPU: the answer
        first = gpu_sentence(both[0])
        limits = limits_sentence(both[0], there=first is not None)
    else:  # this machine's CPU ladder first; the reference's GPU, labelled, for what limits it
        first = cpu_sentence(mine[0]) if mine else None
        limits = (limits_sentence(both[0], there=False) if both else
                  limits_sentence(mine[0], there=first is not None) if mine else None)
    sentences = [s for s in (first, limits, study_sentence(published, mine)) if s]
    if not every:
        return Screen("No ladder records yet: run 03 (or `lstmnb bench ladder --device cpu`) for this machine's CPU "
                      "ladder. " + (sentences[0] if sentences else ""), None, HOW_TO_GET_GPU)
    note = "" if both else HOW_TO_GET_GPU
    return Screen(" ".join(sentences), plot_ladder(panels(every)), note, pd.concat(every, ignore_index=True))

# --- the findings under it ---------------------------------------------------------------------------

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
    multi = [((column(df, "status") == "ok") & (pd.to_numeric(df["world_size"], errors="coerce") >= 2)).any()
             for df in (records, reference) if df is not None and not df.empty and "world_size" in df]
    if not any(multi):
        out.append("no multi-GPU records: run 05 on a node with 2+ GPUs (`sbatch carc/ddp_single_node.sbatch`)")
    return out


def findings(records: pd.DataFrame | None, published: dict[str, Any] | None = None,
             reference: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """(Markdown bullets, ``tables.summary_table``) from the user's ``records``, the ``published`` figures and
    lstmnb's ``reference`` records (each or None): what was found (skipped devices as skipped), what is missing
    with the command that fills it, the notes of the published devices shown."""
    rows = comparison_rows(records, reference, published)
    lines = [found(records, reference, published)]
    problem = main_problem(rows)
    epochs = comparison_epochs(rows, problem) if problem else None
    missing = _missing(records, reference, rows)
    if missing:
        lines.append("**Missing:** " + "; ".join(missing) + ".")
    shown = set(rows.loc[rows["source"] == PUBLISHED, "device"]) if not rows.empty else set()
    notes = device_notes(published, shown) if published is not None and shown else {}
    lines += [f"*{note}*" for note in notes.values()]
    return "\n".join(f"- {line}" for line in lines if line), summary_table(rows, problem, epochs, notes)

# --- the glossary -------------------------------------------------------------------------------------------

# the glossary's text is package data (``glossary.yaml``), its thresholds the rules' own
GLOSSARY: dict[str, str] = {
    term: words.format(repeats_disagree=REPEATS_DISAGREE, tied_within=TIED_WITHIN) for term, words in
    yaml.safe_load(resources.files("lstmnb").joinpath("glossary.yaml").read_text(encoding="utf-8")).items()}


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
