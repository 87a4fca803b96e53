"""From run records to what a reader sees: tables, figures and sentences, 06_analysis's and the site's.

A leaf package: it reads records (dicts or ``records.load_records``'s DataFrame) and never trains. Its names are
imported on first use (``from lstmnb.report import format_table`` costs the CLI one module), each from the one
module of its job: ``labels`` (how things are named and figures written), ``published`` (where every figure comes
from), ``repeats`` (the one timing rule), ``compare`` (the comparison across machines; the study's own),
``ladder`` (the ladder and the replication), ``figures`` (every figure), ``tables`` (per-run, per-source and skill
tables), ``scaling`` (parallel training, batch sweep, cost) and ``words`` (every sentence); docs/architecture.md
says more of each.
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
