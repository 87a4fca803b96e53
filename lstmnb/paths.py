"""Where lstmnb keeps its files: a user cache directory (sample store, extracted series) and results."""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import socket
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from .errors import OutputError

CACHE_ENV = "LSTMNB_CACHE"
RESULTS_ENV = "LSTMNB_RESULTS"
STALE_TMP_SECONDS = 600.0  # a temporary file this old is a leftover, whoever wrote it (writes take ms)
HOST = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in socket.gethostname())[:40] or "host"
# temporaries are ".<final name>.<host>.<pid>[-<n>].tmp[<suffix>]": who wrote them is in the name
_TMP = re.compile(r"^\.(?P<final>.+)\.(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>\d+)(?:-\d+)?\.tmp(?:\.[A-Za-z0-9]+)?$")
_serial = itertools.count()


def cache_root() -> Path:
    """Where the user cache is (not created): $LSTMNB_CACHE, else $XDG_CACHE_HOME/lstmnb, else ~/.cache/lstmnb."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lstmnb"


def cache_dir() -> Path:
    """The user cache directory (``cache_root``), created on first use; OutputError when it cannot be."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cache folder {root} cannot be created: {why_not_written(exc)}; set {CACHE_ENV} to a "
                          "writable folder") from None
    return root


def check_cache() -> Path:
    """``check_writable`` for the user cache, naming the variable that moves it."""
    return check_writable(cache_root(), "folder", f"cache folder (${CACHE_ENV} or the default)")


def why_not_written(exc: OSError) -> str:
    """A failed write's OSError in a few words, read-only places and full disks named as such:
    'read-only (no permission to write there)', 'disk full (No space left on device)', ..."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "read-only (no permission to write there)"
    if exc.errno == errno.EROFS:
        return "read-only (a read-only file system)"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"disk full ({exc.strerror or 'no space left'})"
    if exc.errno == errno.ENOTDIR:
        return "a file stands where a folder is needed"
    return exc.strerror or str(exc)


def check_writable(path: str | os.PathLike, kind: str = "file", what: str = "output") -> Path:
    """Check, before any work, that ``path`` can be written as a ``kind`` ('file' or 'folder'); return it, else raise
    ``OutputError`` naming ``what``, the path and why. Writability is tried by creating and removing a probe file in
    the nearest existing folder (so it holds for root and read-only mounts too); nothing created stays."""
    if kind not in ("file", "folder"):
        raise ValueError(f"kind={kind!r} is not 'file' or 'folder'")
    text = os.fspath(path) if path is not None else ""
    if not str(text).strip():
        raise OutputError(f"{what} path is empty; give a {kind} name")
    p = Path(text).expanduser()
    if kind == "file" and p.is_dir():
        raise OutputError(f"{what} {p} is a folder; give a file path (e.g. {p / 'name'})")
    if kind == "folder" and p.exists() and not p.is_dir():
        raise OutputError(f"{what} {p} is a file, not a folder; give a folder path")
    if kind == "file" and p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"{what} {p} is read-only")
    here = p.parent if kind == "file" else p
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        raise OutputError(f"{what} {p} cannot be written: {here} is a file, not a folder")
    probe = temp_path(here / "write-probe")
    try:
        probe.touch(exist_ok=False)
    except OSError as exc:
        raise OutputError(f"{what} {p} cannot be written in {here}: {why_not_written(exc)}") from None
    probe.unlink(missing_ok=True)
    return p


def results_dir() -> Path:
    """The default results folder: $LSTMNB_RESULTS (``~`` expanded, as for $LSTMNB_CACHE), else ./results."""
    return Path(os.environ.get(RESULTS_ENV) or "results").expanduser()


def temp_path(target: str | os.PathLike, suffix: str = "") -> Path:
    """A unique temporary name beside ``target`` that says which host and process wrote it."""
    target = Path(target)
    return target.parent / f".{target.name}.{HOST}.{os.getpid()}-{next(_serial)}.tmp{suffix}"


@contextmanager
def atomic_path(target: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` only if the block succeeds.

    For files (flushed to disk before the rename) and directories (a Zarr store): an interrupted write never leaves a
    half-written ``target``, and an existing ``target`` survives until the new one is complete. ``suffix`` ends the
    temporary name (matplotlib picks the format from it). ``sweep_stale_temps`` removes a killed writer's leftover."""
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


def sweep_stale_temps(directory: str | os.PathLike, *, final: str | None = None) -> int:
    """Remove (and count) the temporaries of ``atomic_path`` that killed writers left in ``directory`` (only those of
    ``final`` when given): written on this host by a process that is gone, or older than ``STALE_TMP_SECONDS``
    whoever wrote it. A live writer's files (here, or on another host sharing the folder) stay."""
    import psutil  # not os.kill(pid, 0): on Windows signal 0 is CTRL_C_EVENT, sent to the process, not a probe

    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    now, removed = time.time(), 0
    for entry in entries:
        m = _TMP.match(entry.name)
        if m is None or (final is not None and m["final"] != final):
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:
            continue
        pid = int(m["pid"])
        dead_here = m["host"] == HOST and pid != os.getpid() and not psutil.pid_exists(pid)
        if age > STALE_TMP_SECONDS or dead_here:
            _remove(Path(entry.path))  # a file another sweep removed first raises nothing
            removed += 1
    return removed


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


_LOCK_BYTE = 2**31 - 2  # the byte ``locked`` holds on Windows: past any results file's records, and a 32-bit offset


@contextmanager
def locked(fd: int) -> Iterator[None]:
    """Hold an exclusive lock on the open file ``fd`` itself (waiting for other processes' locks): flock on POSIX,
    msvcrt's lock of one byte far past the records on Windows, whose byte locks also stop other processes' reads (a
    reader must never meet a writer's lock; SQLite keeps its lock bytes past the data for the same reason).
    Hand-written rather than filelock's, which locks a second file beside the target: a results folder keeps only its
    records. Also the lock of a store's builders, on their lock file."""
    if os.name == "nt":
        import msvcrt

        here = os.lseek(fd, 0, os.SEEK_CUR)
        os.lseek(fd, _LOCK_BYTE, os.SEEK_SET)
        while True:  # LK_LOCK gives up after 10 tries a second apart; a writer may hold it longer
            with suppress(OSError):  # not yet: try again
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                break
        os.lseek(fd, here, os.SEEK_SET)
        try:
            yield
        finally:
            there = os.lseek(fd, 0, os.SEEK_CUR)
            os.lseek(fd, _LOCK_BYTE, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
            os.lseek(fd, there, os.SEEK_SET)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
