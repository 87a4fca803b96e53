"""The front door of training, where data flows one way: prepare the data (extract, window), train on the device and
strategy the config names (``trainer.Trainer`` on one device, ``parallel`` for the others), and record the run (once
per finished run, however often it is resumed)."""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from ..machine.device import cpu_threads, resolve_device, torch_threads
from ..errors import ConfigError, OutputError
from ..models import Forecaster
from ..paths import why_not_written
from ..records import DEFAULT_FILE, append_record, append_record_once, runs_path
from ..rules import PYTHON, Spelling
from ..windows import Windows, windows_from_dataset
from . import parallel
from .checkpoints import check_same_data, mark_recorded, open_checkpoint, recorded_marker
from .config import TrainConfig
from .evaluate import RunResult
from .guards import diverged_error
from .parallel.groups import is_rank_zero
from .trainer import Trainer


def check_windows(windows: Windows, cfg: TrainConfig, say: Spelling = PYTHON) -> None:
    """The windows hold the samples ``cfg`` describes: its window, lead, horizon and inputs (calendar, cycles); a
    batch beyond them is a warning naming it as ``say`` spells it (refused with uneven shards, before any rank)."""
    names = ("window", "lead_hours", "horizon", "calendar", "cycles")
    built, wanted = ([getattr(c, n) for n in names] for c in (windows.config, cfg))
    if built != wanted:
        differ = ", ".join(f"{n} {b} (config {w})" for n, b, w in zip(names, built, wanted) if b != w)
        raise ConfigError(f"the windows were built with {differ}; rebuild them with cfg.window_config()")
    # a batch above the training part works (one full-batch step per epoch) but is not what the number says: a note.
    # Under DDP a step's batch is per rank x ranks; uneven shards refuse it (they take whole batches only)
    n_train = windows.x["train"].shape[0]
    world = int(cfg.nproc or os.environ.get("WORLD_SIZE") or 1) if cfg.strategy == "ddp" else 1  # its ranks
    if cfg.batch_size * world > n_train:
        given = say("batch_size", cfg.batch_size) + (f" per rank x {world} ranks = {cfg.batch_size * world}"
                                                      if world > 1 else "")
        if world > 1 and cfg.uneven_shards:
            raise ConfigError(f"{given} is more than the {n_train} training samples, and uneven shards take whole "
                              f"batches only; give a smaller {say.key('batch_size')}")
        if is_rank_zero():
            warnings.warn(f"{given} is more than the {n_train} training samples of this data: each "
                          f"epoch is one step of all {n_train} (the record's data.sizes.train)", stacklevel=3)


@contextmanager
def thread_choice(cfg: TrainConfig, device: torch.device | None) -> Iterator[dict[str, Any]]:
    """Torch's intra-op threads for this run, chosen by ``device.thread_policy`` on a CPU (an explicit
    ``cfg.threads`` wins anywhere), and put back as they were afterwards."""
    if cfg.threads or (device is not None and device.type == "cpu"):
        choice = cpu_threads(cfg.threads)
    else:
        where = device.type if device is not None else f"strategy {cfg.strategy}"
        choice = {"used": torch.get_num_threads(), "policy": "default",
                  "reason": f"runs on {where}; the load policy is for CPU runs"}
    with torch_threads(choice["used"]):
        yield choice


def recorded_run(windows: Windows, cfg: TrainConfig, state: dict[str, Any] | None) -> RunResult | None:
    """A finished run whose checkpoint says it was recorded: its record and best weights, no training."""
    if (mark := recorded_marker(state, cfg)) is None:
        return None
    core = Forecaster(cfg.model_config(windows.n_features))
    best = state["best"].get("state")
    core.load_state_dict(best if cfg.patience and best is not None else state["model"])
    return RunResult(record=mark["record"], model=core, windows=windows, device=torch.device("cpu"),
                     history=state["history"], recorded=mark["results"])


_UNREAD: Any = object()  # train's ``state`` when its caller has not read the checkpoint


