"""Checkpoints of a run: written atomically after each epoch, checked against the run's configuration before a
resume (other settings are refused by name), and never replaced by a new run unless told (``--resume`` continues
it, ``--overwrite-checkpoint`` replaces it). Once the finished run's record is appended, the checkpoint is marked
``recorded`` (the record and where it went), so resuming it again shows that record instead of appending another.

The file is exactly what ``torch.save`` writes (``torch.load(path)`` opens it; every value in it passes torch's
``weights_only`` loader). Its SHA-256 lies in ``<path>.sha256`` (``sha256sum``'s format), written by every save and
checked on every read: a changed bit, or no checksum file (an older lstmnb's file, a foreign one), refuses the file.
While a save replaces the file, the checksum file lists both digests (the old one hashed from the file at the path),
so a kill at any moment, after any number of killed saves, leaves a file its checksum accepts. A run reads its
checkpoint once, before any work (``open_checkpoint``; ``read_checkpoint`` reads one)."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, OutputError
from ..paths import atomic_path, sweep_stale_temps, why_not_written
from ..rules import PYTHON, Spelling
from .config import TrainConfig

CHECKPOINT_FORMAT = 1  # the layout of the saved dict (unchanged by where its checksum lives)

# fields that do not change the trajectory of a run: a checkpoint may be resumed across them
RESUME_FREE = {"epochs", "resume", "checkpoint", "device", "num_workers", "pin_memory", "persistent_workers",
               "target_rmse", "sample_tensors", "heap", "loss_every", "patience", "stop_at_target", "compile",
               "overwrite_checkpoint", "experiment", "blend", "threads", "eval_batch_size", "progress", "profile",
               "dist_timeout_s", "preset"}


def trajectory_key(cfg: TrainConfig) -> dict[str, Any]:
    """The fields of ``cfg`` that determine the sequence of weights, with the learning rate as used (given or chosen
    by lead); a resumed checkpoint must match them."""
    return {**{k: v for k, v in asdict(cfg).items() if k not in RESUME_FREE}, "lr": cfg.learning_rate}


def key_differences(cfg: TrainConfig, state: dict[str, Any]) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The fields of ``trajectory_key`` where checkpoint ``state``'s run and ``cfg`` differ, with both keys."""
    want, have = trajectory_key(cfg), state.get("key", {})
    return sorted(k for k in set(want) | set(have) if json.dumps(want.get(k), default=str)
                  != json.dumps(have.get(k), default=str)), want, have


def checksum_path(path: str | Path) -> Path:
    """Where the checkpoint's SHA-256 lies: ``<path>.sha256``."""
    return Path(f"{path}.sha256")


