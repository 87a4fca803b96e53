"""From run records to what a reader sees: tables, figures and sentences, and the comparison across machines
that 06_analysis shows.

A leaf package: it reads records (dicts or the DataFrame from ``records.load_records``) and never trains or
extracts anything. Its modules, one job each, and the names this package gives from them (imported on first
use, so ``from lstmnb.report import format_table`` costs the CLI one module):

- ``labels``: how things are named and figures written (device labels, the published setting and problem,
  defined once, a run's setting and problem, three significant figures)
- ``published``: where every figure comes from (the published figures and their notes, the provenance of every
  device column and the findings' first line, the shipped reference records)
- ``repeats``: the one timing rule (the median of repeats, marked rough where they disagree or shared busy cores)
- ``compare``: the comparison rows across machines under that rule, each device over a CPU; the study's own
  comparison (its devices ranked per epochs count, the flagged ones named, never ranked)
- ``ladder``: the ladder's rows, the first screen's bars, the replication
- ``figures``: every figure
- ``tables``: per-run and per-source tables, accuracy, loss curves, status counts, skill on the study's data
- ``scaling``: parallel-training (DDP, DataParallel, all-reduce), batch-sweep and cost tables
- ``words``: every sentence: the first screen's, the findings, each notebook's "What this showed", the glossary
"""

from __future__ import annotations

import importlib

_HOMES = {
    "labels": "DEVICE_ORDER LIKE_FOR_LIKE PUBLISHED_PROBLEM_LABEL device_label order_devices problem_label "
              "published_setting_definition setting_label",
    "published": "MEASURED NOTE_MARK PUBLISHED REFERENCE column_label device_notes load_published "
                 "load_reference_records machine_descriptions machines_table provenance_table published_epochs_table "
                 "published_tables reference_note",
    "repeats": "REPEATS_DISAGREE RULE flag_lines median_of_repeats timing_note timing_rows unsure_why",
    "compare": "MEDIAN_RULE OVER_STUDY_CPU TIED_WITHIN PublishedComparison comparison_epochs comparison_rows "
               "published_comparison",
    "ladder": "Replication ladder_rows ladder_table replication",
    "figures": "plot_convergence plot_cost plot_ladder plot_loss_curves",
    "tables": "epochs_table epochs_tables format_table loss_curves metrics_table rmse_by_device "
              "runs_table status_table study_skill_summary study_skill_table",
    "scaling": "SCALING_DEFINITIONS allreduce_table batch_sweep_table convergence_table "
               "cost_table load_prices price_for scaling_table",
    "words": "GLOSSARY Screen analysis_conclusion cpu_baseline_conclusion findings first_screen glossary_markdown "
             "model_conclusion region_conclusion scratch_conclusion",
}
_HOME = {name: module for module, names in _HOMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOMES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME) | set(_HOMES))
