"""Training, in the order a run flows: ``config`` (every knob once, with its help and rule; the presets), ``pipeline``
(the front door: prepare data, train, run and record), ``trainer`` (the Trainer: epoch loop, validation, history),
``step`` (the batches that feed the step, the step, its optimiser and CUDA graph), ``guards`` (divergence),
``evaluate`` (the test forecast, its blend and skill, the timing summary and the record), ``checkpoints`` and
``parallel`` (DDP, DataParallel). ``from lstmnb import train`` gives this package (documented API):
``train.run(request, train.TrainConfig())``. See docs/architecture.md."""

from .checkpoints import CHECKPOINT_FORMAT
from .config import (AMP_MODES, INPUT_PATHS, LR_SCHEDULES, PRESETS, STRATEGIES, TrainConfig, config_from_dict,
                     preset_config, with_overrides)
from .evaluate import RunResult, predict, rmse_kelvin, summarize_timing, time_to_target
from .pipeline import check_windows, prepare_windows, record_run, run, thread_choice, train
from .step import WindowDataset, make_optimizer, restore_optimizer
from .trainer import Trainer, skipped_record

__all__ = [
    "AMP_MODES", "CHECKPOINT_FORMAT", "INPUT_PATHS", "LR_SCHEDULES", "PRESETS", "RunResult", "STRATEGIES",
    "TrainConfig", "Trainer", "WindowDataset", "check_windows", "config_from_dict", "make_optimizer", "predict",
    "preset_config", "prepare_windows", "record_run", "restore_optimizer", "rmse_kelvin", "run", "skipped_record",
    "summarize_timing", "thread_choice", "time_to_target", "train", "with_overrides",
]
