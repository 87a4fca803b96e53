"""What a finished run reports: the timing summary (warm-up apart, medians), time to a target, and
the run record with the test metrics beside the baselines."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import torch

from ..models import Forecaster, count_parameters, flops_per_sample
from ..records import new_record
from ..windows import Windows, error_metrics
from .config import TrainConfig
from .blend import apply_blend, blend_section, fit_blend
from .evaluate import mse_skill_score, predict, skill_section
from .ladder import rung_of


def time_to_target(history: list[dict[str, Any]], target: float | None) -> dict[str, Any]:
    """Seconds (cumulative, training + evaluation) to the first epoch whose validation RMSE <= target."""
    if target is None:
        return {"target_rmse_k": None}
    best = min((h["val_rmse_k"] for h in history if h["val_rmse_k"] is not None), default=math.inf)
    for h in history:
        if h["val_rmse_k"] is not None and h["val_rmse_k"] <= target:
            return {"target_rmse_k": target, "reached": True, "epoch": h["epoch"], "seconds": h["cumulative_s"],
                    "best_val_rmse_k": best}
    return {"target_rmse_k": target, "reached": False, "epoch": None, "seconds": None, "best_val_rmse_k": best,
            "note": f"not reached in {len(history)} epochs (best {best:.3f} K)"}


def summarize_timing(history: list[dict[str, Any]], warmup_epochs: int = 1) -> dict[str, Any]:
    """Warm-up epochs apart from the steady ones; medians over the steady epochs. Warm-up: the epochs marked so
    (each process's first epoch, or every epoch up to a late CUDA graph capture, ``graphs.capture_epoch``: a
    resumed run warms up again), and the first ``warmup_epochs`` of a history from before the marks. With no
    epoch after them the medians fall back to all epochs, and ``steady_epochs`` says 0."""
    w = max(1, warmup_epochs)
    warm = [i < w or bool(h.get("warmup")) for i, h in enumerate(history)]
    train_s = [h["train_s"] for h in history]
    steady = [h for h, x in zip(history, warm) if not x] or history
    sps = [h["samples_per_s"] for h in steady]
    return {
        "warmup_epochs": sum(warm),
        "steady_epochs": len(history) - sum(warm),
        "train_s": sum(train_s),
        "eval_s": sum(h["eval_s"] for h in history),
        "wall_s": history[-1]["cumulative_s"] if history else 0.0,
        "warmup_epoch_s": train_s[0] if train_s else None,
        "warmup_s": sum(x for x, w in zip(train_s, warm) if w),  # every warm-up epoch's training seconds
        "epoch_s_median": statistics.median(h["train_s"] for h in steady) if steady else None,
        "samples_per_s": statistics.median(sps) if sps else None,
        "cumulative_s": [h["cumulative_s"] for h in history],
    }


def workers_section(cfg: TrainConfig) -> dict[str, Any] | None:
    """How the DataLoader's workers started (the record's ``workers``; None without them): their count, the
    start method (``spawn``, the default of macOS and Windows, and ``forkserver`` start each worker as a fresh
    Python process that imports torch and lstmnb and unpickles the training windows before its first batch;
    ``fork`` copies the running process) and whether that happens every epoch (torch's default, the published
    setting's) or once. Read without fixing the process's start method (``get_all_start_methods``' first is
    the default the DataLoader takes)."""
    if cfg.input_path != "dataloader" or not cfg.num_workers:
        return None
    import multiprocessing

    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    section: dict[str, Any] = {"count": cfg.num_workers, "start_method": method,
                               "started": "once" if cfg.persistent_workers else "every epoch"}
    if method != "fork" and not cfg.persistent_workers:
        section["note"] = (f"each epoch's seconds include starting {cfg.num_workers} fresh Python process(es) "
                           f"({method}: importing torch and lstmnb, unpickling the training windows); a run "
                           "whose workers fork (Linux's default until Python 3.14) does not pay it")
    return section


def finish_record(core: Forecaster, windows: Windows, cfg: TrainConfig, device: torch.device,
                   history: list[dict[str, Any]], stopped_early: bool, data_info: dict[str, Any] | None,
                   stop_reason: str, memory: dict[str, Any], divergence: dict[str, Any] | None = None,
                   warmup_epochs: int = 1, **extra: Any) -> dict[str, Any]:
    """The run record: timing, the test forecast's metrics beside the baselines, per-point skill. A run
    that diverged (``divergence``: where, and its one-line message) is recorded as ``diverged`` with the
    epochs it finished before, and no figure from its non-finite weights: no test forecast, no metrics."""
    workers = workers_section(cfg)
    if workers is not None:  # how the DataLoader's workers started: their start-up is inside the epochs' seconds
        extra["workers"] = workers
    data = dict(data_info or {})
    data.update(sizes=windows.sizes(), split_times=windows.split_times, scored=windows.scored,
                features=windows.features, cells=windows.points, climatology=windows.climatology)
    model = {"parameters": count_parameters(core), "flops_per_sample": flops_per_sample(core.config, cfg.window)}
    if divergence is not None:
        finished = {"timing": summarize_timing(history, warmup_epochs)} if history else {}
        return with_rung(new_record(cfg.experiment, status="diverged", reason=divergence["message"], device=str(device),
                          profile=cfg.profile, config=cfg.as_record(), data=data, epochs=history, memory=memory,
                          model=model, divergence=divergence, **finished, **extra))
    network = windows.to_kelvin(predict(core, windows.x["test"], device, cfg.eval_batch_size).cpu().numpy())
    # the reported forecast: per point, the blend of the network and the baselines fitted on validation
    network_val = (windows.to_kelvin(predict(core, windows.x["val"], device, cfg.eval_batch_size).cpu().numpy())
                   if windows.x["val"].shape[0] else np.zeros((0, cfg.horizon)))  # no validation part: nothing
    weights = fit_blend(windows, network_val, cfg.blend)
    pred = apply_blend(windows, "test", network, weights)
    truth = windows.to_kelvin(windows.y["test"])
    test, alone = error_metrics(pred, truth), error_metrics(network, truth)
    base = windows.baselines["test"]
    flops = model["flops_per_sample"]
    timing = summarize_timing(history, warmup_epochs)
    timing["time_to_target"] = time_to_target(history, cfg.target_rmse)
    if timing["samples_per_s"]:
        timing["train_flops_per_s"] = timing["samples_per_s"] * flops["training"]
    metrics = {
        "test_rmse_k": test["rmse"], "test_mae_k": test["mae"],
        "persistence_rmse_k": base["persistence"]["rmse"], "persistence_mae_k": base["persistence"]["mae"],
        "climatology_rmse_k": base["climatology"]["rmse"], "climatology_mae_k": base["climatology"]["mae"],
        "network_test_rmse_k": alone["rmse"], "network_test_mae_k": alone["mae"],
        **{f"mse_skill_vs_{b}": mse_skill_score(test["rmse"] ** 2, base[b]["rmse"] ** 2)
           for b in ("persistence", "climatology")},
        "val_persistence_rmse_k": windows.baselines["val"]["persistence"]["rmse"],
        "best_val_rmse_k": min((h["val_rmse_k"] for h in history if h["val_rmse_k"] is not None), default=None),
        "epochs_run": len(history), "stopped_early": stopped_early, "stop_reason": stop_reason,
    }
    return with_rung(new_record(
        cfg.experiment, status="ok", device=str(device), profile=cfg.profile,
        config=cfg.as_record(), data=data, epochs=history, timing=timing, memory=memory,
        metrics=metrics, model=model,
        # per point (a box: per cell), beside both baselines, with the blend that made the reported forecast
        skill=skill_section(windows, pred, network if cfg.blend != "off" else None,
                            blend_section(windows, cfg.blend, network_val, weights)),
        **extra,
    ))


def skipped_record(cfg: TrainConfig, reason: str, status: str = "skipped", **extra: Any) -> dict[str, Any]:
    """A record for a run that gave no figures: it could not happen here (no GPU: ``skipped``) or ran out
    of memory (``oom``); a reason, never a number."""
    return with_rung(new_record(cfg.experiment, status=status, reason=reason, device=cfg.device,
                                profile=cfg.profile, config=cfg.as_record(), **extra))


def with_rung(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its rung of the ladder (``ladder.rung_of``) where it is one."""
    rung = rung_of(record)
    if rung is not None:
        record["ladder"] = rung
    return record

