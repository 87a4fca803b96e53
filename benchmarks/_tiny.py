"""What the benchmarks share for their tiny mode (`--tiny`, run by CI through benchmarks/run_tiny.py).

Not a benchmark (run_tiny.py runs no file whose name starts with an underscore). The scripts run as
``python benchmarks/NAME.py``, so Python finds this module beside them.
"""

from __future__ import annotations

# Every benchmark prints this line last, once its tables are printed: run_tiny.py takes it as the sign that
# the script ran to its end (the figures above it are not checked).
DONE = "benchmark done: tables above"


def source_of(args: list[str]) -> str | None:
    """The ``--source`` these command-line arguments give (the last one wins, as argparse takes it)."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--source" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--source="):
            found = arg.split("=", 1)[1]
    return found


def region(command: str, settings: list[str], tiny: list[str], argv: list[str], data: str | None = None) -> int:
    """`lstmnb region COMMAND` with ``settings`` (with ``--tiny`` in ``argv``: ``tiny``), then the rest of
    ``argv`` (which override them), after a line saying which data it reads (``data``, else the source the
    arguments give); the closing line once it ran."""
    from lstmnb.cli import main
    from lstmnb.data.catalogue import data_kind

    chosen = tiny if "--tiny" in argv else settings
    argv = [a for a in argv if a != "--tiny"]
    help_only = bool({"-h", "--help"} & set(argv))
    source = source_of([*chosen, *argv])
    if data is None and source is not None:
        data = f"source {source} ({data_kind(source)})"
    if data is not None and not help_only:
        print(f"data: {data}", flush=True)
    code = main(["region", command, *chosen, *argv])
    if code == 0 and not help_only:
        print(DONE)
    return code