def _checksum_lines(path: Path) -> list[tuple[str, bool]]:
    """Each line's first word in the checksum file beside ``path``, and whether it is a SHA-256 (64 hex digits)."""
    try:
        lines = checksum_path(path).read_bytes().decode("ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return [("", False)] if checksum_path(path).is_file() else []
    words = [line.split()[0].lower() for line in lines if line.strip()]
    return [(w, len(w) == 64 and all(c in "0123456789abcdef" for c in w)) for w in words] or [("", False)]


def sweep_checkpoint_temps(path: str | Path) -> int:
    """Remove the temporaries that killed writers left beside the checkpoint at ``path`` and its checksum
    (``paths.sweep_stale_temps``: a dead process's on this host, or old ones); returns how many."""
    p = Path(path)
    return sum(sweep_stale_temps(p.parent, final=name) for name in (p.name, checksum_path(p).name))


def _write_digests(path: Path, digests: list[str]) -> None:
    with atomic_path(checksum_path(path)) as tmp:
        tmp.write_text("".join(f"{d}  {path.name}\n" for d in digests), encoding="ascii")


def _standing_digest(path: Path) -> str | None:
    """The SHA-256 of the file at ``path`` if its checksum file lists it (kept there while a save replaces it); never
    an earlier line of that file, which after an interrupted save names bytes that never reached the path."""
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    return digest if (digest, True) in _checksum_lines(path) else None


def save_checkpoint(path: str, state: dict[str, Any]) -> None:
    p = Path(path)
    # a writer killed mid-write left its temporaries beside the checkpoint: remove them first
    sweep_checkpoint_temps(p)
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getbuffer()
    digest = hashlib.sha256(payload).hexdigest()
    try:
        old = [d for d in [_standing_digest(p)] if d and d != digest]
        _write_digests(p, [digest] + old)  # both accepted while the file is replaced
        with atomic_path(p) as tmp, open(tmp, "wb") as fh:
            fh.write(payload)
        _write_digests(p, [digest])
    except OSError as exc:
        raise OutputError(f"checkpoint {path} could not be written: {why_not_written(exc)}; the epochs "
                          "checkpointed before are kept") from None


def _replace_advice(say: Spelling) -> str:
    """How a run replaces the checkpoint it was asked to resume, as the user gives settings (``say``)."""
    return f"give {say('overwrite_checkpoint', True)} instead of {say('resume', True)}"


def read_checkpoint(path: str, say: Spelling = PYTHON) -> dict[str, Any] | None:
    """The checkpoint's state as saved (None when there is none); a damaged file is an error whose advice names
    settings as ``say`` spells them."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        data = p.read_bytes()
        _check_digest(p, data, say)
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("not an lstmnb checkpoint")
    except CheckpointError:
        raise
    except Exception as exc:  # torch raises many kinds for truncated or foreign files
        raise CheckpointError(
            f"checkpoint {p} is corrupt or half-written ({type(exc).__name__}: not a checkpoint lstmnb "
            f"can read); delete it to start over, or {_replace_advice(say)} to replace it"
        ) from None
    return state


def _either_advice(path: Path) -> str:
    """What to do when the checkpoint at ``path`` or its checksum file may be the damaged one."""
    return (f"both were left as they are: if you trust the checkpoint, write its checksum anew (sha256sum {path} > "
            f"{checksum_path(path)}), else restore a good copy of both, or delete both to start over")


def _check_digest(path: Path, data: bytes, say: Spelling) -> None:
    """``data`` checked against the SHA-256 beside ``path``: a CheckpointError when that is missing, damaged (a line
    not a SHA-256, not ASCII, no line at all) or does not match; the files are left as they are."""
    sums, lines = checksum_path(path), _checksum_lines(path)
    if not lines:
        raise CheckpointError(f"checkpoint {path} has no {sums.name} beside it, so it cannot be verified (every "
                              "checkpoint lstmnb saves has one: this is an older lstmnb's file, a foreign one or a copy "
                              f"made without it); copy its {sums.name} beside it, write one if you trust it (sha256sum "
                              f"{path} > {sums}), or replace it: delete it, or {_replace_advice(say)}")
    bad = next(((n, word) for n, (word, ok) in enumerate(lines, 1) if not ok), None)
    if bad is not None:
        fault = (f"line {bad[0]} starts with {bad[1][:20]!r}, not a SHA-256 of 64 hex digits" if bad[1]
                 else "it holds no readable SHA-256 line")
        raise CheckpointError(f"the checksum file {sums} beside checkpoint {path} is damaged ({fault}), so the "
                              f"checkpoint cannot be verified; {_either_advice(path)}")
    have = hashlib.sha256(data).hexdigest()
    if have not in [d for d, _ in lines]:
        raise CheckpointError(f"checkpoint {path} does not match the SHA-256 in {sums.name} ({lines[0][0][:12]}... "
                              f"there, {have[:12]}... now): one of them was changed after it was written (a disk or "
                              f"copy fault, or the checkpoint rewritten by hand); {_either_advice(path)}")


def refuse_replacing(cfg: TrainConfig, say: Spelling = PYTHON) -> None:
    """Refuse before any work, in one line, a new run (neither ``resume`` nor ``overwrite_checkpoint``) whose
    ``checkpoint`` path holds a file (naming it), and any run whose checksum path is a folder (its first save fails);
    settings named as ``say`` spells them."""
    given, k = say("checkpoint", cfg.checkpoint), say.key
    if cfg.checkpoint and checksum_path(cfg.checkpoint).is_dir():
        raise CheckpointError(f"{given}: its checksum file {checksum_path(cfg.checkpoint)} is a folder, so no "
                              f"checkpoint could be saved; move or delete that folder, or give another "
                              f"{k('checkpoint')} path")
    if not cfg.checkpoint or cfg.resume or cfg.overwrite_checkpoint or not Path(cfg.checkpoint).exists():
        return
    try:
        state = read_checkpoint(cfg.checkpoint)
    except CheckpointError:
        state = None
    if state is None:
        raise CheckpointError(f"{given} already holds a file that is not a readable checkpoint; this new run would "
                              f"replace it: {say('overwrite_checkpoint', True)} replaces it, or delete it, or give "
                              f"another {k('checkpoint')} path")
    diff, want, have = key_differences(cfg, state)
    setting = (", ".join(f"{k} {have.get(k)!r} there, {want.get(k)!r} here" for k in diff[:3])
               if diff else "the same settings as this one")
    held = f"run {state.get('run_id')} ({len(state.get('history', []))} epoch(s); {setting})"
    raise CheckpointError(f"{given} already holds {held}; this new run would replace it: {say('resume', True)} "
                          f"continues that run, {say('overwrite_checkpoint', True)} replaces it, or give another "
                          f"{k('checkpoint')} path")


def open_checkpoint(cfg: TrainConfig, say: Spelling = PYTHON) -> dict[str, Any] | None:
    """What a run of ``cfg`` starts from, read and checked once before any work: the checkpoint it resumes, made with
    ``cfg``'s trajectory (None: none yet, or a new run; ``refuse_replacing`` first). Refusals name settings as
    ``say`` spells them (``resume=True``, ``--resume``)."""
    refuse_replacing(cfg, say)
    state = read_checkpoint(cfg.checkpoint, say) if cfg.resume else None
    if state is None:
        return None
    diff, want, have = key_differences(cfg, state)
    if diff:
        detail = ", ".join(f"{k}: checkpoint {have.get(k)!r} vs now {want.get(k)!r}" for k in diff[:4])
        raise CheckpointError(f"checkpoint {cfg.checkpoint} is from a different configuration ({detail}); "
                              f"use the same settings to resume, or another {say.key('checkpoint')} path")
    return state


def check_same_data(path: str | None, state: dict[str, Any], data: dict[str, Any], say: Spelling = PYTHON) -> None:
    """A checkpoint is resumed only on the data it was trained on (``Windows.identity``): else a
    CheckpointError naming what differs (settings as ``say`` spells them). Checkpoints written before lstmnb kept
    that are not checked."""
    have = state.get("data")
    if have is None:
        return
    diff = [k for k in sorted(set(data) | set(have)) if json.dumps(have.get(k), default=str)
            != json.dumps(data.get(k), default=str)]
    if not diff:
        return
    shown = [k for k in diff if k != "train_targets"]
    detail = ("; ".join(f"{k}: checkpoint {have.get(k)} vs now {data.get(k)}" for k in shown[:2]) if shown else
              f"the same points and hours with other values: another {say.key('source')}?")
    raise CheckpointError(f"checkpoint {path} was trained on other data ({detail}); resume it with the data "
                          f"request it was made with, or give another {say.key('checkpoint')} path")


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
