"""Where lstmnb keeps its files: a user cache directory (sample store, extracted series) and results."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CACHE_ENV = "LSTMNB_CACHE"
RESULTS_ENV = "LSTMNB_RESULTS"


def cache_dir() -> Path:
    """The user cache directory: $LSTMNB_CACHE, else $XDG_CACHE_HOME/lstmnb, else ~/.cache/lstmnb."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV]).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(base) / "lstmnb"
    root.mkdir(parents=True, exist_ok=True)
    return root


def results_dir() -> Path:
    """The default results folder: $LSTMNB_RESULTS, else ./results."""
    return Path(os.environ.get(RESULTS_ENV) or "results")


@contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` only if the block succeeds.

    Works for files and directories (a Zarr store): an interrupted write never leaves a half-written
    ``target``, and an existing ``target`` survives until the new one is complete.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp.rmdir()  # the caller creates a file or directory here
    tmp = tmp.with_name(tmp.name + suffix)
    try:
        yield tmp
        if target.is_dir() and tmp.is_dir():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            _remove(old)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            _remove(tmp)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
