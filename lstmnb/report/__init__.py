"""Tables, plots and findings from run records: the comparison across machines that 06_analysis shows.

A leaf package: it reads records (dicts or the DataFrame from ``records.load_records``) and never trains
or extracts anything. Its modules, one job each:

- ``devices``: device labels and the selection of finished single-device runs
- ``tables``: one run's tables, many runs, the published epochs x devices form, throughput, accuracy
- ``published``: the published figures, labelled as such; the three sources (measured, reference, published)
- ``provenance``: machine, dates, commit and versions of every device column; the shipped reference records
- ``compare``: every source's runs as comparison rows; speedup against a stated reference; knob effects
- ``findings``: the paragraph and small table that open the report
- ``charts``: the comparison on shared log axes (seconds, samples/s, speedup)
- ``plots``: per-source plots, loss curves, convergence, cost
- ``scaling``, ``cost``: parallel-training and cost tables
"""

from .charts import ChartData, plot_samples_per_s, plot_seconds, plot_speedup, samples_chart, seconds_chart, speedup_chart
from .compare import (
    LIKE_FOR_LIKE,
    PUBLISHED_PROBLEM_LABEL,
    Speedups,
    comparison_epochs,
    comparison_rows,
    knob_effects,
    problem_label,
    setting_label,
    speedups,
)
from .cost import cost_table, load_prices, price_for
from .devices import DEVICE_ORDER, device_label, ok_single_runs, order_devices, with_device_labels
from .findings import findings
from .plots import plot_convergence, plot_cost, plot_epochs_tables, plot_loss_curves, plot_speedups
from .provenance import (
    column_label,
    load_reference_records,
    machines_table,
    provenance_table,
    reference_files,
    reference_note,
)
from .published import (
    MEASURED,
    PUBLISHED,
    REFERENCE,
    load_published,
    published_epochs_table,
    published_provenance,
    published_tables,
    side_by_side,
)
from .scaling import SCALING_DEFINITIONS, allreduce_table, batch_sweep_table, convergence_table, scaling_table
from .tables import (
    epochs_device_table,
    epochs_table,
    format_table,
    input_paths,
    loss_curves,
    metrics_table,
    rmse_by_device,
    runs_table,
    speedup_table,
    status_table,
    throughput_table,
)

__all__ = [
    "ChartData", "DEVICE_ORDER", "LIKE_FOR_LIKE", "MEASURED", "PUBLISHED", "PUBLISHED_PROBLEM_LABEL", "REFERENCE",
    "SCALING_DEFINITIONS", "Speedups", "allreduce_table", "batch_sweep_table", "column_label", "comparison_epochs",
    "comparison_rows", "convergence_table", "cost_table", "device_label", "epochs_device_table", "epochs_table",
    "findings", "format_table", "input_paths", "knob_effects", "load_prices", "load_published",
    "load_reference_records", "loss_curves", "machines_table", "metrics_table", "ok_single_runs", "order_devices",
    "plot_convergence", "plot_cost", "plot_epochs_tables", "plot_loss_curves", "plot_samples_per_s", "plot_seconds",
    "plot_speedup", "plot_speedups", "price_for", "problem_label", "provenance_table", "published_epochs_table",
    "published_provenance", "published_tables", "reference_files", "reference_note", "rmse_by_device", "runs_table",
    "samples_chart", "scaling_table", "seconds_chart", "speedup_chart", "setting_label", "side_by_side", "speedup_table", "speedups", "status_table",
    "throughput_table", "with_device_labels",
]
