"""What a new user meets before the first run: the environment variables in `lstmnb --help` and the
README, the `bench` extra for the benchmarks' imports, `Request(box=...)`, and the notebooks' Colab
install cell (run as IPython runs it, with a stand-in for Colab)."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest

from lstmnb.data import DEFAULT_POINTS, Request
from lstmnb.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_help_and_readme_name_the_environment_variables():
    out = subprocess.run([sys.executable, "-m", "lstmnb", "--help"], capture_output=True, text=True, check=True).stdout
    readme = (ROOT / "README.md").read_text()
    for name in ("LSTMNB_CACHE", "LSTMNB_RESULTS", "OMP_NUM_THREADS"):
        assert name in out and name in readme
    assert "## Environment" in readme


def _top_modules(path: Path) -> set[str]:
    """Top-level names of every module a script imports (module level or inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _requirement_names(reqs: list[str]) -> set[str]:
    return {r.split(">")[0].split("=")[0].split("[")[0].split("<")[0].strip().lower() for r in reqs}


def test_bench_extra_covers_every_benchmark_import():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    have = _requirement_names(meta["dependencies"]) | _requirement_names(meta["optional-dependencies"]["bench"])
    scripts = list((ROOT / "benchmarks").glob("*.py"))
    used = set().union(*(_top_modules(p) for p in scripts))
    own = {p.stem for p in scripts}  # the benchmarks' helper beside them (_tiny)
    third_party = {m for m in used if m not in sys.stdlib_module_names and m not in ("lstmnb", "__future__", *own)}
    assert third_party - have == set()
    assert "dask" in have  # era5_extract's published approach: open_zarr(chunks=...) is dask
    assert '".[bench]"' in (ROOT / "README.md").read_text()  # README names the extra


def test_a_box_alone_is_a_box_request():
    r = Request(box=(38.0, 42.0, 279.0, 281.0))
    assert r.points is None and r.box == (38.0, 42.0, 279.0, 281.0)
    assert Request().points == DEFAULT_POINTS
    with pytest.raises(ConfigError, match="both points=.* and box="):
        Request(points=((40.0, 280.0),), box=(38.0, 42.0, 279.0, 281.0))


# --- environment.yml (conda on a laptop), carc/environment.yml (the cluster) and pyproject.toml (pip) agree ---------------

# conda-forge's names for pip's
CONDA_NAMES = {"pytorch": "torch", "matplotlib-base": "matplotlib", "jupyter_client": "jupyter-client"}
ENVIRONMENT_ONLY = {"python", "pip", "jupyterlab",  # the interpreter, the installer, the cluster's editor
                    "cudnn", "cuda-version"}  # conda's CUDA stack, pinned for P100/V100 (pip wheels bundle theirs)


def _name_and_bound(spec: str, conda: bool) -> tuple[str, str | None]:
    """('torch', '2.4') from 'torch>=2.4' (pip) or 'pytorch >=2.4 cuda*' (conda)."""
    import re

    name = re.split(r"[\s<>=!~\[;]", spec.strip(), maxsplit=1)[0]
    bound = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", spec)
    name = name.lower().replace("_", "-") if not conda else CONDA_NAMES.get(name, name).lower().replace("_", "-")
    return name, bound.group(1) if bound else None


def _environment_yml(text: str) -> dict[str, str | None]:
    import yaml

    out = {}
    for dep in yaml.safe_load(text)["dependencies"]:
        for spec, conda in ([(dep, True)] if isinstance(dep, str) else [(s, False) for s in dep["pip"]]):
            if not spec.startswith("-e"):
                name, bound = _name_and_bound(spec, conda)
                out[name] = bound
    return out


def _disagreements(pyproject: str, environment: str) -> dict[str, tuple]:
    """Package -> (pyproject's lower bound, environment.yml's or 'absent') for every package of the
    dependencies and the cloud and test extras that the two files do not agree on; and environment.yml's
    packages that pyproject lacks (beyond the environment's own)."""
    import tomllib

    meta = tomllib.loads(pyproject)["project"]
    extras = meta["optional-dependencies"]

    def expanded(reqs: list[str]) -> list[str]:  # 'lstmnb[site]' is the site extra's packages
        out = []
        for r in reqs:
            out += expanded(extras[r.split("[")[1].rstrip("]")]) if r.startswith("lstmnb[") else [r]
        return out

    wanted = dict(_name_and_bound(r, conda=False) for r in expanded(meta["dependencies"] + extras["cloud"] + extras["test"]))
    have = _environment_yml(environment)
    out = {n: (b, have.get(n, "absent")) for n, b in wanted.items() if have.get(n, "absent") != b}
    out.update({n: ("absent", have[n]) for n in set(have) - set(wanted) - ENVIRONMENT_ONLY})
    return out


@pytest.mark.parametrize("env_file", ["environment.yml", "carc/environment.yml"])
def test_environment_yml_agrees_with_pyproject(env_file):
    pytest.importorskip("tomllib")  # Python 3.11+
    assert _disagreements((ROOT / "pyproject.toml").read_text(), (ROOT / env_file).read_text()) == {}


def test_the_cpu_environment_solves_anywhere_and_the_cluster_one_installs_the_checkout():
    """The root file is for laptops on Linux, macOS and Windows: a CPU torch and no CUDA pins; the cluster's
    keeps its CUDA pins. Both install this checkout: conda runs pip in the environment file's folder."""
    import yaml

    def parts(path):
        deps = yaml.safe_load((ROOT / path).read_text())["dependencies"]
        conda = [d for d in deps if isinstance(d, str)]
        pip = next(d["pip"] for d in deps if isinstance(d, dict))
        return conda, pip

    conda, pip = parts("environment.yml")
    assert "pytorch >=2.4 cpu*" in conda and not any(d.startswith(("cudnn", "cuda-version")) for d in conda)
    assert "-e ." in pip and (ROOT / "pyproject.toml").exists()
    conda, pip = parts("carc/environment.yml")
    assert "pytorch >=2.4 cuda*" in conda and any(d.startswith("cudnn") for d in conda)
    assert "-e .." in pip and (ROOT / "carc" / ".." / "pyproject.toml").exists()
    assert "-f carc/environment.yml" in (ROOT / "carc" / "install_kernel.sh").read_text()


def test_the_environment_check_finds_drift():
    """The same check on drifted copies: a lower bound changed, a package left out, one added."""
    pytest.importorskip("tomllib")
    pyproject, env = (ROOT / "pyproject.toml").read_text(), (ROOT / "carc" / "environment.yml").read_text()
    drifted = env.replace("zarr >=3.1", "zarr >=2.16").replace("  - scipy >=1.10\n", "").replace(
        "  - pip\n", "  - pip\n  - dask >=2024.1\n")
    assert _disagreements(pyproject, drifted) == {"zarr": ("3.1", "2.16"), "scipy": ("1.10", "absent"),
                                                  "dask": ("absent", "2024.1")}


# --- the Colab cell ------------------------------------------------------------------------------

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _colab_cell(path: Path) -> str:
    return nbformat.read(path, as_version=4).cells[1].source


def test_every_notebook_has_the_same_colab_cell():
    """One line, the same in every notebook, hidden from the rendered report, with no address to edit."""
    cells = [nbformat.read(p, as_version=4).cells[1] for p in NOTEBOOKS]
    assert NOTEBOOKS and len({c.source for c in cells}) == 1
    assert len(cells[0].source.splitlines()) == 1 and "github.com" not in cells[0].source
    assert all("remove-cell" in c.metadata.get("tags", []) for c in cells)
    assert cells[0].source.split("  #")[0].endswith(";")  # IPython prints no 'False' under it outside Colab


def _run_cell(source: str, cwd: Path, monkeypatch, colab: bool = True) -> list[str]:
    """The cell as IPython runs it (magics transformed), under a stand-in for Colab; returns the %pip lines."""
    from IPython.core.inputtransformer2 import TransformerManager

    calls: list[str] = []

    class Shell:
        def run_line_magic(self, name, line, _stack_depth=1):
            calls.append(f"%{name} {line}")

    code = TransformerManager().transform_cell(source)
    monkeypatch.chdir(cwd)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(code, "colab-cell", "exec"), {"get_ipython": lambda: Shell()})
    return calls


