"""The run record: one JSON object per line in ``results/runs.jsonl``, appended atomically.

Every experiment (training run, benchmark point, skipped GPU run) leaves one record, so results
from many machines merge by concatenating files. See docs/architecture.md.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import platform
import subprocess
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from . import __version__
from .paths import locked, results_dir
from .record_schema import STATUSES, VERSION, record_problem

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = VERSION  # the schema number every record written here carries
RUNS_FILE = "runs.jsonl"


def commit_of(folder: Path) -> str | None:
    """HEAD's commit of the git checkout holding ``folder``, with ``-dirty`` appended (git's own word, as
    ``git describe --dirty`` writes it) when tracked files under ``folder`` differ from it: the code that
    ran is then not that commit's. None outside a git checkout or without git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=5)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return None
        changed = git("diff", "--quiet", "HEAD", "--", ".").returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if changed else "")


def software_info() -> dict[str, Any]:
    """Versions that change timings: Python, torch, CUDA, cuDNN, lstmnb and its git commit. Safe on any
    host and CUDA-free: the cuDNN version is read without torch's GPU check, which raises on P100/V100
    hosts and starts the CUDA driver (a memory-capped sweep child must not). Gathered once per process."""
    return dict(_software_facts())


@functools.lru_cache(maxsize=None)
def _software_facts() -> dict[str, Any]:
    import torch

    from .machine.cuda import cudnn_version

    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": cudnn_version(), "numpy": np.__version__, "lstmnb": __version__,
            "git_commit": commit_of(Path(__file__).resolve().parent), "platform": platform.platform()}


def new_run_id() -> str:
    """A fresh run id (12 hex digits). A checkpointed run keeps its id across resumes, so the results
    file can tell whether its record is already there."""
    return uuid.uuid4().hex[:12]


def new_record(experiment: str, *, status: str = "ok", reason: str | None = None, device: str | None = "cpu",
               profile: str | None = None, run_id: str | None = None, **fields: Any) -> dict[str, Any]:
    """A record with the common fields filled in; ``fields`` adds config, data, epochs, metrics, ...
    ``run_id``: the run's id when it has one already (a checkpointed run); else a new one."""
    from .machine.device import device_info  # here, not at the top: reading records needs no torch

    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return {"schema": SCHEMA, "run_id": run_id or new_run_id(), "started": started, "experiment": experiment,
            "status": status, "reason": reason, "device": device_info(device), "software": software_info(),
            "profile": profile, **fields}


def _jsonable(obj: Any) -> Any:
    """Numpy scalars/arrays, paths and non-finite floats into plain JSON (NaN/inf become null)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.ndarray, np.generic)):  # a numpy scalar's tolist() is its item()
        return _jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (Path, _dt.date, _dt.datetime)):
        return str(obj)
    return obj


class _DefaultFile:
    """The type of ``DEFAULT_FILE``: the results file a user has not named."""

    def __repr__(self) -> str:
        return "DEFAULT_FILE"


# Where records go, everywhere in lstmnb: ``results=None`` means do not record; ``DEFAULT_FILE`` means
# results/runs.jsonl (or $LSTMNB_RESULTS); anything else is a .jsonl file or a folder holding runs.jsonl.
DEFAULT_FILE = _DefaultFile()


def runs_path(path: str | os.PathLike | _DefaultFile = DEFAULT_FILE) -> Path:
    """The JSON-lines file a record goes to: ``path`` if it ends in .jsonl, else ``path/runs.jsonl``
    (``DEFAULT_FILE``: in the results folder)."""
    if path is None:
        raise TypeError("runs_path(None): None means 'do not record'; pass a path or records.DEFAULT_FILE")
    path = results_dir() if isinstance(path, _DefaultFile) else Path(path)
    return path if path.suffix == ".jsonl" else path / RUNS_FILE


def append_record(record: dict[str, Any], path: "str | os.PathLike | _DefaultFile | None") -> Path | None:
    """Append ``record`` as one line to ``path`` (see ``DEFAULT_FILE``; None: do nothing, return None), never
    rewriting the file: one ``write`` on an ``O_APPEND`` descriptor under an exclusive lock, flushed to disk, so
    concurrent writers (several ranks or jobs) never interleave and a crash can at worst leave a final partial line,
    which ``read_records`` skips with a warning."""
    return _append(record, path, once=False)[0]


def append_record_once(record: dict[str, Any], path: "str | os.PathLike | _DefaultFile | None"
                       ) -> tuple[Path | None, bool]:
    """``append_record``, unless a record with the same ``run_id`` is already in the file (a resumed
    run that was recorded before it was killed). Returns (file, whether a line was written); the check
    and the write happen under the same lock, so concurrent writers of one run id write it once."""
    return _append(record, path, once=True)


def _append(record: dict[str, Any], path, *, once: bool) -> tuple[Path | None, bool]:
    if path is None:
        return None, False
    path = runs_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(_jsonable(record), allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
    try:
        with locked(fd):  # one writer at a time per results file, on Linux, macOS and Windows alike
            size = os.fstat(fd).st_size
            if once and size and _holds_run(fd, size, record.get("run_id")):
                return path, False
            # a previous crash may have left a line without its newline: start ours on a fresh line
            if size and _read_at(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
    finally:
        os.close(fd)
    return path, True


def _read_at(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` (os.pread is POSIX only; appends go to the end whatever the position)."""
    os.lseek(fd, offset, os.SEEK_SET)
    parts = []
    while n > 0 and (part := os.read(fd, n)):
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def _holds_run(fd: int, size: int, run_id: str | None) -> bool:
    """Whether a whole, valid record line of the open results file has this ``run_id``."""
    if not run_id:
        return False
    needle = json.dumps(run_id).encode()
    for raw in _read_at(fd, size, 0).splitlines():
        if needle in raw:
            try:
                rec = json.loads(raw)
            except ValueError:  # a partial line a crash left: not a record
                continue
            if isinstance(rec, dict) and rec.get("run_id") == run_id:
                return True
    return False


