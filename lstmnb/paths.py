"""Where lstmnb keeps its files: a user cache directory (sample store, extracted series) and results."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CACHE_ENV = "LSTMNB_CACHE"
RESULTS_ENV = "LSTMNB_RESULTS"
STALE_TMP_SECONDS = 600.0  # a temporary file this old is a leftover, whoever wrote it (writes take ms)
HOST = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in socket.gethostname())[:40] or "host"
# temporaries are ".<final name>.<host>.<pid>[-<n>].tmp[<suffix>]": who wrote them is in the name
_TMP = re.compile(r"^\.(?P<final>.+)\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)(?:-\d+)?\.tmp(?:\.[A-Za-z0-9]+)?$")
_serial = itertools.count()


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


def temp_path(target: str | os.PathLike, suffix: str = "") -> Path:
    """A unique temporary name beside ``target`` that says which host and process wrote it."""
    target = Path(target)
    return target.parent / f".{target.name}.{HOST}.{os.getpid()}-{next(_serial)}.tmp{suffix}"


@contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` only if the block succeeds.

    Works for files (flushed to disk before the rename) and directories (a Zarr store): an
    interrupted write never leaves a half-written ``target``, and an existing ``target`` survives
    until the new one is complete. ``suffix`` ends the temporary name (matplotlib picks the format
    from it). A killed writer's leftover is removed later by ``sweep_stale_temps``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(target, suffix)
    try:
        yield tmp
        if target.is_dir() and tmp.is_dir():
            old = temp_path(target, ".old")  # named like a temporary, so a sweep finds a killed swap's leftover
            os.replace(target, old)
            os.replace(tmp, target)
            _remove(old)
        else:
            if tmp.is_file():
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            _remove(tmp)


def write_atomic(target: str | os.PathLike, payload: bytes) -> Path:
    """Write ``payload`` to ``target`` through ``atomic_path``."""
    with atomic_path(target) as tmp:
        tmp.write_bytes(payload)
    return Path(target)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists but is someone else's
    return True


def sweep_stale_temps(directory: str | os.PathLike, *, final: str | None = None, now: float | None = None,
                      max_age: float = STALE_TMP_SECONDS) -> int:
    """Remove the temporaries of ``atomic_path`` that killed writers left in ``directory`` (only those
    of the file or folder named ``final`` when given).

    Stale: written on this host by a process that is gone, or older than ``max_age`` whoever wrote
    it. A live writer's files (here, or on another host sharing the folder) stay. Returns how many.
    """
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    now = time.time() if now is None else now
    removed = 0
    for entry in entries:
        m = _TMP.match(entry.name)
        if m is None or (final is not None and m["final"] != final):
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue
        pid = int(m["pid"])
        dead_here = m["host"] == HOST and pid != os.getpid() and not _pid_alive(pid)
        if age > max_age or dead_here:
            try:
                _remove(Path(entry.path))
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
