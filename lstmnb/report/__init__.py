"""Tables, plots and findings from run records: the comparison across machines that 06_analysis shows.

A leaf package: it reads records (dicts or the DataFrame from ``records.load_records``) and never trains
or extracts anything. Its modules, one job each:

- ``devices``: device labels and the selection of finished single-device runs
- ``settings``: the published setting and problem, defined once; how a run's setting and problem are named
- ``published``: the published figures, labelled as such, the notes shown beside a device's figures, and the
  study's own comparison (devices ranked per epochs count, the flagged ones named, never ranked)
- ``provenance``: machines (told apart beyond their host names), dates, commit and versions of every
  device column; the shipped reference records
- ``compare``: every source's runs as comparison rows (one median rule); each device over a CPU (its
  own machine's, or for a published GPU the study's CPU run); knob effects
- ``findings``: the bullets and small table under it
- ``study_skill``: skill on the study's real data, per point: the study's model beside lstmnb's forecaster
- ``style``: what every chart shares (one marker per source, labelled row groups, plain log ticks)
- ``charts``: seconds and samples/s on shared log axes, speedups over a CPU
- ``numbers``: how every sentence, table and chart label writes a figure
- ``tables``, ``plots``: per-source tables and plots, loss curves, convergence, cost
- ``scaling``, ``cost``: parallel-training and cost tables
- ``conclusions``: each notebook's closing "What this showed", written from its own results
- ``glossary``: every word the report uses, defined once (06's end, README)
- ``repeats``: medians of alternated repeats for 04/05 (steps, DDP runs, all-reduce sweeps) and their flags
- ``timing_quality``: repeated runs as one row (their median), marked where repeats disagree or other
  processes kept the cores busy
"""

from .charts import (
    ChartData,
    plot_samples_per_s,
    plot_seconds,
    plot_speedup,
    samples_chart,
    seconds_chart,
    speedup_chart,
)
from .compare import (
    FASTEST,
    MEDIAN_RULE,
    comparison_epochs,
    comparison_rows,
    knob_effects,
    own_cpu_speedups,
)
from .conclusions import (
    analysis_conclusion,
    cpu_baseline_conclusion,
    model_conclusion,
    region_conclusion,
    scratch_conclusion,
)
from .cost import cost_table, load_prices, price_for
from .devices import (
    DEVICE_ORDER,
    device_label,
    ok_single_runs,
    order_devices,
    with_device_labels,
)
from .findings import findings
from .glossary import GLOSSARY, glossary_markdown
from .plots import (
    plot_convergence,
    plot_cost,
    plot_epochs_tables,
    plot_loss_curves,
    plot_speedups,
)
from .provenance import (
    column_label,
    load_reference_records,
    machine_descriptions,
    machines_table,
    provenance_table,
    reference_files,
    reference_note,
)
from .published import (
    MEASURED,
    NOTE_MARK,
    OVER_STUDY_CPU,
    PUBLISHED,
    REFERENCE,
    TIED_WITHIN,
    PublishedComparison,
    device_notes,
    flagged_devices,
    load_published,
    published_comparison,
    published_epochs_table,
    published_provenance,
    published_tables,
    side_by_side,
)
from .scaling import (
    SCALING_DEFINITIONS,
    allreduce_repeat_table,
    allreduce_table,
    batch_sweep_table,
    convergence_table,
    scaling_repeat_table,
    scaling_table,
)
from .settings import (
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM_LABEL,
    problem_label,
    published_setting_definition,
    setting_label,
)
from .study_skill import study_skill_summary, study_skill_table
from .tables import (
    epochs_device_table,
    epochs_table,
    epochs_tables,
    format_table,
    loss_curves,
    metrics_table,
    rmse_by_device,
    runs_table,
    speedup_table,
    status_table,
)
from .timing_quality import REPEATS_DISAGREE, timing_note, timing_rows

__all__ = [
    "DEVICE_ORDER",
    "FASTEST",
    "GLOSSARY",
    "LIKE_FOR_LIKE",
    "MEASURED",
    "MEDIAN_RULE",
    "NOTE_MARK",
    "OVER_STUDY_CPU",
    "PUBLISHED",
    "PUBLISHED_PROBLEM_LABEL",
    "REFERENCE",
    "REPEATS_DISAGREE",
    "SCALING_DEFINITIONS",
    "TIED_WITHIN",
    "ChartData",
    "PublishedComparison",
    "allreduce_repeat_table",
    "allreduce_table",
    "analysis_conclusion",
    "batch_sweep_table",
    "column_label",
    "comparison_epochs",
    "comparison_rows",
    "convergence_table",
    "cost_table",
    "cpu_baseline_conclusion",
    "device_label",
    "device_notes",
    "epochs_device_table",
    "epochs_table",
    "epochs_tables",
    "findings",
    "flagged_devices",
    "format_table",
    "glossary_markdown",
    "knob_effects",
    "load_prices",
    "load_published",
    "load_reference_records",
    "loss_curves",
    "machine_descriptions",
    "machines_table",
    "metrics_table",
    "model_conclusion",
    "ok_single_runs",
    "order_devices",
    "own_cpu_speedups",
    "plot_convergence",
    "plot_cost",
    "plot_epochs_tables",
    "plot_loss_curves",
    "plot_samples_per_s",
    "plot_seconds",
    "plot_speedup",
    "plot_speedups",
    "price_for",
    "problem_label",
    "provenance_table",
    "published_comparison",
    "published_epochs_table",
    "published_provenance",
    "published_setting_definition",
    "published_tables",
    "reference_files",
    "reference_note",
    "region_conclusion",
    "rmse_by_device",
    "runs_table",
    "samples_chart",
    "scaling_repeat_table",
    "scaling_table",
    "scratch_conclusion",
    "seconds_chart",
    "setting_label",
    "side_by_side",
    "speedup_chart",
    "speedup_table",
    "status_table",
    "study_skill_summary",
    "study_skill_table",
    "timing_note",
    "timing_rows",
    "with_device_labels",
]
