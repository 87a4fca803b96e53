"""The ``lstmnb`` command: argument parsing only, each sub-command a thin call into the package.

Sub-command modules import nothing heavy at module level; only the sub-command that will parse builds
its slow options (``full``), so `lstmnb --help` and `lstmnb data` do not import torch. Errors of our own
(``LstmnbError``) print as one line and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..errors import LstmnbError
from . import bench_cmds, data_cmd, doctor_cmd, notebooks_cmd, run_cmds, scratch_cmd

# the environment variables lstmnb reads, as `lstmnb --help` lists them (README: Environment)
ENVIRONMENT = """environment:
  LSTMNB_CACHE     cache folder: the embedded sample store and extracted series
                   (default $XDG_CACHE_HOME/lstmnb, else ~/.cache/lstmnb)
  LSTMNB_RESULTS   default results folder for run records (default ./results; --results overrides)
  OMP_NUM_THREADS  torch's CPU threads; unset, a CPU run uses one per core, fewer when other
                   processes load the cores (--threads N overrides both)
"""

# (name, adder) in the order `lstmnb --help` lists them; adder(subparsers, full) adds one sub-command
COMMANDS = (
    ("train", run_cmds.add_train),
    ("skill", run_cmds.add_skill),
    ("results", run_cmds.add_results),
    ("data", data_cmd.add_data),
    ("notebooks", notebooks_cmd.add_notebooks),
    ("quickstart", run_cmds.add_quickstart),
    ("bench", bench_cmds.add_bench),
    ("scratch", scratch_cmd.add_scratch),
    ("doctor", doctor_cmd.add_doctor),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` one whose other sub-commands keep their help line but skip
    options that are slow to build (training options import torch)."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="lstmnb",
        description=(
            "Train LSTM forecasters of ERA5 2 m temperature and measure how CPUs and GPUs speed up "
            "training. Start with `lstmnb quickstart`; every sub-command has its own --help."
        ),
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lstmnb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, add in COMMANDS:
        add(sub, command is None or name == command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # the top level has only flags (--help, --version), so the first other word names the sub-command
    parser = build_parser(next((a for a in argv if not a.startswith("-")), ""))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        result = args.func(args)
    except LstmnbError as exc:
        print(f"lstmnb {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"lstmnb {args.command}: interrupted; finished work (cache blocks, records, checkpoints) is kept",
              file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