def test_colab_cell_installs_the_checkout_it_was_opened_from(monkeypatch):
    calls = _run_cell(_colab_cell(NOTEBOOKS[0]), ROOT / "notebooks", monkeypatch)
    assert calls == ["%pip install -q .."]
    assert (ROOT / "notebooks" / "..").resolve() == ROOT


def test_colab_cell_elsewhere_installs_the_clone_in_content(monkeypatch, tmp_path):
    """Colab's kernel starts in /content whatever notebook it opened: the README's clone goes to
    /content/lstmnb, and that is what the cell installs (pip names the folder if it is missing)."""
    assert _run_cell(_colab_cell(NOTEBOOKS[0]), tmp_path, monkeypatch) == ["%pip install -q /content/lstmnb"]


def test_colab_cell_does_nothing_outside_colab(monkeypatch, tmp_path):
    assert _run_cell(_colab_cell(NOTEBOOKS[0]), ROOT / "notebooks", monkeypatch, colab=False) == []


# --- the licence and the citation ------------------------------------------------------------------

def test_licence_and_citation_agree_with_pyproject():
    import yaml

    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    licence = (ROOT / "LICENSE").read_text()
    assert meta["license"] == {"text": "MIT"} and licence.startswith("MIT License")
    assert "the lstmnb developers" in licence.splitlines()[2]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert {"cff-version", "message", "title", "authors"} <= set(cff)  # the format's required keys
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT" and cff["type"] == "software"
    assert cff["authors"] == [{"name": "the lstmnb developers"}] == [{"name": a["name"]} for a in meta["authors"]]
    assert "version" not in cff  # one place for the version: lstmnb/__init__.py
    assert any(r.get("doi") == "10.1002/qj.3803" for r in cff["references"])  # ERA5, the data
