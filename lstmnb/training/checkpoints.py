"""Checkpoints of a run: written atomically after each epoch, and checked against the run's
configuration before a resume (a checkpoint from other settings is refused by name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, OutputError
from ..paths import atomic_path, why_not_written
from .config import TrainConfig

CHECKPOINT_FORMAT = 1


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    try:
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
    except OSError as exc:
        raise OutputError(f"checkpoint {path} could not be written: {why_not_written(exc)}; the epochs "
                          "checkpointed before are kept") from None


def load_checkpoint(path: str, cfg: TrainConfig) -> dict[str, Any] | None:
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

