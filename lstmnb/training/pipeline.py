"""The front door of training: prepare the data (extract, window), train on the device and strategy
the config names, and record the run."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..device import resolve_device
from ..errors import ConfigError, OutputError
from ..paths import why_not_written
from ..records import DEFAULT_FILE, append_record, runs_path
from ..windows import Windows, windows_from_dataset
from . import parallel
from .config import TrainConfig
from .parallel.groups import is_rank_zero
from .trainer import RunResult, Trainer


def check_windows(windows: Windows, cfg: TrainConfig) -> None:
    wc = windows.config
    if (wc.window, wc.lead_hours, wc.horizon) != (cfg.window, cfg.lead_hours, cfg.horizon):
        raise ConfigError(
            f"windows were built with window/lead/horizon {wc.window}/{wc.lead_hours}/{wc.horizon} but the "
            f"training config says {cfg.window}/{cfg.lead_hours}/{cfg.horizon}; rebuild them with cfg.window_config()"
        )


def train(windows: Windows, cfg: TrainConfig = TrainConfig(), *, data_info: dict[str, Any] | None = None,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Train a forecaster on ``windows`` as ``cfg`` says and return the record and the model.

    ``on_epoch_end`` is called with each epoch's entry after its checkpoint is written (a notebook
    can plot live; a test can interrupt the run there).
    """
    cfg.validate()
    check_windows(windows, cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.strategy != "single":
        return parallel.train_parallel(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end)
    device = resolve_device(cfg.device)
    tr = Trainer(windows, cfg, device)
    tr.restore()
    tr.start_peak_memory()
    tr.fit(f"train {device}", on_epoch_end)
    record = tr.finish(data_info)
    return RunResult(record=record, model=tr.core, windows=windows, device=device, history=tr.history)



def prepare_windows(request=None, cfg: TrainConfig = TrainConfig(), *, progress: bool = True):
    """Extract (or read from cache) the request's series and window it as ``cfg`` says.

    Returns (windows, data_info) where data_info is the record's ``data`` section.
    """
    from .. import data

    request = request or data.Request()
    ds = data.extract(request, progress=progress)
    windows = windows_from_dataset(ds, cfg.window_config())
    info = {"source": request.source, "variables": list(request.variables),
            "points": [list(p) for p in request.points] if request.points else None,
            "start": str(request.start), "end": str(request.end), "hours": int(ds.sizes["time"])}
    return windows, info


def run(request=None, cfg: TrainConfig = TrainConfig(), *, results=DEFAULT_FILE,
        on_epoch_end: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Prepare data, train, and append the record to ``results`` (a .jsonl file or folder;
    ``records.DEFAULT_FILE``: results/runs.jsonl; None: do not record). When the record cannot be
    written, an ``OutputError`` carries the finished run as ``.result``."""
    windows, info = prepare_windows(request, cfg, progress=cfg.progress)
    result = train(windows, cfg, data_info=info, on_epoch_end=on_epoch_end)
    if is_rank_zero():  # under torchrun only rank 0 writes
        try:
            append_record(result.record, results)
        except OSError as exc:  # the work is done: hand it back with the error instead of losing it
            err = OutputError(f"the run finished, but its record could not be appended to {runs_path(results)}: "
                              f"{why_not_written(exc)}")
            err.exit_status, err.result = 1, result
            raise err from None
    return result

