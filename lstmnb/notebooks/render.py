"""A notebook executed by the runner, rendered to HTML for reading: cells tagged ``remove-cell`` are left
out (the Colab install cell, a parameters cell; papermill's injected parameters follow their cell),
cells tagged ``remove-input`` show their output only (the tags Jupyter Book uses, applied by nbconvert's
``TagRemovePreprocessor``), so that a report can open on its answer; math is written as MathML (``mathml``)
and the page loads no script from the web (``report_page.html.j2``), so it reads the same offline."""

from __future__ import annotations

from pathlib import Path

from ..paths import atomic_path
from .mathml import html_exporter

PAGE_TEMPLATE = Path(__file__).with_name("report_page.html.j2")  # nbconvert's lab page, nothing from the web
REMOVE_CELL = "remove-cell"
REMOVE_INPUT = "remove-input"


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def follow_parameters(nb) -> None:
    """Tag papermill's ``injected-parameters`` cell ``remove-cell`` when the ``parameters`` cell is: the
    values a hidden parameters cell received stay hidden with it."""
    if any("parameters" in _tags(c) and REMOVE_CELL in _tags(c) for c in nb.cells):
        for cell in nb.cells:
            if "injected-parameters" in _tags(cell) and REMOVE_CELL not in _tags(cell):
                cell.setdefault("metadata", {}).setdefault("tags", []).append(REMOVE_CELL)


def render_html(notebook: Path) -> Path:
    """Render an executed notebook to ``<name>.html`` beside it (nbconvert), atomically, without the
    cells and inputs its tags remove."""
    import nbformat
    from traitlets.config import Config

    nb = nbformat.read(notebook, as_version=4)
    follow_parameters(nb)
    config = Config()
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_cell_tags = {REMOVE_CELL}
    config.TagRemovePreprocessor.remove_input_tags = {REMOVE_INPUT}
    config.HTMLExporter.template_file = str(PAGE_TEMPLATE)
    body, _ = html_exporter(config).from_notebook_node(nb)
    target = Path(notebook).with_suffix(".html")
    with atomic_path(target, suffix=".html") as tmp:
        tmp.write_text(body, encoding="utf-8")
    return target
