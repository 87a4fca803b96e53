"""The package's imports point downward only, with no circles (docs/architecture.md, Rules): every import
in every module, a lazy one inside a function included, read from the source and checked against the one
order of the package's parts below. A new module in a new part must be placed in that order here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lstmnb"
# the package's parts, top to bottom: each may import only parts after it ("lstmnb" is the root __init__)
ORDER = ("__main__", "cli", "notebooks", "selfcheck", "doctor", "experiments", "scratch", "training", "region",
         "windows", "climate", "models", "report", "records", "rungs", "data", "datasets", "machine", "profiles",
         "record_schema", "rules", "paths", "lstmnb", "errors")
# within training: the order a run flows, as the architecture map draws it (``parallel`` one part)
TRAINING = ("pipeline", "parallel", "trainer", "checkpoints", "guards", "config", "step", "evaluate")


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in ROOT.rglob("*.py")}


def imports_of(module: str) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its source; ``from . import x`` names the
    module ``x`` (not the package that holds it)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{target}.{a.name}" for a in node.names} & MODULES.keys()
            found |= subs or ({target} & MODULES.keys())
    return found - {module}


def part(module: str, depth: int = 1) -> str:
    pieces = module.split(".")
    return pieces[depth] if len(pieces) > depth else pieces[depth - 1]


def test_every_part_is_placed_in_the_order():
    assert {part(m) for m in MODULES} == set(ORDER)
    assert {part(m, depth=2) for m in MODULES if m.startswith("lstmnb.training.")} == set(TRAINING)


@pytest.mark.parametrize("order, depth, inside", [(ORDER, 1, "lstmnb"), (TRAINING, 2, "lstmnb.training.")])
def test_imports_point_downward_only(order, depth, inside):
    upward = [f"{m} imports {t}" for m in MODULES if m.startswith(inside) for t in imports_of(m)
              if t.startswith(inside) and part(m, depth=depth) != part(t, depth=depth)
              and order.index(part(m, depth=depth)) > order.index(part(t, depth=depth))]
    assert not upward, upward


def test_no_module_imports_itself_back_through_others():
    graph = {m: imports_of(m) for m in MODULES}
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, " -> ".join(path[path.index(m):] + (m,))
        if m not in done:
            for t in graph[m]:
                visit(t, path + (m,))
            done.add(m)

    for m in graph:
        visit(m, ())
