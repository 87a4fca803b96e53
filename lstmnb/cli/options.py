"""Options shared by the sub-commands (argument parsing only): the data request, one option per TrainConfig field
with its help from the field's metadata, results files, list and size types; the lines that close a run's output."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
from pathlib import Path

from ..errors import ConfigError, DataError, OutputError
from ..paths import RESULTS_ENV, atomic_path, results_dir, why_not_written
from ..rules import CLI, known
from .checks import check_results


def float_pair(text: str) -> tuple[float, float]:
    try:
        lat, lon = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LAT,LON (e.g. 40,280, 40,-80 or -33,151)") from None
    return lat, lon


def _comma_list(kind, what: str):
    """The argparse type of a comma-separated list of ``kind`` (a tuple); ``what`` names its items in errors."""
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(v) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {what}") from None

    return parse


float_list = _comma_list(float, "numbers")
int_list = _comma_list(int, "whole numbers")
str_list = _comma_list(str, "words")


def byte_size(text: str) -> int:
    """'1024', '64K', '16M', '1G' (powers of 1024) -> bytes."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper().removesuffix("B")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        size = int(float(num) * units[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1024, 64K, 16M or 1G") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size >= 1 byte (e.g. 1024, 64K, 16M or 1G)")
    return size


def add_request_args(p: argparse.ArgumentParser, places: bool = True) -> None:
    """Options that say which ERA5 data to use (shared by `data`, `train` and friends); without ``places``, no
    --point or --box (a sub-command that chooses its own grid points offers none that it would ignore)."""
    g = p.add_argument_group("data (default: the study's real ERA5 at its two points, shipped with lstmnb)")
    g.add_argument("--source", default=None,
                   help="'study' (real ERA5 at 40,280 and 20,280, 2020-01..2021-06, offline; the default for points), "
                        "'sample' (synthetic, offline; the default for --box), 'arco-v3' or 'arco-v2' (public ERA5 "
                        "in the cloud), a gs:// URL or a local Zarr path")
    g.add_argument("--variable", dest="variables", action="append", metavar="NAME",
                   help="variable to extract, repeatable (default: 2m_temperature)")
    if places:
        g.add_argument("--point", dest="points", action="append", type=float_pair, metavar="LAT,LON",
                       help="grid point, repeatable; longitude in -180..180 or 0..360 (default: 40,280 and 20,280)")
        g.add_argument("--box", type=float_list, metavar="LAT_MIN,LAT_MAX,LON_MIN,LON_MAX",
                       help="a lat/lon box instead of points")
    g.add_argument("--start", default=None, help="first day, ISO (YYYY-MM-DD[Thh]), e.g. 2020-01-01 (default: the "
                                                  "published 2020-01-01; a local store's first valid hour)")
    g.add_argument("--end", default=None, help="last day, inclusive, e.g. 2021-06-30 (default: the published "
                                                "2021-06-30; a local store's last valid hour); an end past the "
                                                "store's last valid hour is clipped to it, with a note")


# how the command names a setting in a refusal or a note: by its option, a Request's points and variables as --point
# and --variable (the training knobs as CLI names them: no TrainConfig field is called points or variables)
TYPED = dataclasses.replace(CLI, names={"points": "point", "variables": "variable"})


def request_from_args(args: argparse.Namespace):
    """The data request of ``args``, checked before any work, its times fitted to the store's valid range
    (``data.fit_times``: a local store without --start/--end uses its whole range; an --end past the store is
    clipped), each change said in one line. Made once per command (a sub-command's check and its run share it)."""
    if getattr(args, "_request", None) is not None:
        return args._request
    from .. import data

    kw = {"source": args.source}
    if args.variables:
        kw["variables"] = tuple(args.variables)
    box, points = getattr(args, "box", None), getattr(args, "points", None)
    if box is not None and points:
        raise ConfigError("--point and --box both given; give grid points or one box")
    if box is not None:  # its numbers are checked with the rest of the request (data.check_request)
        kw["box"], kw["points"] = tuple(box), None
    elif points:
        kw["points"] = tuple(points)
    kw.update({n: getattr(args, n) for n in ("start", "end") if getattr(args, n) is not None})  # '' is refused
    request, notes = data.Request(**kw), []
    source = request.source.strip() if isinstance(request.source, str) else ""
    local = source not in (data.SAMPLE, data.STUDY) and source not in data.CATALOGUE and "://" not in source
    # the published dates stay the default of the study's data, the sample (their whole range) and the cloud stores
    start_given, end_given = args.start is not None or not local, args.end is not None or not local
    if args.end is not None or local:
        token = getattr(args, "credentials", None)  # `lstmnb data --credentials`: the store is opened with them
        request, notes = data.fit_times(request, start_given=start_given, end_given=end_given,
                                        storage_options={"token": token} if token else None, say=TYPED)
    request = data.check_request(request, say=TYPED)
    for note in notes:
        print(f"note: {note}")
    args._request = request
    return request


