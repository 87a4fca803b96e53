"""Checkpoints of a run: written atomically after each epoch, and checked against the run's
configuration before a resume (a checkpoint from other settings is refused by name).

A checkpoint carries its run's ``run_id``; once the finished run's record is appended, the checkpoint
is marked ``recorded`` (the record and where it went), so resuming a finished run again shows that
record instead of appending a second one.

The file is one header line, ``lstmnb-checkpoint sha256 <hex>``, then ``torch.save``'s bytes: the
SHA-256 of those bytes is checked on every read, so a changed bit anywhere (weights, optimiser or RNG
state, history) refuses the file instead of resuming from it. Read checkpoints with ``read_checkpoint``.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, OutputError
from ..paths import atomic_path, sweep_stale_temps, why_not_written
from .config import TrainConfig

CHECKPOINT_FORMAT = 1
_HEADER = b"lstmnb-checkpoint sha256 "  # then 64 hex digits and a newline, then torch.save's bytes


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    # a writer killed mid-write left its temporary beside the checkpoint: remove it first
    sweep_stale_temps(Path(path).parent, final=Path(path).name)
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getbuffer()
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            fh.write(_HEADER + hashlib.sha256(payload).hexdigest().encode() + b"\n")
            fh.write(payload)
    except OSError as exc:
        raise OutputError(f"checkpoint {path} could not be written: {why_not_written(exc)}; the epochs "
                          "checkpointed before are kept") from None


def read_checkpoint(path: str) -> dict[str, Any] | None:
    """The checkpoint's state as saved (None when there is none); a damaged file is an error."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        with open(p, "rb") as fh:
            _verify(p, fh)  # leaves fh at the start of torch.save's bytes
            state = torch.load(fh, map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("not an lstmnb checkpoint")
    except CheckpointError:
        raise
    except Exception as exc:  # torch raises many kinds for truncated or foreign files
        raise CheckpointError(
            f"checkpoint {p} is corrupt or half-written ({type(exc).__name__}); delete it to start over, "
            f"or run without --resume"
        ) from None
    return state


def _verify(path: Path, fh) -> None:
    """Check the bytes after the header line of the open checkpoint ``fh`` against the SHA-256 in it
    (CheckpointError on a mismatch; the file is left as it is) and leave ``fh`` at their start (torch.load
    reads an archive from where its file stands). A file without the header was written by an older
    lstmnb: read unverified from its start, with a warning."""
    header = fh.read(len(_HEADER) + 65)
    if not header.startswith(_HEADER):
        if header[:2] == b"PK":  # torch.save's zip, as lstmnb wrote it before checkpoints had checksums
            warnings.warn(f"checkpoint {path} was written by an older lstmnb, without a checksum: it is read "
                          "unverified; the next epoch's checkpoint has one", stacklevel=4)
        fh.seek(0)
        return
    digest = hashlib.sha256()
    while chunk := fh.read(1 << 20):
        digest.update(chunk)
    want, have = header[len(_HEADER):-1].decode("ascii", "replace"), digest.hexdigest()
    if have != want:
        raise CheckpointError(f"checkpoint {path} is damaged: its content no longer matches the SHA-256 written "
                              f"with it ({want[:12]}... vs {have[:12]}... now), so it was changed after it was "
                              "written (a disk or copy fault); it was left as it is: restore a good copy, or "
                              "delete it to start over")
    fh.seek(len(header))


def load_checkpoint(path: str, cfg: TrainConfig) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if it exists, after checking it was made with ``cfg``'s trajectory."""
    state = read_checkpoint(path)
    if state is None:
        return None
    want, have = cfg.trajectory_key(), state.get("key", {})
    diff = sorted(k for k in set(want) | set(have) if json.dumps(want.get(k), default=str) != json.dumps(have.get(k), default=str))
    if diff:
        detail = ", ".join(f"{k}: checkpoint {have.get(k)!r} vs now {want.get(k)!r}" for k in diff[:4])
        raise CheckpointError(f"checkpoint {path} is from a different configuration ({detail}); "
                              f"use the same settings to resume, or another --checkpoint path")
    return state


def mark_recorded(path: str, record: dict[str, Any], results: str | Path) -> None:
    """Note in the checkpoint that its finished run's ``record`` is in ``results`` (atomically: a kill
    leaves the unmarked checkpoint, and the results file's run ids still prevent a second record)."""
    state = read_checkpoint(path)
    if state is None or state.get("run_id") != record.get("run_id"):
        return  # not this run's checkpoint (it was moved or replaced meanwhile): nothing to mark
    state["recorded"] = {"run_id": record["run_id"], "results": str(results), "epochs": len(state["history"]),
                         "record": record}
    save_checkpoint(path, state)


def recorded_marker(state: dict[str, Any] | None, cfg: TrainConfig) -> dict[str, Any] | None:
    """The checkpoint's ``recorded`` mark when its run is finished as ``cfg`` asks (all epochs, or
    stopped early) and was recorded at that point; None otherwise (more epochs asked for: a new run)."""
    if not state or not state.get("recorded"):
        return None
    history, mark = state["history"], state["recorded"]
    finished = len(history) >= cfg.epochs or cfg.stops_after(history, state["best"])
    return mark if finished and mark.get("epochs") == len(history) else None
