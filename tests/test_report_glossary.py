"""One glossary (report.words): every word the report uses is defined, and README carries the same text."""

from __future__ import annotations

from pathlib import Path

from lstmnb import report

ROOT = Path(__file__).resolve().parents[1]


def test_every_term_the_report_uses_is_defined():
    wanted = ["like for like", "published setting", "published problem", "fast path / fast input", "DataLoader path",
              "blend", "cycles input", "persistence", "climatology", "MSE skill score", "warm-up epoch", "samples/s",
              "MFU", "strong scaling", "weak scaling", "efficiency", "all-reduce", "busbw", "CUDA graph",
              "launch-bound", "synthetic vs real data", "reference records", "tied", "repeats"]
    assert set(wanted) <= set(report.GLOSSARY)
    assert all(len(text) > 30 and text.endswith(".") for text in report.GLOSSARY.values())
    assert f"{report.REPEATS_DISAGREE:.0%}" in report.GLOSSARY["repeats"]
    assert f"{report.TIED_WITHIN:.0%}" in report.GLOSSARY["tied"]


def test_readme_carries_the_glossary_as_the_report_shows_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Glossary" in readme and report.glossary_markdown() in readme
    assert "report.glossary_markdown()" in (ROOT / "notebooks" / "06_analysis.ipynb").read_text(encoding="utf-8")
