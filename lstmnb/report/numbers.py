"""How the report writes a figure, in one place: sentences, tables and chart labels alike.

A measured time or rate is written to three significant figures (a training time varies by more than
that from run to run). A figure given with at most two decimals, as the study published its table, is
written as given: 146.41 s stays 146.41 s, never "146 s" or "146.00". Times of 1000 s and more are
written as whole seconds, never in exponent notation.
"""

from __future__ import annotations

import math


def figure(value: float) -> str:
    """``value`` as the report writes it: '8.03', '46.42', '146.41', '1234', '0.0123'."""
    value = float(value)
    if not math.isfinite(value):
        return "—"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value * 100 - round(value * 100)) < 1e-6:  # given to two decimals or fewer: as given
        return f"{round(value, 2):g}"
    return f"{value:.3g}"


def seconds(value: float) -> str:
    """'8.03 s', '146.41 s'."""
    return f"{figure(value)} s"


def ratio(value: float) -> str:
    """A derived ratio, three significant figures: '1.17x', '14.6x'."""
    return f"{float(value):.3g}x"


def rate(value: float) -> str:
    """Samples per second, short: '25.4k', '1.81M', '950'."""
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if value >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.3g}"
