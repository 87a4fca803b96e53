"""Notebook 08 (region mode) without a kernel: its shape, and which profile parameters reach it. The ci
series in test_notebooks.py executes it with every other notebook."""

from __future__ import annotations

from pathlib import Path

import nbformat

from lstmnb import notebooks
from lstmnb.profiles import load_profile

NB = Path(__file__).resolve().parents[1] / "notebooks" / "08_region.ipynb"


def test_notebook_08_shape():
    nb = nbformat.read(NB, as_version=4)
    nbformat.validate(nb)
    cells = nb.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# 08 ")
    for words in ("What it shows", "What it needs", "How long it takes"):
        assert words in cells[0].source
    assert '"google.colab" in sys.modules' in cells[1].source and "remove-cell" in cells[1].metadata.get("tags", [])
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and cells.index(tagged[0]) == 2
    for c in cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, "outputs must be stripped"
            assert "def " not in c.source or "def save" in c.source  # logic lives in lstmnb.region


def test_notebook_08_takes_the_shared_profile_parameters():
    params = notebooks.notebook_parameters(NB)
    assert {"profile", "label", "output_dir", "source", "start", "end", "window", "hidden", "device"} <= set(params)
    ci = load_profile("ci").parameters
    # the ci profile's tiny sizes reach 08 through the names it shares with the other notebooks
    plan = notebooks.plan_parameters([NB], ci, {}, {NB: params})[NB]
    assert plan["window"] == ci["window"] and plan["end"] == ci["end"] and "points" not in plan