def train(windows: Windows, cfg: TrainConfig = TrainConfig(), *, data_info: dict[str, Any] | None = None,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None, model: torch.nn.Module | None = None,
          state: dict[str, Any] | None = _UNREAD, say: Spelling = PYTHON) -> RunResult:
    """Train a forecaster on ``windows`` as ``cfg`` says and return the record and the model.

    ``on_epoch_end`` gets each epoch's entry after its checkpoint is written (a notebook can plot live; a test can
    interrupt the run there). Resuming a run that finished and was recorded trains nothing and returns that record
    (``RunResult.recorded`` says where). ``model``: the caller's network to train instead of the point Forecaster
    (one device, no checkpoint; region mode's neighbour models). ``state``: what ``open_checkpoint(cfg)`` gave the
    caller (``run`` reads it before the data); by default it is read here. ``say``: how refusals name settings
    (``resume=True``; the CLI's ``--resume``)."""
    cfg.validate(say)
    check_windows(windows, cfg, say)
    if model is not None and (cfg.strategy != "single" or cfg.checkpoint):
        raise ConfigError("a model of the caller's trains on one device without a checkpoint "
                          f"(got strategy={cfg.strategy!r}, checkpoint={cfg.checkpoint!r})")
    if state is _UNREAD:
        state = open_checkpoint(cfg, say)  # a new run never replaces a checkpoint it was not told to
    if state is not None:  # before a finished run's result is given back as this one's
        check_same_data(cfg.checkpoint, state, windows.identity(), say)
    if cfg.resume and state is None and is_rank_zero():  # the same command starts and resumes a run
        warnings.warn(f"{say('resume', True)}: no checkpoint at {cfg.checkpoint} yet, so this is a new run "
                      "(checkpointed there)", stacklevel=2)
    if (done := recorded_run(windows, cfg, state)) is not None:
        return done
    if cfg.strategy != "single":
        with thread_choice(cfg, None):  # ranks choose their own threads; an explicit cfg.threads applies here
            return parallel.train_parallel(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end, state=state,
                                           say=say)
    device = resolve_device(cfg.device, say)
    with thread_choice(cfg, device) as threads:
        tr = Trainer(windows, cfg, device, model=model, say=say)
        tr.restore(state)
        tr.machine.start_peak()
        tr.fit(f"train {device}", on_epoch_end)
        record = tr.finish(data_info, threads=threads)
    return RunResult(record=record, model=tr.core, windows=windows, device=device, history=tr.history)


def prepare_windows(request=None, cfg: TrainConfig = TrainConfig(), *, progress: bool = True, keys: bool = False,
                    say: Spelling = PYTHON):
    """Extract (or read from cache) the request's series and window it as ``cfg`` says (``keys``: as keyed windows,
    ``windows.make_windows``); returns (windows, data_info), data_info being the record's ``data`` section.
    ``say``: how refusals name settings."""
    from .. import data

    cfg.validate(say)  # before the extraction, which may be a download
    request = request or data.Request()
    ds = data.extract(request, progress=progress, say=say)
    grid = {}
    if "latitude" in ds.dims and "longitude" in ds.dims:  # a box: one series per cell, one global model
        from ..region.grid import box_to_points

        # the cells' grid (row-major, as the points are), so records can draw maps
        grid = {"grid": {"latitude": ds["latitude"].values.tolist(), "longitude": ds["longitude"].values.tolist()}}
        ds = box_to_points(ds)
    windows = windows_from_dataset(ds, cfg.window_config(), keys=keys, say=say)
    return windows, {**request.as_record(), "cells": int(ds.sizes["point"]), "hours": int(ds.sizes["time"]), **grid}


def record_run(result: RunResult, cfg: TrainConfig, results=DEFAULT_FILE) -> None:
    """Append ``result``'s record to ``results`` once: a checkpointed run's unless its run id is already in the file
    (then ``result.recorded`` says so), and the checkpoint is then marked recorded."""
    if results is None or result.record is None or result.recorded is not None:
        return
    if not cfg.checkpoint:
        append_record(result.record, results)
        return
    path, written = append_record_once(result.record, results)
    if not written:
        result.recorded = str(path)
    try:
        mark_recorded(cfg.checkpoint, result.record, path)
    except OSError as exc:  # the record is safe; a later resume finds it by its run id in the same file
        print(f"lstmnb: could not mark {cfg.checkpoint} as recorded ({exc.strerror or exc}); "
              f"the record is in {path}", file=sys.stderr)


def run(request=None, cfg: TrainConfig = TrainConfig(), *, results=DEFAULT_FILE,
        on_epoch_end: Callable[[dict[str, Any]], None] | None = None, say: Spelling = PYTHON) -> RunResult:
    """Prepare data, train, and append the record to ``results`` (a .jsonl file or folder, default results/runs.jsonl;
    None: no record), once per finished run. A record that cannot be written raises an ``OutputError`` carrying the
    run as ``.result``; a diverged run is recorded, then raised as a ``DivergedError`` carrying it (``train`` returns
    it instead). ``say``: how refusals name settings (``checkpoint='x.pt'``; the CLI's ``--checkpoint x.pt``)."""
    cfg.validate(say)  # a bad setting is named before any checkpoint is read
    state = open_checkpoint(cfg, say)  # read and checked once, before the data (which may be a download)
    windows, info = prepare_windows(request, cfg, progress=cfg.progress, say=say)
    result = train(windows, cfg, data_info=info, on_epoch_end=on_epoch_end, state=state, say=say)
    if is_rank_zero():  # under torchrun only rank 0 writes
        try:
            record_run(result, cfg, results)
        except OSError as exc:  # the work is done: hand it back with the error instead of losing it
            err = OutputError(f"the run finished, but its record could not be appended to {runs_path(results)}: "
                              f"{why_not_written(exc)}")
            err.exit_status, err.result = 1, result
            raise err from None
    if result.record is not None and result.record["status"] == "diverged":  # recorded, and not a success
        err = diverged_error(result.record, runs_path(results) if results is not None and is_rank_zero() else None)
        err.result = result
        raise err
    return result