def _or_none(kind):
    """``kind``, or None for the word 'none' (any case): how the command line turns off an optional knob."""
    def parse(text: str):
        return None if text.strip().lower() == "none" else kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its error: "invalid int value: 'x'"
    return parse


def option_type(name: str, hint):
    """What argparse parses a TrainConfig field with, from its annotation: ``X | None`` as ``X`` or the
    word 'none', ``tuple[X, ...]`` as a comma-separated list of X; bool is returned as is (a --flag/--no-flag)."""
    wrap = lambda kind: kind
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = (a for a in typing.get_args(hint) if a is not type(None))
        wrap = _or_none
    if typing.get_origin(hint) is tuple:
        items = set(typing.get_args(hint)) - {Ellipsis}
        lists = {float: float_list, int: int_list, str: str_list}
        if len(items) == 1 and next(iter(items)) in lists:
            return wrap(lists[items.pop()])
    elif hint in (bool, int, float, str):
        return hint if hint is bool else wrap(hint)
    raise TypeError(f"TrainConfig.{name}: no command-line option type for {hint!r}; teach lstmnb.cli.options.option_type")


# TrainConfig fields only some sub-commands act on: the others ``skip`` them rather than offer options doing nothing
CHECKPOINT_OPTIONS = ("checkpoint", "resume", "overwrite_checkpoint")  # one training run's checkpoint
DDP_OPTIONS = ("bucket_cap_mb", "grad_as_bucket_view", "static_graph", "uneven_shards", "dist_timeout_s")
PARALLEL_OPTIONS = ("strategy", "nproc", *DDP_OPTIONS)  # single-device studies run one process


def add_train_args(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """One option per TrainConfig field, typed from its annotation (`--batch-size 256`, `--no-progress`), its help the
    field's text, its default and the published preset's value; an option not given keeps the value of ``--preset``
    (default: recommended). Added only to the sub-command that parses: building them imports torch (about a second)."""
    from ..training import PRESETS, TrainConfig

    hints, published = typing.get_type_hints(TrainConfig), PRESETS["published"]
    g = p.add_argument_group("training")
    for f in dataclasses.fields(TrainConfig):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = option_type(f.name, hints[f.name])
        how = ({"choices": f.metadata["rule"].choices} if f.name == "preset"
               else {"action": argparse.BooleanOptionalAction} if kind is bool else {"type": kind})
        extra = f"; published: {published[f.name]}" if f.name in published else ""
        g.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, **how,
                       help=f.metadata.get("help", "") + f" (default: {f.default}{extra})")


def override_default(p: argparse.ArgumentParser, dest: str, value, why: str) -> None:
    """A training option whose default this sub-command changes, its help saying so (in place of TrainConfig's)."""
    p.set_defaults(**{dest: value})
    for action in p._actions:
        if action.dest == dest and action.help:
            action.help = re.sub(r"\(default: [^()]*\)$", f"(default here: {value}, {why})", action.help)


def train_config_from_args(args: argparse.Namespace, **fixed):
    """The TrainConfig of ``--preset`` (default recommended) with the options given on top, then ``fixed``; validated,
    a refusal naming the option as typed (``--lr 0 must be ...``). Made once per command, as ``request_from_args``."""
    if not fixed and getattr(args, "_train_config", None) is not None:
        return args._train_config
    from ..training import TrainConfig, preset_config

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
             if f.name != "preset" and hasattr(args, f.name)}
    preset = getattr(args, "preset", "recommended")
    cfg = preset_config(preset, **{**given, **fixed})
    if "fractions" in given and cfg.split_dates is not None:  # TrainConfig cannot tell default fractions given
        dates = ",".join(cfg.split_dates)
        by = f"--split-dates {dates}" if "split_dates" in given else f"--preset {preset}, which splits by the dates {dates},"
        raise ConfigError(f"--fractions {','.join(f'{v:g}' for v in cfg.fractions)} and {by} both given: the parts "
                          "are split by dates or by fractions; give one of them")
    cfg.validate(CLI)  # each value named as its option (--lr 0), once: later calls find it checked
    if not fixed:
        args._train_config = cfg
    return cfg


