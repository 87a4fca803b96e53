"""A Sphinx extension (named in the site's conf.py): the notebooks' math in the rendered report as MathML, which
browsers draw themselves, so that a report read offline shows equations, not the raw TeX that Sphinx leaves for
MathJax (loaded from the web). latex2mathml converts; TeX it cannot read stays visible in a ``code`` element."""

from __future__ import annotations

import html

SPHINX_RENDERER = "mathml"  # the name site's conf.py gives html_math_renderer


def to_mathml(tex: str, display: bool = False) -> str:
    """``tex`` (without its ``$`` delimiters) as a ``<math>`` element, block-level when ``display``."""
    from latex2mathml.converter import convert

    try:
        return convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - latex2mathml raises a dozen plain Exception subclasses on bad TeX
        return f'<code class="tex">{html.escape(tex)}</code>'


def _visit_inline(self, node) -> None:
    from docutils import nodes

    self.body.append(to_mathml(node.astext()))
    raise nodes.SkipNode


def _visit_block(self, node) -> None:
    """A displayed block: one ``<math>`` per equation (Sphinx separates them by blank lines)."""
    from docutils import nodes

    for part in node.astext().split("\n\n"):
        if part.strip():
            self.body.append(to_mathml(part, display=True))
    raise nodes.SkipNode


def setup(app):
    """Sphinx extension: ``html_math_renderer = "mathml"``."""
    app.add_html_math_renderer(SPHINX_RENDERER, inline_renderers=(_visit_inline, None),
                               block_renderers=(_visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
