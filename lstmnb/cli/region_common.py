"""What the `lstmnb region` sub-commands share: --variants read as region mode's variants, and the closing
lines (the threads the runs used, where the records went)."""

from __future__ import annotations

from ..region import VARIANTS
from ..rules import known
from .options import results_path


def pick_variants(given: tuple[str, ...]) -> tuple[str, ...]:
    """The variants named by --variants, each once, in the order given; a ConfigError names any unknown one."""
    return tuple(known(given, VARIANTS, f"--variants {','.join(given)}"))


def say_recorded(records: list[dict], args) -> None:
    from ..records import runs_path

    path = results_path(args)
    if path is not None and records:
        print(f"{len(records)} record(s) appended to {runs_path(path)}")


def say_threads(threads: dict) -> None:
    print(f"threads: {threads['used']} ({threads['policy']}): {threads['reason']}")
