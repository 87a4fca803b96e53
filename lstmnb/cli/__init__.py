"""The ``lstmnb`` command: argument parsing only, each sub-command a thin call into the package.

Sub-command modules import nothing heavy at module level; only the sub-command that will parse builds its slow options
(``full``), so `lstmnb --help` and `lstmnb data` skip torch. Our errors (``LstmnbError``) print one line and exit 2."""

from __future__ import annotations

import argparse
import codecs
import os
import re
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator, Sequence

from .. import __version__
from ..errors import LstmnbError, Terminated, one_line_warnings
from ..paths import why_not_written
from . import bench_cmds, data_cmd, doctor_cmd, notebooks_cmd, region_cmd, replicate_cmd, run_cmds, scratch_cmd
from .checks import check_omp_num_threads

# the environment variables lstmnb reads, as `lstmnb --help` lists them (README: Environment)
ENVIRONMENT = """environment:
  LSTMNB_CACHE     cache folder: the study's and the sample store, extracted series
                   (default $XDG_CACHE_HOME/lstmnb, else ~/.cache/lstmnb)
  LSTMNB_RESULTS   default results folder for run records (default ./results; --results overrides)
  OMP_NUM_THREADS  torch's CPU threads; unset, a CPU run uses one per core, fewer when other
                   processes load the cores (--threads N overrides both)
"""

