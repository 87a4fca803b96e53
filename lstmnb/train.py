"""One training run: device, input path, batch, epochs, AMP, synchronised timing, checkpoints, records.

Timing follows DESIGN.md: the device is synchronised before every clock read, the first (warm-up)
epoch is reported apart from the steady epochs, and evaluation time is kept out of training time.
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .errors import CheckpointError, ConfigError, DeviceError
from .models import Forecaster, ModelConfig, count_parameters, flops_per_sample
from .paths import atomic_path
from .windows import WindowConfig, Windows

INPUT_PATHS = ("fast", "dataloader")
LR_SCHEDULES = ("constant", "onecycle", "cosine")
AMP_MODES = ("off", "auto", "bf16", "fp16")
STRATEGIES = ("single", "dataparallel", "ddp")
CHECKPOINT_FORMAT = 1

# fields that do not change the trajectory of a run: a checkpoint may be resumed across them
_RESUME_FREE = {"epochs", "resume", "checkpoint", "device", "num_workers", "pin_memory", "target_rmse",
                "patience", "stop_at_target", "compile", "experiment", "threads", "eval_batch_size", "progress", "profile", "dist_timeout_s"}


@dataclass
class TrainConfig:
    """Every knob of one run. The record's ``config`` is this dataclass as a dict."""

    # where and how
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    strategy: str = "single"  # single | dataparallel | ddp (see lstmnb.parallel)
    nproc: int | None = None  # ddp: local processes to launch outside torchrun; dataparallel: GPUs to use
    bucket_cap_mb: float = 25.0  # ddp: gradient bucket size for the overlapped all-reduce
    grad_as_bucket_view: bool = False  # ddp: gradients are views into the all-reduce buckets (saves a copy)
    static_graph: bool = False  # ddp: the graph is the same every step (lets DDP skip per-step bookkeeping)
    uneven_shards: bool = False  # ddp, fast path: size each rank's batch from its first-epoch throughput
    dist_timeout_s: float = 300.0  # ddp: a collective waiting longer than this fails the run
    input_path: str = "fast"  # fast: tensors on the device + index batches; dataloader: per-sample Dataset
    num_workers: int = 2  # DataLoader workers (dataloader path only)
    pin_memory: bool = True  # DataLoader pinned host memory (CUDA only)
    amp: str = "off"  # off | auto | bf16 | fp16 (CUDA only)
    threads: int | None = None  # torch intra-op threads on CPU (None: torch's default)
    fused_adam: bool = True  # Adam's update as one fused kernel where torch has it for the device
    compile: bool = False  # torch.compile the model (inductor); first epoch then includes compilation
    cuda_graph: bool = False  # CUDA, fast path: capture the whole training step once and replay it
    # optimisation
    epochs: int = 5
    batch_size: int = 64
    lr: float = 1e-3
    lr_schedule: str = "constant"  # constant | onecycle | cosine
    weight_decay: float = 0.0
    grad_clip: float | None = None
    seed: int = 0
    # samples
    window: int = 24
    lead_hours: int = 1
    horizon: int = 1
    calendar: bool = False
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    split_dates: tuple[str, str] | None = None
    # model
    hidden: int = 64
    layers: int = 1
    dropout: float = 0.0
    cell: str = "lstm"
    residual: bool = False  # forecast = last observed value + the network's correction
    # stopping, checkpoints, bookkeeping
    target_rmse: float | None = None  # kelvin, validation; time-to-target is reported when given
    stop_at_target: bool = False  # end the run at the first epoch that reaches target_rmse
    patience: int | None = None  # early stopping after this many epochs without validation improvement
    checkpoint: str | None = None  # path written atomically after each epoch
    resume: bool = False
    eval_batch_size: int = 8192
    experiment: str = "train"
    profile: str | None = None
    progress: bool = True

    def window_config(self) -> WindowConfig:
        return WindowConfig(
            window=self.window, lead_hours=self.lead_hours, horizon=self.horizon,
            fractions=tuple(self.fractions), split_dates=tuple(self.split_dates) if self.split_dates else None,
            calendar=self.calendar,
        )

    def model_config(self, n_features: int) -> ModelConfig:
        return ModelConfig(n_features=n_features, hidden=self.hidden, layers=self.layers,
                           dropout=self.dropout, horizon=self.horizon, cell=self.cell,
                           residual=self.residual)

    def validate(self) -> None:
        """Check every value before any work starts; errors name the value and what is allowed."""
        for name in ("epochs", "batch_size", "window", "lead_hours", "horizon", "hidden", "layers",
                     "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"lr={self.lr!r} must be a positive number")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ConfigError(f"num_workers={self.num_workers!r} must be a whole number >= 0")
        for name, value, choices in (("input_path", self.input_path, INPUT_PATHS),
                                     ("lr_schedule", self.lr_schedule, LR_SCHEDULES),
                                     ("amp", self.amp, AMP_MODES), ("strategy", self.strategy, STRATEGIES)):
            if value not in choices:
                raise ConfigError(f"{name}={value!r} is not one of {', '.join(choices)}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"patience={self.patience!r} must be >= 1 (or None for no early stopping)")
        if self.target_rmse is not None and not self.target_rmse > 0:
            raise ConfigError(f"target_rmse={self.target_rmse!r} must be a positive number of kelvin")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads={self.threads!r} must be >= 1")
        if self.cuda_graph:
            if self.input_path != "fast" or self.strategy != "single":
                raise ConfigError("cuda_graph=True needs input_path='fast' and strategy='single'")
            if self.lr_schedule != "constant" or self.amp == "fp16":
                raise ConfigError("cuda_graph=True needs lr_schedule='constant' and amp other than 'fp16' "
                                  "(a captured step cannot change its learning rate or loss scale)")
        if self.resume and not self.checkpoint:
            raise ConfigError("resume=True needs a checkpoint path to resume from")
        if self.nproc is not None and (isinstance(self.nproc, bool) or not isinstance(self.nproc, int) or self.nproc < 1):
            raise ConfigError(f"nproc={self.nproc!r} must be a whole number >= 1 (or None)")
        for name in ("bucket_cap_mb", "dist_timeout_s"):
            if not (isinstance(getattr(self, name), (int, float)) and getattr(self, name) > 0):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a positive number")
        if self.uneven_shards and (self.strategy != "ddp" or self.input_path != "fast"):
            raise ConfigError("uneven_shards=True needs strategy='ddp' and input_path='fast' "
                              f"(got strategy={self.strategy!r}, input_path={self.input_path!r})")
        self.window_config().validate()
        self.model_config(1).validate()

    def trajectory_key(self) -> dict[str, Any]:
        """The fields that determine the sequence of weights; a resumed checkpoint must match them."""
        return {k: v for k, v in asdict(self).items() if k not in _RESUME_FREE}


def config_from_dict(values: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from a mapping (profile, papermill parameters), rejecting unknown keys by name."""
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown training parameter(s) {unknown}; known: {sorted(known)}")
    return TrainConfig(**values)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA, then MPS, then CPU; an explicit device that is not present is an error."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()) or (index and kind != "cuda"):
        raise ConfigError(f"device={name!r} is not one of auto, cpu, cuda, cuda:N, mps")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device={name!r} asked for, but this machine has no usable CUDA GPU "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use --device cpu"
            )
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise DeviceError(f"device={name!r}: only {count} CUDA device(s) visible (cuda:0..cuda:{count - 1})")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise DeviceError(f"device={name!r} asked for, but MPS is not available here; use --device cpu")
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so a clock read measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def amp_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``mode`` on ``device``; None means full float32."""
    if mode == "off":
        return None
    if device.type != "cuda":
        if mode == "auto":
            return None
        raise ConfigError(f"amp={mode!r} is for CUDA devices; this run is on {device.type} (use amp='off')")
    if mode == "fp16":
        return torch.float16
    if mode == "bf16" and not torch.cuda.is_bf16_supported():
        raise DeviceError("amp='bf16' asked for, but this GPU does not support bfloat16; use amp='fp16'")
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


class WindowDataset(torch.utils.data.Dataset):
    """Per-sample access to windows: the input path the published experiments timed."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.x[i]), torch.from_numpy(self.y[i])


def reset_peak_memory(device: torch.device) -> bool:
    """Start a run's peak-memory window; True if the peak read at the end will be this run's own.

    CUDA: the allocator's peak statistics. CPU (and MPS, whose figure is the process's resident set):
    Linux keeps a resettable resident-set high-water mark (writing 5 to /proc/self/clear_refs sets
    VmHWM to the current RSS). getrusage's max RSS cannot be reset: it is the process's all-time
    peak, so a sweep would record its largest point for every point.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:  # not Linux, or a kernel/sandbox that refuses it
        return False
    return _vm_hwm_kb() is not None


def _vm_hwm_kb() -> int | None:
    """The process's resident-set high-water mark (VmHWM) in kB, or None where /proc has none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_memory_mb(device: torch.device, since_reset: bool = True) -> dict[str, Any]:
    """Peak memory of the run since ``reset_peak_memory``: CUDA allocator for GPUs, the process's
    resident-set high-water mark otherwise. ``since_reset=False`` (the reset was not possible) gives
    None for the CPU figure rather than a process-lifetime peak presented as the run's."""
    if device.type == "cuda":
        return {"kind": "cuda_max_allocated", "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20}
    hwm_kb = _vm_hwm_kb() if since_reset else None
    out: dict[str, Any] = {"kind": "process_peak_rss", "peak_mb": hwm_kb / 1024 if hwm_kb is not None else None}
    if hwm_kb is None:
        out["note"] = "no per-run peak here (needs Linux /proc/self/clear_refs and VmHWM)"
    return out


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
    pred = predict(model, x, x.device, batch_size)
    mse = F.mse_loss(pred, y.float()).item()
    return mse, math.sqrt(mse) * target_std


@dataclass
class RunResult:
    """What one run returns: the record (also appended to the results file) and the trained model.

    ``record`` is None on DDP ranks other than 0 (they write nothing)."""

    record: dict[str, Any] | None
    model: nn.Module
    windows: Windows
    device: torch.device
    history: list[dict[str, Any]] = field(default_factory=list)

    def forecast_kelvin(self, split: str = "test") -> np.ndarray:
        out = predict(self.model, self.windows.x[split], self.device).cpu().numpy()
        return self.windows.to_kelvin(out)


def _make_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int):
    total = cfg.epochs * steps_per_epoch
    if cfg.lr_schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total, pct_start=0.25)
    if cfg.lr_schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    return None


def _save_checkpoint(path: str, state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _load_checkpoint(path: str, cfg: TrainConfig) -> dict[str, Any] | None:
    p = Path(path)
    if not p.exists():
        return None
    try:
        state = torch.load(p, map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("not an lstmnb checkpoint")
    except Exception as exc:  # torch raises many kinds for truncated or foreign files
        raise CheckpointError(
            f"checkpoint {p} is corrupt or half-written ({type(exc).__name__}); delete it to start over, "
            f"or run without --resume"
        ) from None
    want, have = cfg.trajectory_key(), state.get("key", {})
    diff = sorted(k for k in set(want) | set(have) if json.dumps(want.get(k), default=str) != json.dumps(have.get(k), default=str))
    if diff:
        detail = ", ".join(f"{k}: checkpoint {have.get(k)!r} vs now {want.get(k)!r}" for k in diff[:4])
        raise CheckpointError(f"checkpoint {p} is from a different configuration ({detail}); "
                              f"use the same settings to resume, or another --checkpoint path")
    return state


def make_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """Adam; fused into one kernel per step where torch supports it on the device, and capturable
    (state on the device, no host sync) when the step is captured as a CUDA graph."""
    kw: dict[str, Any] = {"lr": cfg.lr, "weight_decay": cfg.weight_decay}
    if cfg.cuda_graph:
        kw["capturable"] = True
    elif cfg.fused_adam and device.type in ("cpu", "cuda", "mps"):
        kw["fused"] = True
    return torch.optim.Adam(model.parameters(), **kw)


class Trainer:
    """The pieces of a run that every strategy shares: model, optimiser, schedule, RNG, history, checkpoints.

    ``train`` drives it on one device; ``lstmnb.parallel`` drives the same object per rank with a
    wrapped model (``self.model``) and its own batches, so the step, timing and checkpoint logic
    exist once.
    """

    def __init__(self, windows: Windows, cfg: TrainConfig, device: torch.device, *,
                 steps_per_epoch: int | None = None, writer: bool = True):
        self.windows, self.cfg, self.device = windows, cfg, device
        self.writer = writer  # False on DDP ranks other than 0: they never write checkpoints
        self.adtype = amp_dtype(cfg.amp, device)
        torch.manual_seed(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.core = Forecaster(cfg.model_config(windows.n_features)).to(device)
        self.model: nn.Module = torch.compile(self.core) if cfg.compile else self.core  # strategies wrap it
        self._graph: tuple | None = None  # (graph, static x, static y, static loss) once captured
        self.opt = make_optimizer(self.core, cfg, device)
        self.n_train = windows.x["train"].shape[0]
        self.sched = _make_scheduler(self.opt, cfg, steps_per_epoch or math.ceil(self.n_train / cfg.batch_size))
        self.scaler = torch.amp.GradScaler("cuda") if self.adtype == torch.float16 else None
        self.target_std = float(windows.scaler.std[0])
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {"val_rmse_k": math.inf, "epoch": None, "state": None}
        self.start_epoch = 0
        self.stopped_early = False
        self.peak_since_reset = False  # set by start_peak_memory: the memory figure is this run's own
        self.x_val = torch.from_numpy(windows.x["val"]).to(device)
        self.y_val = torch.from_numpy(windows.y["val"]).to(device)

    # --- state ------------------------------------------------------------------------------------
    def restore(self) -> bool:
        """Load ``cfg.checkpoint`` when resuming; True if a checkpoint was found."""
        state = _load_checkpoint(self.cfg.checkpoint, self.cfg) if self.cfg.resume else None
        if state is None:
            return False
        self.core.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        if self.sched is not None and state.get("scheduler"):
            self.sched.load_state_dict(state["scheduler"])
        self.gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.history, self.best, self.start_epoch = state["history"], state["best"], state["epoch"]
        return True

    def save(self) -> None:
        """Write the checkpoint atomically (a crash mid-write leaves the previous one intact)."""
        if not self.cfg.checkpoint or not self.writer:
            return
        _save_checkpoint(self.cfg.checkpoint, {
            "format": CHECKPOINT_FORMAT, "key": self.cfg.trajectory_key(), "epoch": len(self.history),
            "model": self.core.state_dict(), "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict() if self.sched is not None else None,
            "generator": self.gen.get_state(), "torch_rng": torch.get_rng_state(),
            "history": self.history, "best": self.best,
        })

    def start_peak_memory(self) -> None:
        """Reset the peak-memory statistics once the model and data are placed, before the first epoch."""
        self.peak_since_reset = reset_peak_memory(self.device)

    # --- batches ----------------------------------------------------------------------------------
    def fast_batches(self, x: torch.Tensor, y: torch.Tensor, batch_size: int,
                     shard: tuple[int, int] | None = None):
        """Shuffled index batches over device tensors; ``shard=(rank, world)`` takes every world-th sample.

        The permutation comes from the run's generator, so every rank draws the same one and takes
        its own interleaved share of it.
        """
        perm = torch.randperm(self.n_train, generator=self.gen).to(x.device)
        if shard is not None:
            rank, world = shard
            perm = perm[: (self.n_train // world) * world][rank::world]
        for i in range(0, perm.numel(), batch_size):
            idx = perm[i : i + batch_size]
            yield x.index_select(0, idx), y.index_select(0, idx)

    def loader_batches(self, loader):
        for xb, yb in loader:
            yield xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)

    # --- one step, one epoch ----------------------------------------------------------------------
    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """One optimiser step; returns the detached loss (no host sync)."""
        with torch.autocast(device_type=self.device.type, dtype=self.adtype, enabled=self.adtype is not None):
            loss = F.mse_loss(self.model(xb).float(), yb)
        self.opt.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.opt)
        else:
            loss.backward()
        if self.cfg.grad_clip:
            nn.utils.clip_grad_norm_(self.core.parameters(), self.cfg.grad_clip)
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        if self.sched is not None:
            self.sched.step()
        return loss.detach()

    def graph_step(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """``step`` replayed from a captured CUDA graph (whole-network capture, as PyTorch's CUDA
        semantics notes describe): the first full-size batches run eagerly on a side stream to warm
        up, then one step is captured with static input tensors; later steps copy their batch into
        those tensors and replay. A final smaller batch runs eagerly."""
        if self._graph is None or xb.shape != self._graph[1].shape:
            if self._graph is not None or xb.shape[0] != self.cfg.batch_size:
                return self.step(xb, yb)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up steps are real training steps on this batch
                    loss = self.step(xb, yb)
            torch.cuda.current_stream().wait_stream(side)
            sx, sy = xb.clone(), yb.clone()
            graph = torch.cuda.CUDAGraph()
            self.opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                with torch.autocast("cuda", dtype=self.adtype, enabled=self.adtype is not None):
                    static_loss = F.mse_loss(self.model(sx).float(), sy)
                static_loss.backward()
                if self.cfg.grad_clip:
                    nn.utils.clip_grad_norm_(self.core.parameters(), self.cfg.grad_clip)
                self.opt.step()
            self._graph = (graph, sx, sy, static_loss)
            return loss
        graph, sx, sy, static_loss = self._graph
        sx.copy_(xb, non_blocking=True)
        sy.copy_(yb, non_blocking=True)
        graph.replay()
        return static_loss.detach().clone()

    def run_epoch(self, batches) -> tuple[torch.Tensor, int, float]:
        """Train over ``batches``; returns (summed loss on the device, samples seen, seconds)."""
        synchronize(self.device)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=self.device)
        seen = 0
        self.model.train()
        step = self.graph_step if self.cfg.cuda_graph else self.step
        for xb, yb in batches:
            loss_sum += step(xb, yb) * xb.shape[0]
            seen += xb.shape[0]
        synchronize(self.device)
        return loss_sum, seen, time.perf_counter() - t0

    def end_epoch(self, train_loss: float, train_s: float, samples: int, **extra: Any) -> dict[str, Any]:
        """Validate, append the epoch entry, track the best epoch, write the checkpoint."""
        t1 = time.perf_counter()
        val_mse, val_rmse = rmse_kelvin(self.core, self.x_val, self.y_val, self.target_std,
                                        self.cfg.eval_batch_size)
        eval_s = time.perf_counter() - t1  # rmse_kelvin's .item() already waited for the evaluation
        cumulative = (self.history[-1]["cumulative_s"] if self.history else 0.0) + train_s + eval_s
        epoch = len(self.history) + 1
        entry = {
            "epoch": epoch, "train_s": train_s, "eval_s": eval_s, "cumulative_s": cumulative,
            "train_loss": train_loss, "val_loss": val_mse, "val_rmse_k": val_rmse,
            "samples_per_s": samples / train_s if train_s > 0 else None, "lr": self.opt.param_groups[0]["lr"],
            **extra,
        }
        self.history.append(entry)
        if val_rmse < self.best["val_rmse_k"]:
            self.best = {"val_rmse_k": val_rmse, "epoch": epoch,
                         "state": copy.deepcopy(self.core.state_dict()) if self.cfg.patience else None}
        self.save()
        return entry

    def whole_set_batches(self) -> Callable[[], Any]:
        """A function giving each epoch's batches over the whole training set in this process: the
        fast path (training set moved to the device once, shuffled index batches) or the DataLoader."""
        cfg, w = self.cfg, self.windows
        if cfg.input_path == "fast":
            x = torch.from_numpy(w.x["train"]).to(self.device)
            y = torch.from_numpy(w.y["train"]).to(self.device)
            return lambda: self.fast_batches(x, y, cfg.batch_size)
        loader = torch.utils.data.DataLoader(
            WindowDataset(w.x["train"], w.y["train"]), batch_size=cfg.batch_size, shuffle=True,
            generator=self.gen, num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory and self.device.type == "cuda", persistent_workers=cfg.num_workers > 0,
        )
        return lambda: self.loader_batches(loader)

    def fit(self, desc: str, on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
            **extra: Any) -> None:
        """The epoch loop of a single-process run (one device, or DataParallel over several)."""
        batches = self.whole_set_batches()
        bar = self.progress_bar(desc)
        for _ in range(self.start_epoch, self.cfg.epochs):
            loss_sum, seen, train_s = self.run_epoch(batches())
            entry = self.end_epoch(loss_sum.item() / seen, train_s, seen, **extra)
            bar.update(1)
            bar.set_postfix(loss=f"{entry['train_loss']:.4f}", val_rmse=f"{entry['val_rmse_k']:.3f}K")
            if on_epoch_end is not None:
                on_epoch_end(entry)
            if self.should_stop():
                break
        bar.close()

    def should_stop(self) -> bool:
        """Early stopping: ``patience`` epochs without a new best validation RMSE, or the target reached
        when ``stop_at_target`` is set."""
        p = self.cfg.patience
        if p and self.best["epoch"] is not None and len(self.history) - self.best["epoch"] >= p:
            self.stopped_early = True
        if self.cfg.stop_at_target and self.cfg.target_rmse is not None and self.history \
                and self.history[-1]["val_rmse_k"] <= self.cfg.target_rmse:
            self.stopped_early = True
        return self.stopped_early

    def finish(self, data_info: dict[str, Any] | None, **extra: Any) -> dict[str, Any] | None:
        """Restore the best weights when early stopping, evaluate on test, build the record.

        A DDP rank that does not write returns None: its record would be discarded, and building it
        costs a test-set evaluation and a git subprocess. It still restores the best weights, so its
        returned model is the writer's.
        """
        if self.cfg.patience and self.best.get("state") is not None:
            self.core.load_state_dict(self.best["state"])
        if not self.writer:
            return None
        return _finish_record(self.core, self.windows, self.cfg, self.device, self.history,
                              self.stopped_early, data_info,
                              memory=peak_memory_mb(self.device, self.peak_since_reset), **extra)

    def progress_bar(self, desc: str):
        from tqdm.auto import tqdm

        return tqdm(total=self.cfg.epochs, initial=self.start_epoch, desc=desc, unit="epoch",
                    disable=not self.cfg.progress, leave=False)


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
        from . import parallel

        return parallel.train_parallel(windows, cfg, data_info=data_info, on_epoch_end=on_epoch_end)
    device = resolve_device(cfg.device)
    if cfg.cuda_graph and device.type != "cuda":
        raise DeviceError(f"cuda_graph=True captures the step on a CUDA GPU; this run is on {device.type} "
                          f"(use --no-cuda-graph)")
    tr = Trainer(windows, cfg, device)
    tr.restore()
    tr.start_peak_memory()
    tr.fit(f"train {device}", on_epoch_end)
    record = tr.finish(data_info)
    return RunResult(record=record, model=tr.core, windows=windows, device=device, history=tr.history)


def time_to_target(history: list[dict[str, Any]], target: float | None) -> dict[str, Any]:
    """Seconds (cumulative, training + evaluation) to the first epoch whose validation RMSE <= target."""
    if target is None:
        return {"target_rmse_k": None}
    best = min((h["val_rmse_k"] for h in history), default=math.inf)
    for h in history:
        if h["val_rmse_k"] <= target:
            return {"target_rmse_k": target, "reached": True, "epoch": h["epoch"], "seconds": h["cumulative_s"],
                    "best_val_rmse_k": best}
    return {"target_rmse_k": target, "reached": False, "epoch": None, "seconds": None, "best_val_rmse_k": best,
            "note": f"not reached in {len(history)} epochs (best {best:.3f} K)"}


def summarize_timing(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Warm-up epoch apart from the steady ones; medians over the steady epochs."""
    train_s = [h["train_s"] for h in history]
    steady = train_s[1:] or train_s
    sps = [h["samples_per_s"] for h in history[1:]] or [h["samples_per_s"] for h in history]
    return {
        "train_s": sum(train_s),
        "eval_s": sum(h["eval_s"] for h in history),
        "wall_s": history[-1]["cumulative_s"] if history else 0.0,
        "warmup_epoch_s": train_s[0] if train_s else None,
        "epoch_s_median": statistics.median(steady) if steady else None,
        "samples_per_s": statistics.median(sps) if sps else None,
        "cumulative_s": [h["cumulative_s"] for h in history],
    }


def _finish_record(core: Forecaster, windows: Windows, cfg: TrainConfig, device: torch.device,
                   history: list[dict[str, Any]], stopped_early: bool, data_info: dict[str, Any] | None,
                   memory: dict[str, Any], **extra: Any) -> dict[str, Any]:
    from .records import new_record
    from .windows import error_metrics

    pred = predict(core, windows.x["test"], device, cfg.eval_batch_size).cpu().numpy()
    test = error_metrics(windows.to_kelvin(pred), windows.to_kelvin(windows.y["test"]))
    base = windows.baselines["test"]
    flops = flops_per_sample(core.config, cfg.window)
    timing = summarize_timing(history)
    timing["time_to_target"] = time_to_target(history, cfg.target_rmse)
    if timing["samples_per_s"]:
        timing["train_flops_per_s"] = timing["samples_per_s"] * flops["training"]
    metrics = {
        "test_rmse_k": test["rmse"], "test_mae_k": test["mae"],
        "persistence_rmse_k": base["persistence"]["rmse"], "persistence_mae_k": base["persistence"]["mae"],
        "climatology_rmse_k": base["climatology"]["rmse"], "climatology_mae_k": base["climatology"]["mae"],
        "val_persistence_rmse_k": windows.baselines["val"]["persistence"]["rmse"],
        "best_val_rmse_k": min((h["val_rmse_k"] for h in history), default=None),
        "epochs_run": len(history), "stopped_early": stopped_early,
    }
    data = dict(data_info or {})
    data.update(sizes=windows.sizes(), split_times=windows.split_times, features=windows.features,
                cells=windows.points)
    return new_record(
        cfg.experiment, status="ok", device=str(device), profile=cfg.profile,
        config=asdict(cfg), data=data, epochs=history, timing=timing, memory=memory,
        metrics=metrics, model={"parameters": count_parameters(core), "flops_per_sample": flops},
        **extra,
    )


def prepare_windows(request=None, cfg: TrainConfig = TrainConfig(), *, progress: bool = True):
    """Extract (or read from cache) the request's series and window it as ``cfg`` says.

    Returns (windows, data_info) where data_info is the record's ``data`` section.
    """
    from . import era5
    from .windows import windows_from_dataset

    request = request or era5.Request()
    ds = era5.extract(request, progress=progress)
    windows = windows_from_dataset(ds, cfg.window_config())
    info = {"source": request.source, "variables": list(request.variables),
            "points": [list(p) for p in request.points] if request.points else None,
            "start": str(request.start), "end": str(request.end), "hours": int(ds.sizes["time"])}
    return windows, info


def run(request=None, cfg: TrainConfig = TrainConfig(), *, results: str | os.PathLike | None = "default",
        on_epoch_end: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Prepare data, train, and append the record to ``results`` (a .jsonl file or folder; None: don't)."""
    from .parallel import is_rank_zero  # lazily, like train's other use of lstmnb.parallel
    from .records import append_record

    windows, info = prepare_windows(request, cfg, progress=cfg.progress)
    result = train(windows, cfg, data_info=info, on_epoch_end=on_epoch_end)
    if results is not None and is_rank_zero():  # under torchrun only rank 0 writes
        append_record(result.record, None if results == "default" else results)
    return result


def skipped_record(cfg: TrainConfig, reason: str, **extra: Any) -> dict[str, Any]:
    """A record for a run that could not happen here (no GPU): a reason, never a number."""
    from .records import new_record

    return new_record(cfg.experiment, status="skipped", reason=reason, device=cfg.device, profile=cfg.profile,
                      config=asdict(cfg), **extra)


def with_overrides(cfg: TrainConfig, **overrides: Any) -> TrainConfig:
    """A copy of ``cfg`` with the given fields replaced (unknown names are an error)."""
    return config_from_dict({**asdict(cfg), **overrides})
