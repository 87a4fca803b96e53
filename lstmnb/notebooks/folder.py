"""Where the notebook series lives, and a copy of it for users who want to edit it: in a checkout ``notebooks/`` beside
the package; a wheel carries the same files as ``lstmnb/series/`` (pyproject.toml maps the folder into the package)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import NotebookError
from ..paths import atomic_path

_PACKAGE = Path(__file__).resolve().parents[1]
PATTERN = "[0-9][0-9]_*.ipynb"


def shipped_folder() -> Path | None:
    """The series this installation carries: the checkout's ``notebooks/`` (an editable install or a
    clone on the path), else the copy inside the installed package; None when neither holds notebooks."""
    checkout = _PACKAGE.parent
    for folder in ((checkout / "notebooks") if (checkout / "pyproject.toml").is_file() else None, _PACKAGE / "series"):
        if folder is not None and any(folder.glob(PATTERN)):
            return folder
    return None


def check_copy(dest: str | os.PathLike, *, overwrite: bool = False) -> tuple[Path, list[Path]]:
    """(target folder, the notebooks to copy) for ``copy_series``, or one line on why not: no series here,
    ``dest`` a file or the series itself, or notebooks already in ``dest`` (unless ``overwrite``)."""
    source = shipped_folder()
    if source is None:
        raise NotebookError("this installation carries no notebooks (neither a checkout's notebooks/ nor "
                            "lstmnb/series/); reinstall lstmnb")
    if not str(dest).strip():  # Path("") is the current folder: an empty argument is a slip, not a choice
        raise NotebookError("the folder to copy the notebooks into is empty; give one (`.` for this folder)")
    target = Path(dest).expanduser()
    if target.exists() and not target.is_dir():
        raise NotebookError(f"{str(dest)!r} is a file, not a folder; give a folder to copy the notebooks into")
    if target.resolve() == source.resolve():
        raise NotebookError(f"{target} is the series itself; give another folder")
    notebooks = sorted(source.glob(PATTERN))
    present = [p.name for p in notebooks if (target / p.name).exists()]
    if present and not overwrite:
        raise NotebookError(f"{target} already holds {', '.join(present)}; nothing was copied (pass --overwrite "
                            "to replace them, or choose an empty folder)")
    return target, notebooks


def copy_series(dest: str | os.PathLike, *, overwrite: bool = False) -> list[Path]:
    """Copy the shipped notebooks into ``dest`` (created if needed), each atomically, and return the copies; unless
    ``overwrite``, notebooks already there refuse the whole copy, so a user's edits are never lost by accident."""
    target, notebooks = check_copy(dest, overwrite=overwrite)
    try:
        target.mkdir(parents=True, exist_ok=True)
        for nb in notebooks:
            with atomic_path(target / nb.name, suffix=".ipynb") as tmp:
                shutil.copyfile(nb, tmp)
    except OSError as exc:
        raise NotebookError(f"cannot copy the notebooks into {target}: {exc.strerror or exc}") from None
    return [target / nb.name for nb in notebooks]
