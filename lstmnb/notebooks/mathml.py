"""The notebooks' math in the rendered report as MathML, which every current browser draws itself, so
that a report read offline (a cluster's run folder copied to a laptop, a train) shows equations, not
raw TeX: nbconvert's HTML and Sphinx's pages otherwise leave the TeX for MathJax, loaded from the web.

latex2mathml does the conversion; TeX it cannot read stays visible as TeX in a ``code`` element (and the
page still renders). Used by ``render`` (each notebook's HTML) and, as a Sphinx extension registering
the ``mathml`` math renderer, by ``site``.
"""

from __future__ import annotations

import functools
import html

SPHINX_RENDERER = "mathml"  # the name site's conf.py gives html_math_renderer


def to_mathml(tex: str, display: bool = False) -> str:
    """``tex`` (without its ``$`` delimiters) as a ``<math>`` element, block-level when ``display``."""
    from latex2mathml.converter import convert

    try:
        return convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - latex2mathml raises a dozen plain Exception subclasses on bad TeX
        return f'<code class="tex">{html.escape(tex)}</code>'


@functools.lru_cache(maxsize=None)
def renderer_class():
    """nbconvert's markdown renderer (``IPythonRenderer``) with its math methods writing MathML."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer

    class MathMLRenderer(IPythonRenderer):
        def block_math(self, body: str) -> str:
            return to_mathml(body, display=True)

        def inline_math(self, body: str) -> str:
            return to_mathml(body)

        def latex_environment(self, name: str, body: str) -> str:
            return to_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

        def multiline_math(self, text: str) -> str:  # with mistune 2 (nbconvert < 7.6): delimiters included
            for start, end in (("$$", "$$"), ("\\[", "\\]")):
                if text.startswith(start) and text.endswith(end) and len(text) > len(start) + len(end):
                    return to_mathml(text[len(start):-len(end)], display=True)
            return text

    return MathMLRenderer


def html_exporter(config):
    """nbconvert's ``HTMLExporter`` whose markdown renderer writes math as MathML."""
    from jinja2 import pass_context
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    class MathMLExporter(HTMLExporter):
        # the renderer HTMLExporter.markdown2html builds (nbconvert 7.x), with the math written out;
        # lexer_options arrived in nbconvert 7.16.6
        @pass_context
        def markdown2html(self, context, source):
            cell = context.get("cell", {})
            renderer = renderer_class()(
                escape=False, attachments=cell.get("attachments", {}), embed_images=self.embed_images,
                path=context.get("resources", {}).get("metadata", {}).get("path", ""),
                anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
                **getattr(self, "lexer_options", {}))
            return MarkdownWithMath(renderer=renderer).render(source)

    return MathMLExporter(config=config)


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