# (name, adder) in the order `lstmnb --help` lists them; adder(subparsers, full) adds one sub-command
COMMANDS = (
    ("train", run_cmds.add_train),
    ("skill", run_cmds.add_skill),
    ("replicate", replicate_cmd.add_replicate),
    ("results", run_cmds.add_results),
    ("data", data_cmd.add_data),
    ("notebooks", notebooks_cmd.add_notebooks),
    ("quickstart", run_cmds.add_quickstart),
    ("bench", bench_cmds.add_bench),
    ("region", region_cmd.add_region),
    ("scratch", scratch_cmd.add_scratch),
    ("doctor", doctor_cmd.add_doctor),
)


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and where to read more (`lstmnb train: error: argument --epochs: invalid
    int value: 'x'`), not the whole usage block; sub-parsers inherit it. An epilog is printed as written."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("epilog"):
            kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` one whose other sub-commands keep their help line but skip
    options that are slow to build (training options import torch)."""
    parser = Parser(
        prog="lstmnb",
        description=(
            "Train LSTM forecasters of ERA5 2 m temperature and measure how CPUs and GPUs speed up "
            "training. Start with `lstmnb quickstart`; every sub-command has its own --help."
        ),
        epilog=ENVIRONMENT)
    parser.add_argument("--version", action="version", version=f"lstmnb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, add in COMMANDS:
        add(sub, command is None or name == command)
    return parser


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest sub-parser that ``args`` went through (`lstmnb bench scaling`'s, not `lstmnb`'s)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return chosen_parser(action.choices[getattr(args, action.dest)], args)
    return parser


_NUMBER_LIKE = re.compile(r"^-\.?\d")


def value_options(parser: argparse.ArgumentParser) -> set[str]:
    """The long options, in ``parser`` and all its sub-parsers, that take exactly one value."""
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= value_options(child)
        elif action.nargs is None and action.option_strings:
            found.update(o for o in action.option_strings if o.startswith("--"))
    return found


def join_negative_values(argv: list[str], options: set[str]) -> list[str]:
    """``--point -33,151`` as ``--point=-33,151``: argparse reads a value starting with '-' as an option
    unless it is a plain negative number, so southern latitudes and western longitudes need the join."""
    out: list[str] = []
    for a in argv:
        if out and out[-1] in options and _NUMBER_LIKE.match(a) and "--" not in out:
            out[-1] = f"{out[-1]}={a}"
        else:
            out.append(a)
    return out


def printable_anywhere(*streams) -> None:
    """Non-UTF-8 text streams print '?' for a character their encoding lacks instead of raising (the tables' em dash
    and middle dot on a Windows code page such as cp932, or a POSIX locale of ASCII or Latin-1). Jupyter's streams
    (no ``reconfigure``) and UTF-8 ones are left as they are."""
    for stream in streams:
        encoding = getattr(stream, "encoding", None)
        if (hasattr(stream, "reconfigure") and getattr(stream, "errors", None) == "strict" and encoding
                and codecs.lookup(encoding).name != "utf-8"):
            stream.reconfigure(errors="replace")


# the options that name a file or folder lstmnb writes or reads (``notebooks --dir``, ``--source``, ``--profile``,
# ``--prices``, ``--notebooks`` and ``--credentials`` are expanded where they are read)
PATH_OPTIONS = ("results", "checkpoint", "plot", "map", "csv", "runs_dir", "paths")


def expand_home(args: argparse.Namespace) -> None:
    """``~`` in a path option as the user's home, as the checks before any work read it (``check_writable``): cmd,
    PowerShell and a POSIX shell in ``--results=~/r`` pass ``~`` as typed, which would write to a folder named ``~``."""
    for name in PATH_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, os.path.expanduser(value))
        elif isinstance(value, list):
            setattr(args, name, [os.path.expanduser(v) if isinstance(v, str) else v for v in value])


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    printable_anywhere(sys.stdout, sys.stderr)
    # the top level has only flags (--help, --version), so the first other word names the sub-command
    command = next((a for a in argv if not a.startswith("-")), "")
    try:
        check_omp_num_threads(os.environ)  # before torch loads: libgomp would print its own message first
    except LstmnbError as exc:
        print(f"lstmnb{' ' + command if command else ''}: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser(command)
    try:
        args, extra = parser.parse_known_args(join_negative_values(argv, value_options(parser)))
        if extra:  # argparse's error, said by the sub-command that was given them, with its nearest option
            import difflib

            sub = chosen_parser(parser, args)
            options = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
            near = difflib.get_close_matches(extra[0].split("=")[0], options, n=1) if extra[0].startswith("--") else []
            sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f"; did you mean {near[0]}?" if near else ""))
    except SystemExit as exc:  # --help, --version (0) and parse errors (2, one line printed): a status, not an exit
        return exc.code if isinstance(exc.code, int) else 1
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    expand_home(args)
    where = chosen_parser(parser, args).prog  # `lstmnb bench scaling`, as its parse errors name it
    with warnings.catch_warnings(), stop_on_sigterm():
        warnings.showwarning = one_line_warnings()
        try:
            args.check(args)  # every option and output of the sub-command, before any work
            result = args.func(args)
        except LstmnbError as exc:
            print(f"{where}: error: {exc}", file=sys.stderr)
            return getattr(exc, "exit_status", 2)
        except OSError as exc:  # e.g. a write that failed after the checks: disk full, a folder removed meanwhile
            name = f"{exc.filename}: " if exc.filename else ""
            print(f"{where}: error: {name}{why_not_written(exc)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt as exc:
            how = ("stopped by SIGTERM (a SLURM time limit, scancel or kill)" if isinstance(exc, Terminated)
                   else "interrupted")
            print(f"{where}: {how}; finished work (cache blocks, records, checkpoints, executed "
                  "notebooks) is kept", file=sys.stderr)
            return 143 if isinstance(exc, Terminated) else 130
    return int(result or 0)


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While a command runs, SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread, so a job
    stopped by SLURM's time limit keeps its finished work as Ctrl-C does; the earlier handler is put back afterwards.
    Not in a torchrun worker: its agent stops the workers with SIGTERM when one fails, and a rank waiting in a
    collective runs no Python handler until the agent's SIGKILL, so there the default (end at once) is kept."""
    if threading.current_thread() is not threading.main_thread() or "TORCHELASTIC_RUN_ID" in os.environ:
        yield  # signal handlers: main thread only
        return

    def stop(signum, frame):
        raise Terminated()

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)

