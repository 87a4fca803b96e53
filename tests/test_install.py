"""Installed is as good as checked out: the wheel carries the notebook series, lstmnb finds it from any
folder, and `lstmnb notebooks copy` gives users an editable copy without ever overwriting their edits."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lstmnb.errors import NotebookError
from lstmnb.notebooks import notebooks_dir
from lstmnb.notebooks.folder import copy_series, shipped_folder

ROOT = Path(__file__).resolve().parents[1]
SERIES = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lstmnb", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_a_checkout_runs_its_own_notebooks(monkeypatch):
    monkeypatch.delenv("LSTMNB_NOTEBOOKS", raising=False)
    assert shipped_folder() == ROOT / "notebooks" and notebooks_dir() == ROOT / "notebooks"
    assert len(SERIES) == 8


def test_copy_gives_the_series_and_never_overwrites_edits(tmp_path):
    dest = tmp_path / "mine"
    copies = copy_series(dest)
    assert [p.name for p in copies] == SERIES
    assert all((dest / n).read_bytes() == (ROOT / "notebooks" / n).read_bytes() for n in SERIES)
    (dest / SERIES[0]).write_text("my edits")
    with pytest.raises(NotebookError, match=f"already holds {SERIES[0]}.*nothing was copied.*--overwrite"):
        copy_series(dest)
    assert (dest / SERIES[0]).read_text() == "my edits"
    copy_series(dest, overwrite=True)
    assert (dest / SERIES[0]).read_bytes() == (ROOT / "notebooks" / SERIES[0]).read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == SERIES  # no temporaries left beside them


@pytest.mark.parametrize("make, message", [
    (lambda d: (d / "file.txt").write_text("x") and d / "file.txt", "is a file, not a folder"),
    (lambda d: ROOT / "notebooks", "is the series itself"),
    (lambda d: "", "is empty; give one"),
])
def test_copy_refuses_in_one_line(tmp_path, make, message):
    out = _cli("notebooks", "copy", str(make(tmp_path)), cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.ipynb"))


def test_pyproject_lists_every_package_and_holds_the_one_version():
    """pyproject.toml is the only build file: its package list is every folder of lstmnb with an __init__.py
    (plus the mapped series), and the version lives in lstmnb/__init__.py alone."""
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_packages

    import lstmnb

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = conf["tool"]["setuptools"]["packages"]
    assert sorted(listed) == sorted(find_packages(str(ROOT), include=["lstmnb", "lstmnb.*"]) + ["lstmnb.series"])
    assert "version" not in conf["project"] and conf["project"]["dynamic"] == ["version"]
    assert conf["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lstmnb.__version__"}
    assert not (ROOT / "setup.py").exists() and lstmnb.__version__
    from importlib.metadata import version

    assert version("lstmnb") == lstmnb.__version__  # what pip installed says the same


@pytest.mark.slow
def test_the_wheel_carries_the_series_and_runs_it_from_any_folder(tmp_path):
    """Build the wheel (no network: this Python's setuptools), unpack it as an installation would, and from an
    empty folder, with no checkout on the path, list and copy the notebooks it carries. Built from a copy of
    the checkout: setuptools builds in the source tree and keeps its build/lib between builds, so a build in
    the checkout writes into it and ships whatever an earlier build left there (a module since removed)."""
    import shutil

    source = tmp_path / "checkout"
    for folder in ("lstmnb", "notebooks"):  # what pyproject.toml packages, and the files it names
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(wheels), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(wheels.glob("lstmnb-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert [n.rsplit("/", 1)[1] for n in sorted(names) if n.startswith("lstmnb/series/")] == SERIES
    for needed in ("lstmnb/profiles/quick.yaml", "lstmnb/published_figures.yaml", "lstmnb/prices.yaml",
                   "lstmnb/reference_records/h100-cli-runs.jsonl", "lstmnb/reference_records/h100-study-setting.jsonl"):
        assert needed in names
    import lstmnb

    assert f"lstmnb-{lstmnb.__version__}.dist-info/METADATA" in names
    licence = next(n for n in names if n.endswith("LICENSE"))
    assert "MIT License" in zipfile.ZipFile(wheel).read(licence).decode()
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LSTMNB_NOTEBOOKS"}
    env["PYTHONPATH"] = str(site)  # the unpacked wheel instead of the checkout
    where = subprocess.run([sys.executable, "-c", "import lstmnb; print(lstmnb.__file__)"], cwd=empty, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(site / "lstmnb" / "__init__.py")
    listed = _cli("notebooks", "list", cwd=empty, env=env)
    assert listed.returncode == 0, listed.stderr
    assert all(n[:-6] in listed.stdout for n in SERIES)
    copied = _cli("notebooks", "copy", "nb", cwd=empty, env=env)
    assert copied.returncode == 0, copied.stderr
    assert sorted(p.name for p in (empty / "nb").iterdir()) == SERIES
