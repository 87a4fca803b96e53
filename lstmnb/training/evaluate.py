"""What a finished run reports: the network's forecasts (large batches, no gradients), the blend that makes the
reported forecast, the skill scores per point, the timing summary, the run record; and ``RunResult``.

The blend: per point (a box run: per cell), the convex blend of the network with persistence (and climatology) that
fits that point's validation part best. Persistence alone is a candidate, so the reported forecast never loses to
persistence on validation; where the network does (a smooth ocean point, whose small errors weigh nothing in a loss
pooled over stormy land points), the point leans on persistence. At long leads climatology earns weight too (its
errors and persistence's are only partly correlated). Fitted on validation, never test; kept in ``skill.blend``."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..errors import ConfigError
from ..models import Forecaster, count_parameters, flops_per_sample
from ..records import new_record
from ..windows import Windows, error_metrics

# ``cfg`` below is a ``config.TrainConfig``; config imports ``BLENDS`` from here, so this module imports no config

SKILL_SCORE = "MSE skill score: 1 - MSE_model / MSE_baseline (above 0: the model beats the baseline)"


@torch.inference_mode()
def predict(model: nn.Module, x: np.ndarray | torch.Tensor, device: torch.device,
            batch_size: int = 8192) -> torch.Tensor:
    """Model outputs (scaled units) for all samples of ``x``, evaluated in large batches."""
    was_training = model.training
    model.eval()
    xt = torch.as_tensor(x).to(device)
    outs = [model(xt[i : i + batch_size]).float() for i in range(0, xt.shape[0], batch_size)]
    model.train(was_training)
    return torch.cat(outs) if outs else torch.empty(0, device=device)


def rmse_kelvin(model: nn.Module, x: torch.Tensor, y: torch.Tensor, target_std: float,
                batch_size: int) -> tuple[float, float]:
    """(scaled MSE, RMSE in kelvin) of ``model`` on (x, y) already on the device."""
    mse = F.mse_loss(predict(model, x, x.device, batch_size), y.float()).item()
    return mse, math.sqrt(mse) * target_std


def mse_skill_score(mse_model: float, mse_base: float) -> float | None:
    """1 - MSE_model / MSE_baseline (1 perfect, above 0 better than the baseline; None where the baseline's is 0)."""
    return 1.0 - mse_model / mse_base if mse_base else None


def per_point_scores(w, pred, network=None) -> list[dict[str, Any]]:
    """Per point of windows ``w``, the test RMSE (K) of the reported forecast ``pred`` (K), of the network alone
    (``network``, where ``pred`` is a blend) and of both baselines, and the MSE skill scores."""
    truth = w.to_kelvin(w.y["test"])
    base = w.predictions["test"]
    forecasts = {"model": pred, "persistence": base["persistence"], "climatology": base["climatology"]}
    if network is not None:
        forecasts["network"] = network
    rows = []
    for p, name in enumerate(w.points):
        sel = w.point_index["test"] == p
        mse = {k: float(np.mean((v[sel] - truth[sel]) ** 2)) for k, v in forecasts.items()}
        row = score_row(name, w.config.lead_hours, int(sel.sum()), mse)
        if w.requested:  # the point as the user gave it (the row's point is its grid cell)
            row["requested"] = w.requested[p]
        rows.append(row)
    return rows


def score_row(point: str, lead_hours: int, targets: int, mse: dict[str, float]) -> dict[str, Any]:
    """One point's scores: RMSE (kelvin) of the model (and any other forecast in ``mse``) and both baselines
    from their MSE, and the model's MSE skill score against each (``mse_skill_score``)."""
    return {"point": point, "lead_hours": lead_hours, "targets": targets,
            **{f"{k}_rmse_k": math.sqrt(v) for k, v in mse.items()},
            **{f"mse_skill_vs_{b}": mse_skill_score(mse["model"], mse[b]) for b in ("persistence", "climatology")}}


SOURCES = ("model", "persistence", "climatology")  # the network's forecast and the two baselines
# what each choice of TrainConfig.blend may combine
BLENDS = {"off": ("model",), "persistence": ("model", "persistence"), "baselines": SOURCES}
DESCRIPTIONS = {
    "off": "the network's forecast as it is",
    "persistence": "per point, the convex blend of the network and persistence that fits the validation part best (MSE)",
    "baselines": ("per point, the convex blend of the network, persistence and climatology that fits the validation "
                  "part best (MSE)"),
}


def convex_weights(forecasts: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Weights (k,), >= 0 and summing to 1, of the columns of ``forecasts`` (n, k) whose combination has the least
    squared error against ``truth`` (n,): exact, by trying every set of columns (k <= 3); single columns included,
    so never worse than the best one."""
    f = np.asarray(forecasts, dtype=np.float64)
    y = np.asarray(truth, dtype=np.float64)
    k = f.shape[1]
    best, best_sse = None, np.inf
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            sub = f[:, cols]
            # minimise |sub w - y| with sum(w) = 1: w = (1 - sum z, z) around the first column
            z = np.linalg.lstsq(sub[:, 1:] - sub[:, :1], y - sub[:, 0], rcond=None)[0] if size > 1 else np.zeros(0)
            w = np.concatenate([[1.0 - z.sum()], z])
            if (w < 0).any():
                continue
            sse = float(np.sum((sub @ w - y) ** 2))
            if sse < best_sse:
                best, best_sse = np.zeros(k), sse
                best[list(cols)] = w
    return best


def _stack(windows, split: str, network: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """(samples, horizon, sources) forecasts in kelvin of ``split``: the network's and the baselines'."""
    pred = windows.predictions[split]
    return np.stack([network if n == "model" else pred[n] for n in names], axis=-1)


def fit_blend(windows, network_val: np.ndarray, blend: str) -> np.ndarray:
    """Per point, the weights (points, 3) of the network, persistence and climatology (``SOURCES``) fitted on
    the validation part; ``network_val``: the network's validation forecasts in kelvin."""
    if blend not in BLENDS:
        raise ConfigError(f"blend={blend!r} is not one of {', '.join(BLENDS)}")
    names = BLENDS[blend]
    use = [SOURCES.index(n) for n in names]
    truth = windows.to_kelvin(windows.y["val"])
    stack = _stack(windows, "val", network_val, names)
    weights = np.zeros((len(windows.points), len(SOURCES)))
    for p in range(len(windows.points)):
        sel = windows.point_index["val"] == p
        weights[p, use] = convex_weights(stack[sel].reshape(-1, len(names)), truth[sel].reshape(-1))
    return weights


def apply_blend(windows, split: str, network: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The reported forecast (samples, horizon) in kelvin of ``split``: each sample's point's blend."""
    stack = _stack(windows, split, network, SOURCES)
    return np.einsum("nhs,ns->nh", stack, weights[windows.point_index[split]])


def blend_section(windows, blend: str, network_val: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """The record's ``skill.blend``: which blend, what it means, and per point its weights and the validation RMSE
    (K) of the reported forecast (never above persistence's), the network alone and persistence."""
    truth = windows.to_kelvin(windows.y["val"])
    forecasts = {"reported": apply_blend(windows, "val", network_val, weights), "network": network_val,
                 "persistence": windows.predictions["val"]["persistence"]}
    points = []
    for p, name in enumerate(windows.points):
        sel = windows.point_index["val"] == p
        points.append({"point": name, "weights": dict(zip(SOURCES, map(float, weights[p]))),
                       **{f"val_{k}_rmse_k": float(np.sqrt(np.mean((f[sel] - truth[sel]) ** 2))) if sel.any() else None
                          for k, f in forecasts.items()}})
    return {"blend": blend, "description": DESCRIPTIONS[blend], "fitted_on": "val", "sources": list(SOURCES),
            "per_point": points}


def blend_weights(section: dict[str, Any]) -> np.ndarray:
    """The (points, 3) weights of a record's ``skill.blend`` section, as ``fit_blend`` gave them."""
    return np.array([[row["weights"][name] for name in SOURCES] for row in section["per_point"]], dtype=np.float64)


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
    """Warm-up epochs apart from the steady ones, medians over the steady. Warm-up: the epochs marked so (each process's
    first, or all up to a late CUDA graph capture, ``step.capture_epoch``; a resumed run warms up again) and the first
    ``warmup_epochs`` of a history from before the marks. No steady epoch: medians over all, ``steady_epochs`` 0."""
    warm = [i < max(1, warmup_epochs) or bool(h.get("warmup")) for i, h in enumerate(history)]
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


def workers_section(cfg) -> dict[str, Any] | None:
    """How the DataLoader's workers started (the record's ``workers``; None without them): their count, the start
    method (``spawn``, macOS's and Windows' default, and ``forkserver`` start each as a fresh Python process that
    imports torch and lstmnb and unpickles the training windows; ``fork`` copies this one, read without fixing it)
    and whether every epoch (torch's default, the published setting's) or once."""
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


def finish_record(core: Forecaster, windows: Windows, cfg, device: torch.device,
                   history: list[dict[str, Any]], stopped_early: bool, data_info: dict[str, Any] | None,
                   stop_reason: str, memory: dict[str, Any], divergence: dict[str, Any] | None = None,
                   warmup_epochs: int = 1, **extra: Any) -> dict[str, Any]:
    """The run record: timing, the test forecast's metrics beside the baselines, per-point skill. A run that diverged
    (``divergence``: where, and its message) is recorded as ``diverged`` with its finished epochs and no figure from
    its non-finite weights (no test forecast, no metrics)."""
    if (workers := workers_section(cfg)) is not None:  # the workers' start-up is inside the epochs' seconds
        extra["workers"] = workers
    data = dict(data_info or {})
    data.update(sizes=windows.sizes(), split_times=windows.split_times, scored=windows.scored,
                features=windows.features, cells=windows.points, climatology=windows.climatology)
    model = {"parameters": count_parameters(core), "flops_per_sample": flops_per_sample(core.config, cfg.window)}
    extra.update(device=str(device), profile=cfg.profile, config=cfg.as_record(), data=data, epochs=history,
                 memory=memory, model=model)
    if divergence is not None:
        finished = {"timing": summarize_timing(history, warmup_epochs)} if history else {}
        return new_record(cfg.experiment, status="diverged", reason=divergence["message"], divergence=divergence,
                          **finished, **extra)
    network = windows.to_kelvin(predict(core, windows.x["test"], device, cfg.eval_batch_size).cpu().numpy())
    # the reported forecast: per point, the blend of the network and the baselines fitted on validation
    network_val = (windows.to_kelvin(predict(core, windows.x["val"], device, cfg.eval_batch_size).cpu().numpy())
                   if windows.x["val"].shape[0] else np.zeros((0, cfg.horizon)))  # no validation part: nothing
    weights = fit_blend(windows, network_val, cfg.blend)
    pred = apply_blend(windows, "test", network, weights)
    truth = windows.to_kelvin(windows.y["test"])
    test, alone = error_metrics(pred, truth), error_metrics(network, truth)
    base = windows.baselines["test"]
    timing = summarize_timing(history, warmup_epochs)
    timing["time_to_target"] = time_to_target(history, cfg.target_rmse)
    if timing["samples_per_s"]:
        timing["train_flops_per_s"] = timing["samples_per_s"] * model["flops_per_sample"]["training"]
    metrics = {
        "test_rmse_k": test["rmse"], "test_mae_k": test["mae"],
        **{f"{b}_{m}_k": base[b][m] for b in ("persistence", "climatology") for m in ("rmse", "mae")},
        "network_test_rmse_k": alone["rmse"], "network_test_mae_k": alone["mae"],
        **{f"mse_skill_vs_{b}": mse_skill_score(test["rmse"] ** 2, base[b]["rmse"] ** 2)
           for b in ("persistence", "climatology")},
        "val_persistence_rmse_k": windows.baselines["val"]["persistence"]["rmse"],
        "best_val_rmse_k": min((h["val_rmse_k"] for h in history if h["val_rmse_k"] is not None), default=None),
        "epochs_run": len(history), "stopped_early": stopped_early, "stop_reason": stop_reason,
    }
    return new_record(
        cfg.experiment, status="ok", timing=timing, metrics=metrics,
        # per point (a box: per cell), beside both baselines, with the blend that made the reported forecast
        skill={"lead_hours": windows.config.lead_hours, "score": SKILL_SCORE,
               "per_point": per_point_scores(windows, pred, network if cfg.blend != "off" else None),
               "blend": blend_section(windows, cfg.blend, network_val, weights)},
        **extra,
    )


@dataclass
class RunResult:
    """What one run returns: the record (also appended to the results file; None on DDP ranks past 0) and the model."""

    record: dict[str, Any] | None
    model: nn.Module
    windows: Windows
    device: torch.device
    history: list[dict[str, Any]] = field(default_factory=list)
    # where this run's record already was before this call (a finished, recorded run resumed again, or
    # one killed between its record and the checkpoint's mark): nothing new was appended
    recorded: str | None = None

    def forecast_kelvin(self, split: str = "test") -> np.ndarray:
        """The reported forecast of ``split`` in kelvin: the network's, blended per point as the record says."""
        out = self.windows.to_kelvin(predict(self.model, self.windows.x[split], self.device).cpu().numpy())
        blend = ((self.record or {}).get("skill") or {}).get("blend")
        return apply_blend(self.windows, split, out, blend_weights(blend)) if blend else out
