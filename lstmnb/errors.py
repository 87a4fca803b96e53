"""The project's own exception types: each message says what was wrong and what is allowed.

The CLI prints these as one line (no traceback) and exits with the error's ``exit_status`` (2: bad input, found
before any work); warnings, ours and the libraries', as one line each, each text once (``one_line_warnings``).
"""

import sys


def one_line_warnings(prefix: str = "lstmnb"):
    """A ``warnings.showwarning`` that says each warning as one line (``PREFIX: warning: ...``, not Python's two
    with the source line) and each text once: a library warning repeated by every loader or epoch (or again after a
    filter change resets Python's own once-only registry) is news only the first time."""
    said: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        if text not in said:
            said.add(text)
            print(f"{prefix}: warning: {text}", file=sys.stderr if file is None else file)

    return show


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM: a SLURM job's time limit, ``scancel``, ``kill``). A
    ``KeyboardInterrupt``, so every place that keeps finished work on Ctrl-C does so here too."""


class LstmnbError(Exception):
    """A problem the user can fix: bad input, missing data, an absent device."""


class ConfigError(LstmnbError, ValueError):
    """A parameter outside its valid range or choices."""


class DataError(LstmnbError):
    """The data asked for does not exist, or a store or cache is unusable."""


class DeviceError(LstmnbError):
    """The device or strategy asked for is not present on this machine."""


class CheckpointError(LstmnbError):
    """A checkpoint is corrupt, half-written or from a different run configuration."""


class OutputError(LstmnbError):
    """An output that cannot be written: a read-only place, a file where a folder is meant or the reverse.
    ``exit_status``: 1 where a write fails after the work (its results were printed first; the writer sets it), else
    the CLI's default, 2 (found before any work: nothing ran)."""


class DivergedError(LstmnbError):
    """A run's loss, gradient norm or forecast stopped being finite: it ended there and was recorded as
    ``diverged`` (``.result`` is the run). Exit status 1: the run happened, and failed."""

    exit_status = 1


class NotebookError(LstmnbError):
    """A notebook failed, or the series was asked for with a profile, notebook or parameter that does not exist."""

