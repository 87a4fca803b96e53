"""Training: the config (every knob once, with its help), the Trainer (epoch loop, checkpoints), the
run summary and record, the front door (prepare data, train, run) and ``parallel`` (DDP, DataParallel).

``from lstmnb import train`` gives this package (documented API): ``train.run(request, train.TrainConfig())``.
See docs/architecture.md.
"""

from .checkpoints import CHECKPOINT_FORMAT
from .config import (AMP_MODES, INPUT_PATHS, LR_SCHEDULES, PRESETS, STRATEGIES, TrainConfig, config_from_dict,
                     preset_config, with_overrides)
from .evaluate import predict, rmse_kelvin
from .optim import make_optimizer, restore_optimizer
from .pipeline import check_windows, prepare_windows, record_run, run, thread_choice, train
from .summary import skipped_record, summarize_timing, time_to_target
from .trainer import RunResult, Trainer, WindowDataset

__all__ = [
    "AMP_MODES", "CHECKPOINT_FORMAT", "INPUT_PATHS", "LR_SCHEDULES", "PRESETS", "RunResult", "STRATEGIES", "TrainConfig",
    "Trainer", "WindowDataset", "check_windows", "config_from_dict", "make_optimizer", "predict",
    "preset_config", "prepare_windows", "record_run", "restore_optimizer", "rmse_kelvin", "run", "skipped_record", "summarize_timing",
    "thread_choice", "time_to_target", "train",
    "with_overrides",
]
