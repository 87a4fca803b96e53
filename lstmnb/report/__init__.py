"""From run records to what a reader sees: tables, figures and sentences, and the comparison across machines
that 06_analysis shows.

A leaf package: it reads records (dicts or the DataFrame from ``records.load_records``) and never trains or
extracts anything. Its modules, one job each:

- ``labels``: how things are named and figures written: device labels and the finished single-device runs,
  the published setting and problem (defined once) and how a run's setting and problem are named, how every
  sentence, table and chart label writes a figure
- ``published``: where every figure comes from: the published figures, labelled as such, the notes shown
  beside a device's figures, the provenance of every device column, the shipped reference records
- ``repeats``: the one timing rule: repeated runs as one row, the median of the repeats, marked where they
  disagree or shared busy cores (03's run table, 04/05's alternated repeats, every 06 figure of such a
  median)
- ``compare``: the comparison rows across machines under that rule, each device over a CPU, knob effects; the
  study's own comparison (its devices ranked per epochs count, the flagged ones named, never ranked)
- ``figures``: every figure: the shared style, seconds and samples/s on one log axis, speedup bars that say
  over which CPU, epochs x devices bars, loss curves, convergence
- ``tables``: per-run and per-source tables, accuracy per device column, loss curves, status counts; skill
  on the study's data per point and input path
- ``scaling``: parallel-training (DDP, DataParallel, all-reduce) and cost tables, the cost plot
- ``words``: the glossary and each notebook's closing "What this showed"
- ``findings``: the bullets and small table of 06's findings
- ``ladder``: 06's first screen (the study's workload rung by rung, per machine) and the replication
"""

from .compare import (
    FASTEST,
    MEDIAN_RULE,
    OVER_STUDY_CPU,
    TIED_WITHIN,
    PublishedComparison,
    comparison_epochs,
    comparison_rows,
    flagged_devices,
    knob_effects,
    own_cpu_speedups,
    published_comparison,
)
from .figures import (
    ChartData,
    plot_convergence,
    plot_epochs_tables,
    plot_loss_curves,
    plot_samples_per_s,
    plot_seconds,
    plot_speedup,
    samples_chart,
    seconds_chart,
    speedup_chart,
)
from .findings import findings
from .labels import (
    DEVICE_ORDER,
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM_LABEL,
    device_label,
    ok_single_runs,
    order_devices,
    problem_label,
    published_setting_definition,
    setting_label,
    with_device_labels,
)
from .ladder import Replication, Screen, first_screen, ladder_rows, ladder_table, replication
from .published import (
    MEASURED,
    NOTE_MARK,
    PUBLISHED,
    REFERENCE,
    column_label,
    device_notes,
    load_published,
    load_reference_records,
    machine_descriptions,
    machines_table,
    provenance_table,
    published_epochs_table,
    published_provenance,
    published_tables,
    reference_files,
    reference_note,
    side_by_side,
)
from .repeats import (
    REPEATS_DISAGREE,
    RULE,
    flag_lines,
    median_of_repeats,
    timing_note,
    timing_rows,
    unsure_why,
)
from .scaling import (
    SCALING_DEFINITIONS,
    allreduce_repeat_table,
    allreduce_table,
    batch_sweep_table,
    convergence_table,
    cost_table,
    plot_cost,
    load_prices,
    price_for,
    scaling_repeat_table,
    scaling_table,
)
from .tables import (
    epochs_device_table,
    epochs_table,
    epochs_tables,
    format_table,
    loss_curves,
    metrics_table,
    rmse_by_device,
    runs_table,
    status_table,
    study_skill_summary,
    study_skill_table,
)
from .words import (
    GLOSSARY,
    analysis_conclusion,
    cpu_baseline_conclusion,
    glossary_markdown,
    model_conclusion,
    region_conclusion,
    scratch_conclusion,
)

__all__ = [
    "Replication",
    "Screen",
    "first_screen",
    "ladder_rows",
    "ladder_table",
    "replication",
    "ChartData", "DEVICE_ORDER", "FASTEST", "GLOSSARY", "LIKE_FOR_LIKE", "MEASURED", "MEDIAN_RULE", "NOTE_MARK",
    "OVER_STUDY_CPU", "PUBLISHED", "PUBLISHED_PROBLEM_LABEL", "PublishedComparison", "REFERENCE",
    "REPEATS_DISAGREE", "RULE", "SCALING_DEFINITIONS", "TIED_WITHIN", "allreduce_repeat_table", "allreduce_table",
    "analysis_conclusion", "batch_sweep_table", "column_label", "comparison_epochs", "comparison_rows",
    "convergence_table", "cost_table", "cpu_baseline_conclusion", "device_label", "device_notes",
    "epochs_device_table", "epochs_table", "epochs_tables", "findings", "flag_lines", "flagged_devices",
    "format_table", "glossary_markdown", "knob_effects", "load_prices", "load_published", "load_reference_records",
    "loss_curves", "machine_descriptions", "machines_table", "median_of_repeats", "metrics_table",
    "model_conclusion", "ok_single_runs", "order_devices", "own_cpu_speedups", "plot_convergence", "plot_cost",
    "plot_epochs_tables", "plot_loss_curves", "plot_samples_per_s", "plot_seconds", "plot_speedup", "price_for",
    "problem_label", "provenance_table", "published_comparison", "published_epochs_table", "published_provenance",
    "published_setting_definition", "published_tables", "reference_files", "reference_note", "region_conclusion",
    "rmse_by_device", "runs_table", "samples_chart", "scaling_repeat_table", "scaling_table", "scratch_conclusion",
    "seconds_chart", "setting_label", "side_by_side", "speedup_chart", "status_table", "study_skill_summary",
    "study_skill_table", "timing_note", "timing_rows", "unsure_why", "with_device_labels",
]
