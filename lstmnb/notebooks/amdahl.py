"""05's Amdahl's law from its own DDP runs: from their scaling table (``report.scaling_table``, 06's function,
so both print the same communication share for the same runs), the serial share, bound and predicted speedups."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..errors import ConfigError


def amdahl_table(
    shares: pd.DataFrame, ranks: int, measured: pd.Series | None = None, predict: Sequence[int] = (1, 2, 4, 8, 16, 32)
) -> tuple[dict[str, float], pd.DataFrame]:
    """Amdahl's law from strong-scaling runs on N = ``ranks`` ranks. ``measured``: the speedups measured per rank
    count (epoch times); where N's is missing, the step times of ``shares`` stand in. ``shares``:
    ``report.scaling_table`` of the runs, whose ``comm %`` (the all-reduce's share f of the N-rank step) is the
    communication share 06 prints. Amdahl's t_N / t1 = s + (1 - s) / N, solved for the measured S = t1 / t_N, gives the
    serial share s = (N / S - 1) / (N - 1) (the Karp-Flatt metric); the all-reduce, f t_N = f t1 / S, is
    N f / ((N - 1) S) of it. Returns s and its parts, and per rank count M Amdahl's 1 / (s + (1 - s) / M), the same
    with the all-reduce growing as M - 1 (the ring's latency steps), and the measured speedup."""
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be 2 or more for Amdahl's law")
    g = shares.xs("strong", level="mode").groupby(level="ranks").median(numeric_only=True)
    speed = measured.get(ranks, float("nan")) if measured is not None else float("nan")
    source = "measured speedup"
    if not speed > 0:
        speed, source = g.loc[1, "step ms"] / g.loc[ranks, "step ms"], "step times"
    f = g.loc[ranks, "comm %"] / 100 if pd.notna(g.loc[ranks, "comm %"]) else 0.0
    s = min(max((ranks / speed - 1) / (ranks - 1), 0.0), 1.0)  # 1: no gain at all
    comm = f / speed  # the all-reduce in units of the one-rank step
    rest = min(max((1 / speed - comm - 1 / ranks) / (1 - 1 / ranks), 0.0), 1.0)  # serial, the all-reduce apart
    rows = []
    for n in predict:
        grown = 1 / (rest + (1 - rest) / n + comm * (n - 1) / (ranks - 1))
        got = measured.get(n, float("nan")) if measured is not None else float("nan")
        rows.append({"ranks": n, "Amdahl": 1 / (s + (1 - s) / n), "comm growing as N - 1": grown, "measured": got})
    fit = {"speedup": speed, "from": source, "comm share of the step": f, "serial share": s,
           "comm share of s": min(ranks * comm / (ranks - 1), s), "bound": 1 / s if s > 0 else float("inf")}
    return fit, pd.DataFrame(rows).set_index("ranks")
