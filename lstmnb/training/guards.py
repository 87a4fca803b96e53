"""Divergence as an outcome: a run whose training loss, gradient norm or validation forecast (with no validation
part: its weights at the epoch's end) stops being finite ends at that step, keeps its earlier epochs, checkpoint and
best weights, and is recorded as ``diverged`` with one line saying where, the likely causes and what to try.

Each step's loss (and the clipped gradient norm, where ``grad_clip`` computes one) stays on the device in a short
list. A CPU checks it after every step (microseconds); on a GPU, reading every step would stall the host (and a CUDA
graph's replays), so the list is read every ``GPU_CHECK_EVERY`` steps and at the epoch's end, in one transfer. The
first bad step is still named exactly; the steps after it ran on weights thrown away with the epoch, never saved.
DDP ranks check together at each epoch's end: the first bad step is the smallest over ranks, so all stop at the same
point and none waits in a collective. A non-finite gradient with no norm computed shows one step later, as the loss.
Under float16 autocast the GradScaler skips overflowing steps by design, so gradient norms are not checked there."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..rules import Spelling
from .config import lead_learning_rate

GPU_CHECK_EVERY = 100  # steps between two checks on a GPU (one transfer of that many values)
_NONE = 2**62  # "no bad step" in the reduction over ranks


class Diverged(Exception):
    """Raised inside the epoch loop at the first non-finite figure; ``Trainer.fit`` ends the loop there (the guard's
    ``found`` holds the record's ``divergence`` section)."""


class DivergenceGuard:
    """Watches one Trainer's figures; ``found`` is the record's ``divergence`` section once one went bad.
    ``scaled``: float16 autocast with a GradScaler (gradient norms of skipped steps are expected to overflow)."""

    def __init__(self, device: torch.device, *, scaled: bool = False, every: int | None = None):
        self.device, self.scaled = device, scaled
        self.every = every or (1 if device.type == "cpu" else GPU_CHECK_EVERY)
        self.ranks = False  # set by DDP: checks at epoch ends only, the first bad step the smallest over the ranks
        self.found: dict[str, Any] | None = None
        self._static_norm: torch.Tensor | None = None  # the captured CUDA graph's output, read after each replay
        self.start_epoch(0)

    def norm(self, total_norm: torch.Tensor) -> None:
        """The step's norm from ``clip_grad_norm_`` (in a CUDA graph capture: the output each replay overwrites)."""
        if self.scaled:
            return
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            self._static_norm = total_norm
        else:
            self._norm = total_norm.detach()

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.steps, self.checked = epoch, 0, 0
        self._losses, self._norms, self._norm = [], [], None  # unchecked steps' losses and norms; this step's norm

    def see(self, loss: torch.Tensor) -> torch.Tensor:
        """One step's detached loss; kept on the device, checked every ``every`` steps. Returns ``loss``."""
        self.steps += 1
        norm, self._norm = self._norm, None
        if norm is None and self._static_norm is not None and not self.scaled:
            norm = self._static_norm.detach().clone()  # a replay: the graph's norm of this step
        self._losses.append(loss)
        self._norms.append(norm)
        if not self.ranks and len(self._losses) >= self.every:
            self._check()
        return loss

    def end_epoch(self) -> None:
        """The check at the end of an epoch's steps (across ranks under DDP)."""
        self._check()

    def check_epoch(self, train_loss: float, val_rmse: float | None, weights=()) -> None:
        """The epoch's mean training loss and validation RMSE (None: no validation part) before they are kept; without
        one, ``weights`` (the model's parameters) instead: the epoch's last step can leave non-finite weights behind
        a finite loss (a gradient that overflowed), and no later step's loss would show it."""
        for what, value in (("mean training loss", train_loss), ("validation forecast (RMSE)", val_rmse)):
            if value is not None and not math.isfinite(value):
                self._stop(None, what, value)
        if val_rmse is None:
            finite = [torch.isfinite(w).all() for w in weights]
            if finite and not bool(torch.stack(finite).all()):  # one transfer
                self._stop(None, "update of the epoch's last step (the weights it left)", None)

    def _first_bad(self) -> tuple[int, str, float] | None:
        """(step, what, value) of the first non-finite loss or norm in the list, or None."""
        if not self._losses:
            return None
        given = [i for i, n in enumerate(self._norms) if n is not None]
        values = torch.stack([*self._losses, *(self._norms[i] for i in given)]).tolist()  # one transfer
        losses, norms = values[:len(self._losses)], dict(zip(given, values[len(self._losses):]))
        for i, loss in enumerate(losses):
            if not math.isfinite(loss):
                return self.checked + i + 1, "training loss", loss
            if i in norms and not math.isfinite(norms[i]):
                return self.checked + i + 1, "gradient norm", norms[i]
        return None

    def _check(self) -> None:
        bad = self._first_bad()
        self.checked += len(self._losses)
        self._losses, self._norms = [], []
        if self.ranks:  # every rank takes part, whether or not its own figures went bad
            import torch.distributed as dist

            key = torch.tensor([_NONE if bad is None else bad[0] * 2 + (bad[1] == "gradient norm")],
                               dtype=torch.int64, device=self.device)
            dist.all_reduce(key, op=dist.ReduceOp.MIN)
            first = int(key.item())
            if first == _NONE:
                return
            step, what = first // 2, "gradient norm" if first % 2 else "training loss"
            mine = bad is not None and (bad[0], bad[1]) == (step, what)
            bad = (step, what if mine else f"{what} (on another rank)", bad[2] if mine else None)
        if bad is not None:
            self._stop(*bad)

    def _stop(self, step: int | None, what: str, value: float | None) -> None:
        self.found = {"epoch": self.epoch, "step": step, "what": what, "value": value,
                      "steps_per_check": None if self.ranks else self.every}
        raise Diverged(what)

    def outcome(self, cfg, say: Spelling, *, resumed: bool, history: list[dict[str, Any]],
                best: dict[str, Any]) -> dict[str, Any] | None:
        """The record's ``divergence`` section with its one-line ``message`` (what to try named as ``say`` spells
        it); None when the run stayed finite."""
        if self.found is None:
            return None
        info = dict(self.found)
        value = info.get("value")
        where = f"epoch {info['epoch']}" + (f", step {info['step']}" if info.get("step") else "")
        causes = [f"a learning rate too high for this model and batch (lr {cfg.learning_rate:g}, batch {cfg.batch_size}"
                  + (f", {cfg.lr_schedule} schedule" if cfg.lr_schedule != "constant" else "") + ")"]
        usual = lead_learning_rate(cfg.lead_hours)  # a quarter of a rate far above it would diverge again
        lower = (f"{cfg.learning_rate / 4:g}" if cfg.learning_rate / 4 <= 10 * usual
                 else f"{usual:g}, the recommended rate at a {cfg.lead_hours} h lead")
        tries = [f"a lower {say.key('lr')} (e.g. {lower})"]
        if not cfg.grad_clip:
            tries.append(say("grad_clip", 1.0))
        if cfg.amp in ("fp16", "bf16", "auto") and self.device.type == "cuda":
            causes.append(f"overflow in reduced precision ({say('amp', cfg.amp)})")
            tries.append(say("amp", "off"))
        if resumed:
            causes.insert(0, "weights already damaged in the checkpoint it resumed from")
            tries.append(f"an earlier copy of the checkpoint, or a new run without {say('resume', True)}")
        if info["epoch"] == 1 and info.get("step") == 1:
            causes.append("non-finite values in the inputs")
        kept = []
        if history and cfg.checkpoint:
            kept.append(f"{cfg.checkpoint} keeps epoch {len(history)}")
        if cfg.patience and best.get("epoch") is not None:
            kept.append(f"the best epoch's weights (epoch {best['epoch']}, {best['val_rmse_k']:.3f} K) are kept")
        info["message"] = (f"the run diverged at {where}: the {info['what']} is "
                           f"{'not finite' if value is None else value} (likely: {'; '.join(causes)}); try "
                           f"{', '.join(tries)}"
                           + (f"; {' and '.join(kept)}" if kept else "; no earlier epoch was kept"))
        info["value"] = None if value is None else str(value)  # 'nan' / 'inf': JSON has no such numbers
        return info


def stop_if_diverged(record: dict[str, Any] | None, results=None) -> None:
    """For a study that needs every run's figures: a run that diverged is appended to ``results`` (None:
    not recorded) and the study stops there with its one-line reason (``DivergedError``)."""
    if record is None or record.get("status") != "diverged":
        return
    from ..records import append_record

    raise diverged_error(record, append_record(record, results), f"{record['experiment']}: ")


def diverged_error(record: dict[str, Any], written, prefix: str = ""):
    """The ``DivergedError`` of a diverged run's ``record``: its reason, and where it was recorded when it was
    (``written``: the results file, or None when nothing was written, e.g. ``--no-record``)."""
    from ..errors import DivergedError

    return DivergedError(prefix + record["reason"] + (f"; recorded as diverged in {written}" if written else ""))
