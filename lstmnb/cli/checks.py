"""The checks the sub-commands share, run before any work (each sub-command's ``check``): output paths, the records a
reading command is given, positive numbers (a training option's range is its TrainConfig field's ``Rule``). Each raises
a ``lstmnb.errors`` type with one line naming the option, the value and what is valid."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigError, DataError, OutputError
from ..paths import RESULTS_ENV, check_writable
from ..rules import INT_MAX, number
from ..rules import whole as whole_number


def positive(option: str, value, whole: bool = True, none_ok: bool = False, hi: int | None = None) -> None:
    """``value`` a whole number 1..``hi`` (``whole``; by default INT_MAX: larger counts overflow torch's C ints, and
    no run lasts that long) or a positive finite number; else a ConfigError naming ``option``."""
    if value is None and none_ok:
        return
    why = (whole_number(1, INT_MAX if hi is None else hi) if whole else number(positive=True)).why(value)
    if why:
        raise ConfigError(f"{option} {value} {why}")


def check_results(path, option: str = "--results") -> None:
    """Records can be appended at ``path`` (a .jsonl file, or a folder for runs.jsonl; None: not recording)."""
    if path is None:
        return
    from ..records import runs_path

    if not str(path).strip():
        raise OutputError(f"{option} is empty; give a .jsonl file or a folder (or --no-record)")
    p = Path(path).expanduser()
    if p.suffix != ".jsonl" and p.exists() and not p.is_dir():
        raise OutputError(f"{option} {p} is a file without the .jsonl suffix; give a .jsonl file, or a folder "
                          "for runs.jsonl")
    check_writable(runs_path(p), "file", f"{option} file")


def check_plot(path: str | None, option: str = "--plot") -> None:
    """A plot can be written at ``path``, in a format matplotlib knows from its suffix (none: png)."""
    if path is None:
        return
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix:
        from matplotlib.backend_bases import FigureCanvasBase

        formats = sorted(FigureCanvasBase.get_supported_filetypes())
        if suffix not in formats:
            raise ConfigError(f"{option} {path}: matplotlib cannot write .{suffix} files; use one of "
                              + ", ".join("." + f for f in formats))
    check_writable(path, "file", option)


def check_records_args(args) -> None:
    """Named results paths exist ($LSTMNB_RESULTS, when none is named, is not blank); --experiment is not empty."""
    if not args.paths and (os.environ.get(RESULTS_ENV) or "-").strip() == "":  # as train says it (check_results)
        raise ConfigError(f"${RESULTS_ENV} is empty; give a .jsonl file or a folder, or unset it for ./results")
    for p in args.paths or ():
        if not str(p).strip() or not Path(p).expanduser().exists():
            raise DataError(f"results path {p!r} does not exist; give results files (.jsonl) or folders")
    if args.experiment is not None and not args.experiment.strip():
        raise ConfigError("--experiment is empty; give an experiment name or its start (e.g. scaling), or leave it out")


def check_omp_num_threads(environ) -> None:
    """``OMP_NUM_THREADS``, when set, is what OpenMP accepts: whole numbers >= 1 (a list like 4,2 for nested
    levels; not empty). Checked before torch loads, so libgomp's own message does not come first."""
    value = environ.get("OMP_NUM_THREADS")  # '' is no number either: libgomp warns about it before torch's first line
    if value is not None and not re.fullmatch(r"\s*[1-9]\d*(\s*,\s*[1-9]\d*)*\s*", value):
        raise ConfigError(f"OMP_NUM_THREADS={value!r} must be a whole number >= 1 (or a list like 4,2); unset it "
                          "to let lstmnb choose, or use --threads N")
