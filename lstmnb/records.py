"""The run record: one JSON object per line in ``results/runs.jsonl``, appended atomically.

Every experiment (training run, benchmark point, skipped GPU run) leaves one record, so results
from many machines merge by concatenating files. See DESIGN.md, "The run record".
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import functools
import json
import math
import os
import platform
import subprocess
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from . import __version__
from .paths import results_dir

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = 1
STATUSES = ("ok", "oom", "skipped", "failed")
RUNS_FILE = "runs.jsonl"


# fixed for the process: /proc/cpuinfo is read once, not twice per record
@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# once per process, not a git subprocess per record (the code this process runs was imported once anyway)
@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    """The commit of the lstmnb checkout this code runs from, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def device_info(device: str | None = None) -> dict[str, Any]:
    """Kind, name, count and memory of ``device`` ('cpu', 'cuda', 'cuda:1', 'mps'), plus the host CPU."""
    import psutil
    import torch

    kind = (device or "cpu").split(":")[0]
    info: dict[str, Any] = {
        "kind": kind,
        "name": cpu_model(),
        "count": 1,
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "torch_threads": torch.get_num_threads(),
        "hostname": platform.node(),
        # runnable processes (1, 5, 15 min) when the record was made: on a shared machine a load above
        # the core count means the timings of this run were taken under contention
        "load_avg": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if kind == "cuda" and torch.cuda.is_available():
        index = int(device.split(":")[1]) if device and ":" in device else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            name=props.name,
            count=torch.cuda.device_count(),
            memory_gb=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
        )
    elif kind == "cuda":
        info.update(name=None, count=0, memory_gb=None, note="no CUDA device visible")
    elif kind == "mps":
        info.update(name="Apple MPS")
    return info


def software_info() -> dict[str, Any]:
    """Versions that change timings: Python, torch, CUDA, cuDNN, lstmnb and its git commit."""
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "numpy": np.__version__,
        "lstmnb": __version__,
        "git_commit": git_commit(),
        "platform": platform.platform(),
    }


def new_record(
    experiment: str,
    *,
    status: str = "ok",
    reason: str | None = None,
    device: str | None = "cpu",
    profile: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A record with the common fields filled in; ``fields`` adds config, data, epochs, metrics, ..."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": uuid.uuid4().hex[:12],
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "experiment": experiment,
        "status": status,
        "reason": reason,
        "device": device_info(device),
        "software": software_info(),
        "profile": profile,
    }
    record.update(fields)
    return record


def _jsonable(obj: Any) -> Any:
    """Numpy scalars/arrays, paths and non-finite floats into plain JSON (NaN/inf become null)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (Path, _dt.date, _dt.datetime)):
        return str(obj)
    return obj


def runs_path(path: str | os.PathLike | None = None) -> Path:
    """The JSON-lines file a record goes to: ``path`` if it ends in .jsonl, else ``path/runs.jsonl``
    (default: the results folder)."""
    path = Path(path) if path is not None else results_dir()
    return path if path.suffix == ".jsonl" else path / RUNS_FILE


def append_record(record: dict[str, Any], path: str | os.PathLike | None = None) -> Path:
    """Append ``record`` as one line to ``path`` (default results/runs.jsonl) without ever rewriting it.

    The line is written with one ``write`` on an ``O_APPEND`` descriptor under an exclusive lock, and
    flushed to disk: concurrent writers (several ranks or jobs) never interleave, and a crash can at
    worst leave a final partial line, which ``read_records`` skips with a warning.
    """
    path = runs_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(_jsonable(record), allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # a previous crash may have left a line without its newline: start ours on a fresh line
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return path


def _record_files(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("*.jsonl")))
        elif p.exists():
            files.append(p)
    return files


def read_records(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[dict[str, Any]]:
    """Every record in the given files or folders (searched recursively for ``*.jsonl``).

    A broken line is skipped with a warning naming the file and line; good records are never dropped.
    """
    records: list[dict[str, Any]] = []
    for file in _record_files(paths):
        with open(file, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict):
                        raise ValueError("not a JSON object")
                except ValueError as exc:
                    warnings.warn(f"{file}:{lineno}: skipped a broken record line ({exc})", stacklevel=2)
                    continue
                rec.setdefault("_file", str(file))
                records.append(rec)
    return records


def load_records(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> "pd.DataFrame":
    """Records as a DataFrame with nested fields flattened to dotted columns (``config.batch_size``).

    List-valued fields (``epochs``) stay as Python lists in their column.
    """
    import pandas as pd

    records = read_records(paths)
    if not records:
        return pd.DataFrame()
    return pd.json_normalize(records, max_level=2)