def add_results_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=None,
                   help="results file (.jsonl) or folder for the records (default: results/runs.jsonl; env LSTMNB_RESULTS)")
    p.add_argument("--no-record", action="store_true", help="do not append records")


def results_path(args):
    if getattr(args, "no_record", False):
        return None
    return args.results if args.results is not None else str(results_dir())


def say_recorded(records: list[dict], args) -> None:
    from ..records import runs_path

    if (path := results_path(args)) is not None and records:
        print(f"{len(records)} record(s) appended to {runs_path(path)}")


def say_threads(threads: dict) -> None:
    print(f"threads: {threads['used']} ({threads['policy']}): {threads['reason']}")


def pick_variants(given: tuple[str, ...]) -> tuple[str, ...]:
    """The region variants named by --variants, each once, in the order given; a ConfigError names any unknown."""
    from ..region import VARIANTS

    return tuple(known(given, VARIANTS, f"--variants {','.join(given)}"))


def results_option(args) -> str:
    """What set the results path, for messages: --results, else $LSTMNB_RESULTS when it is set, else the default."""
    if getattr(args, "results", None) is not None:
        return "--results"
    return f"${RESULTS_ENV}" if os.environ.get(RESULTS_ENV) else "default results"


def check_results_args(args) -> None:
    """``check_results`` on the results path of ``args``, named by its source; --results with --no-record is refused."""
    if getattr(args, "no_record", False) and getattr(args, "results", None) is not None:
        raise ConfigError(f"--results {args.results} and --no-record both given: one appends the records there, the "
                          "other writes none; give one")
    check_results(results_path(args), results_option(args))


def write_output(path: str, option: str, write, kept: str, suffix: str = "") -> None:
    """``write(tmp)`` to a temporary beside ``path``, renamed onto it when complete; a write that fails
    after the work is an OutputError (exit status 1) naming ``option`` and saying what is ``kept``."""
    try:
        with atomic_path(path, suffix=suffix) as tmp:
            write(tmp)
    except OSError as exc:
        err = OutputError(f"{option} {path} could not be written: {why_not_written(exc)}; {kept}")
        err.exit_status = 1
        raise err from None


def save_plot(fig, path: str | None, option: str = "--plot") -> None:
    """Save a figure atomically (matplotlib picks the format from the suffix: png, svg, pdf; none: png); ``fig`` may
    be a function drawing it, called only when there is a ``path``."""
    if path:
        fig = fig() if callable(fig) else fig
        write_output(path, option, lambda tmp: fig.savefig(tmp, dpi=120, bbox_inches="tight"),  # suptitles stay in
                     "the table above is the result", suffix=Path(path).suffix or ".png")
        print(f"plot       {path}")


def add_records_args(p: argparse.ArgumentParser) -> None:
    """The records a reading command works on: results files or folders, and an experiment filter."""
    p.add_argument("paths", nargs="*", default=None, help="results files or folders (default: results/)")
    p.add_argument("--experiment", default=None,
                   help="only runs whose experiment name starts with this (scaling: scaling-strong and scaling-weak)")


def read_runs(args) -> list[dict]:
    """The valid records in ``args.paths`` (default: the results folder) whose experiment starts with ``args.experiment``;
    a DataError saying why there are none: missing, empty files, only corrupt lines, or only other experiments."""
    from ..records import scan_records

    paths = args.paths or [results_dir()]
    found = scan_records(paths)
    runs = [r for r in found.records if not args.experiment or r["experiment"].startswith(args.experiment)]
    if not found.records:  # one line: missing, empty, or corrupt with its first fault (no warnings before it)
        raise DataError(f"no run records: {found.why_none()}" + ("" if found.faults else "; run `lstmnb train` first"))
    found.warn()
    if runs:
        return runs
    others = sorted({r["experiment"] for r in found.records})
    raise DataError(f"no run records of experiment {args.experiment}* in {', '.join(map(str, paths))}; the "
                    f"{len(found.records)} record(s) there are of {', '.join(others[:8])}{', ...' if len(others) > 8 else ''}")
