"""Experiments built from runs, each point a run record (appended through ``records.Recorder``, so
``results=None`` means do not record everywhere): the epochs table, scaling, the batch sweep, time to
accuracy (speed), all-reduce bandwidth. See docs/architecture.md."""

from .allreduce import AllreduceConfig, allreduce, allreduce_record, gradient_bytes, size_ladder
from .epochs import epochs_experiment
from .scaling import SCALING_MODES, ScalingConfig, dataparallel_scaling, scaling, uneven_demo
from .sweep import SweepConfig, batch_sweep, memory_cap

__all__ = [
    "AllreduceConfig", "SCALING_MODES", "ScalingConfig", "SweepConfig", "allreduce",
    "allreduce_record", "batch_sweep", "dataparallel_scaling", "epochs_experiment", "gradient_bytes",
    "memory_cap", "scaling", "size_ladder", "uneven_demo",
]