class BrokenRecordsWarning(UserWarning):
    """A results file holds lines that are not records, or records that fail the record schema (one
    warning per file and fault, with the count, the first lines and the first failing field)."""


@dataclass
class RecordsRead:
    """What reading results files found: the valid records, and what was not one (for the messages)."""

    paths: list[Path] = field(default_factory=list)  # the files and folders asked for
    records: list[dict[str, Any]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # the results files found there
    missing: list[Path] = field(default_factory=list)  # the paths that do not exist
    lines: int = 0  # non-blank lines read
    broken: int = 0  # lines that are not JSON objects
    invalid: int = 0  # JSON objects that fail the record schema
    faults: list[tuple[Path, str, list[tuple[int, str]]]] = field(default_factory=list)  # (file, what, [(line, why)])

    def why_none(self) -> str:
        """Why no record was read, as the end of a sentence: missing, empty or corrupt."""
        if not self.files:
            return "; ".join(f"{p} is missing" if p in self.missing else f"{p} holds no results file (.jsonl)"
                             for p in self.paths) or "no results path given"
        where = ", ".join(map(str, self.files))
        if not self.lines:
            return f"{where} {'is' if len(self.files) == 1 else 'are'} empty: no run records yet"
        file, line, why = min(((f, *found[0]) for f, _, found in self.faults),  # the first fault by file and line
                              key=lambda fault: (self.files.index(fault[0]), fault[1]))
        return (f"{where} {'holds' if len(self.files) == 1 else 'hold'} no valid run record: all {self.lines} "
                f"line(s) are corrupt ({self.broken} not a JSON object, {self.invalid} failing the record schema; the first: "
                f"{file}:{line}, {why})")

    def warn(self) -> None:
        """One ``BrokenRecordsWarning`` per file and fault: how many lines, which, and the first one's reason."""
        for file, what, found in self.faults:
            one, many = {"broken": ("broken record line", "broken record lines"),
                         "invalid": ("record that fails the record schema", "records that fail the record schema")}[what]
            n, (first_line, first_why) = len(found), found[0]
            more = (f"; lines {', '.join(str(line) for line, _ in found[:5])}" + (f" and {n - 5} more" if n > 5 else "")
                    if n > 1 else "")
            warnings.warn(f"{file}:{first_line}: skipped {n} {many if n > 1 else one}, the first at line {first_line} "
                          f"({first_why}){more}; the file's good records were read", BrokenRecordsWarning, stacklevel=3)


def scan_records(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> RecordsRead:
    """Read every record in the given files or folders (searched recursively for ``*.jsonl``), each
    checked against the record schema (``record_schema``): what ``read_records`` and the messages of the
    commands that read records use. Lines that are not JSON objects, and records that fail the schema, are
    skipped and listed in ``faults`` (``RecordsRead.warn`` says them); good records are never dropped."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    found = RecordsRead(paths=[Path(p) for p in paths])
    found.missing = [p for p in found.paths if not p.exists()]  # folders are searched recursively
    found.files = [f for p in found.paths if p.exists() for f in (sorted(p.rglob("*.jsonl")) if p.is_dir() else [p])]
    for file in found.files:
        broken, invalid = [], []  # (line number, why)
        with open(file, encoding="utf-8-sig", errors="replace") as fh:  # an editor's BOM is no part of line 1
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                found.lines += 1
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    broken.append((lineno, str(exc).split(":")[0]))
                    continue
                if (problem := record_problem(rec)) is not None:
                    invalid.append((lineno, f"field {problem}"))
                    continue
                rec["_file"] = str(file)  # where this read found it (a copied record may carry a stale one)
                found.records.append(rec)
        found.broken += len(broken)
        found.invalid += len(invalid)
        found.faults += [(file, what, lines) for what, lines in (("broken", broken), ("invalid", invalid)) if lines]
    return found


def read_records(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[dict[str, Any]]:
    """Every valid record in the given files or folders; lines skipped are warned about (see
    ``scan_records``, which also says why there are none)."""
    found = scan_records(paths)
    found.warn()
    return found.records


def load_records(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> "pd.DataFrame":
    """Records as a DataFrame with nested fields flattened to dotted columns (``config.batch_size``); list-valued
    fields (``epochs``) stay as Python lists in their column."""
    import pandas as pd

    return pd.json_normalize(read_records(paths), max_level=2)  # no records: an empty DataFrame


class Recorder:
    """An experiment's records as its runs finish: each is appended to ``results`` (None: not recorded),
    handed to ``on_point`` (a notebook prints or plots it) and kept in ``records``."""

    def __init__(self, results: "str | os.PathLike | _DefaultFile | None" = None,
                 on_point: "Callable[[dict[str, Any]], None] | None" = None):
        self.results, self.on_point = results, on_point
        self.records: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        append_record(record, self.results)
        if self.on_point is not None:
            self.on_point(record)
        self.records.append(record)
        return record

