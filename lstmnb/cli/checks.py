"""The checks the sub-commands share, run before any work (each sub-command's ``check``): output paths
(results, plots), the records a reading command is given, split dates against the request, price
tables, and positive numbers. Each raises a ``lstmnb.errors`` type with one line naming the option,
the value and what is valid; argument parsing itself stays in ``options``."""

from __future__ import annotations


def positive(option: str, value, whole: bool = True, none_ok: bool = False, hi: int | None = None) -> None:
    """``value`` a whole number 1..``hi`` (``whole``; by default INT_MAX: larger counts overflow torch's C ints, and
    no run lasts that long) or a positive finite number; else a ConfigError naming ``option``."""
    import math

    from ..errors import ConfigError
    from ..training.config import INT_MAX

    if value is None and none_ok:
        return
    hi = INT_MAX if hi is None else hi
    if whole and not (isinstance(value, int) and 1 <= value <= hi):
        top = f" and <= {hi}" if isinstance(value, int) and value > hi else ""
        raise ConfigError(f"{option} {value} must be a whole number >= 1{top}")
    if not whole and not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{option} {value} must be a positive number")


def check_split_dates(cfg, request) -> None:
    """--split-dates must fall inside the request's time range (in order; checked by TrainConfig)."""
    if not cfg.split_dates or request is None:
        return
    from ..data import parse_time
    from ..errors import ConfigError

    start, end = parse_time(request.start), parse_time(request.end, end=True)
    for d in cfg.split_dates:
        if not start < parse_time(d) <= end:
            raise ConfigError(f"split date {d!r} is outside the data's time range {request.start}..{request.end}; "
                              "both VAL_START,TEST_START must fall after --start and by --end")


def check_windows_fit(cfg, request) -> None:
    """The window, lead and horizon fit every part of the request's hours, split as the run will split them
    (``windows.split_parts``, ``windows.scored_ranges``): refused before any data is read, not once it is."""
    if request is None or not isinstance(request.start, str) or not isinstance(request.end, str):
        return  # the source's own range: known once the store is open
    import pandas as pd

    from ..data import parse_time
    from ..windows import scored_ranges, split_parts

    times = pd.date_range(parse_time(request.start), parse_time(request.end, end=True), freq="h")
    config = cfg.window_config()
    scored_ranges(split_parts(times, config), config)


def check_results(path, option: str = "--results") -> None:
    """Records can be appended at ``path`` (a .jsonl file, or a folder for runs.jsonl; None: not recording)."""
    if path is None:
        return
    from pathlib import Path

    from ..errors import OutputError
    from ..paths import check_writable
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
    from pathlib import Path

    from ..errors import ConfigError
    from ..paths import check_writable

    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix:
        from matplotlib.backend_bases import FigureCanvasBase

        formats = sorted(FigureCanvasBase.get_supported_filetypes())
        if suffix not in formats:
            raise ConfigError(f"{option} {path}: matplotlib cannot write .{suffix} files; use one of "
                              + ", ".join("." + f for f in formats))
    check_writable(path, "file", option)


def check_records_args(args) -> None:
    """Named results files or folders exist ($LSTMNB_RESULTS, when they are not named, is not blank); the
    experiment filter is not empty."""
    import os
    from pathlib import Path

    from ..errors import ConfigError, DataError
    from ..paths import RESULTS_ENV

    if not args.paths and (os.environ.get(RESULTS_ENV) or "-").strip() == "":  # as train says it (check_results)
        raise ConfigError(f"${RESULTS_ENV} is empty; give a .jsonl file or a folder, or unset it for ./results")
    for p in args.paths or ():
        if not str(p).strip() or not Path(p).expanduser().exists():
            raise DataError(f"results path {p!r} does not exist; give results files (.jsonl) or folders")
    if args.experiment is not None and not args.experiment.strip():
        raise ConfigError("--experiment is empty; give an experiment name or its start (e.g. scaling), or leave it out")


def check_profile_name(name: str | None) -> None:
    """A training run's ``--profile`` names a profile that exists (shipped, or a .yaml file): the record
    stores it, and the notebooks and `lstmnb doctor` refuse a name that is neither."""
    if name is not None:
        from ..profiles import load_profile

        load_profile(name)


def check_omp_num_threads(environ) -> None:
    """``OMP_NUM_THREADS``, when set, is what OpenMP accepts: whole numbers >= 1 (a list like 4,2 for nested
    levels; not empty). Checked before torch loads, so libgomp's own message does not come first."""
    import re

    from ..errors import ConfigError

    value = environ.get("OMP_NUM_THREADS")
    if value is None:  # set but empty is no number either: libgomp warns about it before torch's first line
        return
    if not re.fullmatch(r"\s*[1-9]\d*(\s*,\s*[1-9]\d*)*\s*", value):
        raise ConfigError(f"OMP_NUM_THREADS={value!r} must be a whole number >= 1 (or a list like 4,2); unset it "
                          "to let lstmnb choose, or use --threads N")
