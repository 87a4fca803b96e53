"""The ``lstmnb`` command. Each sub-command is a thin call into the package's modules.

Errors of our own (``LstmnbError``) print as one line and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from .errors import LstmnbError

# Each entry adds one sub-command: a function (subparsers) -> None that sets ``func`` on its parser.
# Sub-command builders live next to the code they call; they import lazily so `lstmnb --help` is fast.
REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = []


def subcommand(fn: Callable[[argparse._SubParsersAction], None]):
    REGISTRY.append(fn)
    return fn


def tag_light(sub: argparse._SubParsersAction, is_light: Callable[[str], bool]) -> None:
    """Make ``sub.add_parser`` mark each parser it adds ``light`` when ``is_light(name)``: a parser that
    will not parse this time, whose slow options (cli_commands.add_train_args) can be left out."""
    add_parser = sub.add_parser

    def add_tagged(name: str, **kwargs) -> argparse.ArgumentParser:
        p = add_parser(name, **kwargs)
        p.light = is_light(name)
        return p

    sub.add_parser = add_tagged


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` one whose other sub-commands are light: they keep their
    help line but skip options that are slow to build (training options import torch, about a second,
    which `lstmnb data` and `lstmnb --help` do not need)."""
    parser = argparse.ArgumentParser(
        prog="lstmnb",
        description=(
            "Train LSTM forecasters of ERA5 2 m temperature and measure how CPUs and GPUs speed up "
            "training. Start with `lstmnb quickstart`; every sub-command has its own --help."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"lstmnb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    tag_light(sub, lambda name: command is not None and name != command)
    from . import cli_commands  # noqa: F401  (registers the sub-commands)

    for register in REGISTRY:
        register(sub)
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
