"""The Trainer: what every strategy shares (model, optimiser, schedule, RNG, what feeds the step, the epoch loop,
validation, history, checkpoints), and the record it finishes with its rung of the ladder (``with_rung``;
``skipped_record`` for a run that gave no figures). Timing (docs/architecture.md): the device is synchronised before
every clock read, warm-up epochs are reported apart from steady ones, and evaluation time is kept out of training."""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from typing import Any, Callable, Iterable

import torch
from torch import nn

from ..machine.device import clock, for_run
from ..models import Forecaster
from ..records import new_record, new_run_id
from ..rules import PYTHON, Spelling
from ..rungs import rung_of
from ..windows import Windows
from .checkpoints import CHECKPOINT_FORMAT, recorded_marker, save_checkpoint, trajectory_key
from .config import TrainConfig, preset_config
from .evaluate import finish_record, rmse_kelvin
from .guards import Diverged, DivergenceGuard
from .step import (Feed, GraphStep, IndexBatches, StepParts, capture_epoch, graph_plan, graph_record, make_optimizer,
                   make_scheduler, optimizer_step, restore_optimizer)


class Trainer:
    """``pipeline.train`` drives it on one device; ``training.parallel`` drives the same object per rank with a
    wrapped model (``self.model``) and its own batches, so the step, timing and checkpoint logic exist once."""

    def __init__(self, windows: Windows, cfg: TrainConfig, device: torch.device, *,
                 steps_per_epoch: int | None = None, writer: bool = True, model: nn.Module | None = None,
                 say: Spelling = PYTHON):
        self.windows, self.cfg, self.device, self.say = windows, cfg, device, say  # say: how its advice names settings
        self.writer = writer  # False on DDP ranks other than 0: they never write checkpoints
        # what the run needs of the machine, asked once: the device made ready, autocast dtype, heap, peak memory
        self.machine = for_run(device, cfg.amp, cfg.heap)
        self.adtype = self.machine.adtype
        torch.manual_seed(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        # the point Forecaster the config describes, unless the caller brings its own network (region mode's
        # reads keyed windows); its ``config`` is the ModelConfig its FLOPs are counted from
        self.core = (model if model is not None else Forecaster(cfg.model_config(windows.n_features))).to(device)
        self.model: nn.Module = torch.compile(self.core) if cfg.compile else self.core  # strategies wrap it
        self.n_train = windows.x["train"].shape[0]
        self.use_graph, self.graph_reason = graph_plan(cfg, device, self.adtype,
                                                       (self.n_train // cfg.batch_size) * cfg.epochs)
        self.opt = make_optimizer(self.core, cfg, device, capturable=self.use_graph)
        # the training set as the epochs take it; with point weights the targets carry a column of loss weights
        self.feed = Feed(windows, cfg, device, self.gen)
        self.sched = make_scheduler(self.opt, cfg, steps_per_epoch or math.ceil(self.n_train / cfg.batch_size))
        self.scaler = torch.amp.GradScaler("cuda") if self.adtype == torch.float16 else None
        # non-finite figures end the run; the loss is read back every ``loss_every`` steps
        self.guard = DivergenceGuard(device, scaled=self.scaler is not None, every=cfg.loss_every)
        # the graph gets the step's pieces, not the Trainer (no reference cycle: a finished run frees its memory)
        self.graph = GraphStep(self.step_parts(), device) if self.use_graph else None
        self.target_std = float(windows.scaler.std[0])
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] = {"val_rmse_k": math.inf, "epoch": None, "state": None}
        self.start_epoch = 0
        self.stopped_early, self.stop_reason = False, None  # stop_reason: why early stopping ended the run
        self.run_id = new_run_id()  # kept in the checkpoint: a resumed run records under the same id
        self.x_val = torch.from_numpy(windows.x["val"]).to(device)
        self.y_val = torch.from_numpy(windows.y["val"]).to(device)

    def restore(self, state: dict[str, Any] | None) -> None:
        """Continue from checkpoint ``state`` (None: a new run) as ``pipeline.train`` read and checked it. A run
        stopped early stays stopped; a recorded finished run keeps its mark; one given more epochs is a new run."""
        if state is None:
            return
        self.core.load_state_dict(state["model"])
        restore_optimizer(self.opt, state["optimizer"])  # this run's step flags, whatever device saved it
        if self.sched is not None and state.get("scheduler"):
            self.sched.load_state_dict(state["scheduler"])
        self.gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.history, self.best, self.start_epoch = state["history"], state["best"], state["epoch"]
        self.run_id = state.get("run_id") or self.run_id
        if self.history:  # a run that had already stopped early stays stopped, and says why
            self.should_stop()
        if state.get("recorded") and recorded_marker(state, self.cfg) is None:
            self.run_id = new_run_id()  # training on past a recorded run: its result is another run's

    @functools.cached_property
    def data_identity(self) -> dict[str, Any]:
        """``Windows.identity`` of this run's windows, worked out once (it digests the training targets)."""
        return self.windows.identity()

    def save(self) -> None:
        """Write the checkpoint atomically (a crash mid-write leaves the previous one intact)."""
        if not self.cfg.checkpoint or not self.writer:
            return
        save_checkpoint(self.cfg.checkpoint, {
            "format": CHECKPOINT_FORMAT, "key": trajectory_key(self.cfg), "data": self.data_identity,
            "epoch": len(self.history), "run_id": self.run_id,
            "model": self.core.state_dict(), "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict() if self.sched is not None else None,
            "generator": self.gen.get_state(), "torch_rng": torch.get_rng_state(),
            "history": self.history, "best": self.best,
        })

    def step_parts(self) -> StepParts:
        """What a step touches now (``self.model`` as a strategy may have wrapped it), without the Trainer."""
        return StepParts(model=self.model, core=self.core, opt=self.opt, loss=self.feed.loss, guard=self.guard,
                         adtype=self.adtype, grad_clip=self.cfg.grad_clip, batch_size=self.cfg.batch_size)

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """One optimiser step on ``Feed.loss``; returns the detached loss (no host sync)."""
        return optimizer_step(self.step_parts(), xb, yb, scaler=self.scaler, sched=self.sched)

    def run_epoch(self, batches) -> tuple[torch.Tensor, int, float]:
        """Train over ``batches`` ((x, y) pairs, or ``IndexBatches`` for a graph); returns (summed loss on
        the device, samples seen, seconds)."""
        t0 = clock(self.device)
        self.model.train()
        self.guard.start_epoch(len(self.history) + 1)
        if isinstance(batches, IndexBatches):
            loss_sum, seen = self.graph.epoch(batches)  # each step's loss goes through self.guard too
        else:
            loss_sum, seen = torch.zeros((), device=self.device), 0
            for xb, yb in batches:
                loss_sum += self.guard.see(self.step(xb, yb)) * xb.shape[0]
                seen += xb.shape[0]
        self.guard.end_epoch()
        return loss_sum, seen, clock(self.device) - t0

    def end_epoch(self, train_loss: float, train_s: float, samples: int, **extra: Any) -> dict[str, Any]:
        """Validate, append the epoch entry, track the best epoch, write the checkpoint."""
        t1 = clock(self.device)
        val_mse = val_rmse = None  # no validation part (the published setting): nothing to evaluate
        if self.x_val.shape[0]:
            val_mse, val_rmse = rmse_kelvin(self.core, self.x_val, self.y_val, self.target_std,
                                            self.cfg.eval_batch_size)
        eval_s = clock(self.device) - t1
        # a non-finite figure (no validation part: non-finite weights) ends the run before it is kept
        self.guard.check_epoch(train_loss, val_rmse, self.core.parameters())
        cumulative = (self.history[-1]["cumulative_s"] if self.history else 0.0) + train_s + eval_s
        epoch = len(self.history) + 1
        entry = {
            "epoch": epoch, "train_s": train_s, "eval_s": eval_s, "cumulative_s": cumulative,
            "train_loss": train_loss, "val_loss": val_mse, "val_rmse_k": val_rmse,
            "samples_per_s": samples / train_s if train_s > 0 else None, "lr": self.opt.param_groups[0]["lr"],
            # this process's warm-up: a resumed run's first epochs pay it again (and recapture a graph)
            "warmup": epoch <= self.start_epoch + self.warmup_epochs(),
            **extra,
        }
        self.history.append(entry)
        if val_rmse is not None and val_rmse < self.best["val_rmse_k"]:
            self.best = {"val_rmse_k": val_rmse, "epoch": epoch,
                         "state": copy.deepcopy(self.core.state_dict()) if self.cfg.patience else None}
        self.save()
        return entry

    def fit(self, desc: str, on_epoch_end: Callable[[dict[str, Any]], None] | None = None, *,
            batches: Callable[[int], Iterable] | None = None,
            reduce: Callable[[int, torch.Tensor, int, float], tuple[float, int, float, dict[str, Any]]] | None = None,
            agree: Callable[[bool], bool] | None = None, show: bool = True, **extra: Any) -> None:
        """The epoch loop of every strategy. ``batches(epoch)`` gives an epoch's batches (default: the whole set in
        this process); ``reduce(epoch, loss_sum, seen, seconds)`` combines the ranks' figures into (mean loss,
        samples, seconds, extra entry fields); ``agree(stop)`` makes every rank take rank 0's stopping decision; a
        single process passes none of them. A non-finite figure ends the loop (``Diverged``; ``guard.found``)."""
        if self.stopped_early:  # resumed after the run had already stopped early: nothing to train
            return
        from tqdm.auto import tqdm

        batches = batches or self.feed.whole_set_batches(self.graph is not None)
        with tqdm(total=self.cfg.epochs, initial=self.start_epoch, desc=desc, unit="epoch",
                  disable=not (show and self.cfg.progress), leave=False) as bar, contextlib.suppress(Diverged):
            for epoch in range(self.start_epoch, self.cfg.epochs):
                loss_sum, seen, train_s = self.run_epoch(batches(epoch))
                if reduce is not None:
                    loss, seen, train_s, more = reduce(epoch, loss_sum, seen, train_s)
                else:
                    loss, more = loss_sum.item() / seen, {}
                entry = self.end_epoch(loss, train_s, seen, **extra, **more)
                bar.update(1)
                val = entry["val_rmse_k"]
                bar.set_postfix(loss=f"{entry['train_loss']:.4f}",
                                **({} if val is None else {"val_rmse": f"{val:.3f}K"}))
                if on_epoch_end is not None:
                    on_epoch_end(entry)
                stop = self.should_stop()
                self.stopped_early = agree(stop) if agree is not None else stop
                if self.stopped_early:
                    break

    def should_stop(self) -> bool:
        """Early stopping as the config says (``TrainConfig.stops_after``); once stopped, it stays stopped,
        and ``stop_reason`` says why."""
        if not self.stopped_early:
            self.stop_reason = self.cfg.stops_after(self.history, self.best)
            self.stopped_early = self.stop_reason is not None
        return self.stopped_early

    def final_stop_reason(self) -> str:
        """Why the epoch loop ended, for the record and the printout."""
        if self.stopped_early and self.stop_reason:
            return self.stop_reason
        held = len(self.history)
        if held > self.cfg.epochs:  # resumed from a checkpoint past this run's cap
            return (f"the checkpoint already held {held} epochs, more than the {self.cfg.epochs} asked for: no epoch "
                    "was run")
        cap = f"ran all {self.cfg.epochs} epoch{'s' if self.cfg.epochs != 1 else ''}"
        if self.cfg.patience and self.best["epoch"] is not None and held > 1:  # one epoch compares with nothing
            return (f"{cap} (the cap; validation was still improving within the patience of {self.cfg.patience}); "
                    f"the best epoch's weights (epoch {self.best['epoch']}) are kept")
        return cap

    def finish(self, data_info: dict[str, Any] | None, **extra: Any) -> dict[str, Any] | None:
        """Restore the best weights when early stopping, evaluate on test, build the record. A DDP rank that
        does not write returns None (no test evaluation and git subprocess for a record it would discard)."""
        if self.cfg.patience and self.best.get("state") is not None:
            self.core.load_state_dict(self.best["state"])
        if not self.writer:
            return None
        return with_rung(finish_record(self.core, self.windows, self.cfg, self.device, self.history,
                              self.stopped_early, data_info, stop_reason=self.final_stop_reason(),
                              cuda_graph=self.graph.record(self.graph_reason) if self.graph is not None
                              else graph_record(False, self.graph_reason), **self.machine.sections(),
                              run_id=self.run_id, warmup_epochs=self.warmup_epochs(), divergence=self.guard.outcome(
                                  self.cfg, self.say, resumed=self.start_epoch > 0, history=self.history, best=self.best), **extra))

    def warmup_epochs(self) -> int:
        """Epochs kept out of the steady timing (``step.capture_epoch``), counted from the process's first epoch:
        a resumed run warms up again."""
        return capture_epoch(self.use_graph, self.n_train // self.cfg.batch_size)


def skipped_record(cfg: TrainConfig, reason: str, status: str = "skipped", **extra: Any) -> dict[str, Any]:
    """A record for a run that gave no figures: it could not happen here (no GPU: ``skipped``) or ran out
    of memory (``oom``); a reason, never a number."""
    return with_rung(new_record(cfg.experiment, status=status, reason=reason, device=cfg.device,
                                profile=cfg.profile, config=cfg.as_record(), **extra))


def with_rung(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its rung of the ladder (``rungs.rung_of``, against the presets it compares) where it is one."""
    if rung := rung_of(record, {name: preset_config(name).as_record() for name in ("published", "recommended")}):
        record["ladder"] = rung
    return record
