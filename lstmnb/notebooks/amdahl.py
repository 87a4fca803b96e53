"""05's Amdahl's law from its own DDP runs: the communication share of a step as 06 computes it for the
same runs (``report.scaling_table``), and the serial share, bound and predicted speedups it implies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..errors import ConfigError


def comm_share(runs: list[dict[str, Any]]) -> pd.Series:
    """The communication share (%) of a DDP step per (mode, ranks), from the same function and runs as 06's
    scaling table (``report.scaling_table``: the median over runs of each run's comm / step), so 05 and 06
    print the same share for the same runs."""
    from ..report import scaling_table

    table = scaling_table(runs)
    if table.empty:
        return pd.Series(dtype=float)
    flat = table.reset_index().rename(columns={"world_size": "ranks"})
    return flat.groupby(["mode", "ranks"])["comm %"].median()


def amdahl_table(
    shares: pd.DataFrame, ranks: int, measured: pd.Series | None = None, predict: Sequence[int] = (1, 2, 4, 8, 16, 32)
) -> tuple[dict[str, float], pd.DataFrame]:
    """Amdahl's law from strong-scaling runs on N = ``ranks`` ranks. ``measured``: the speedups measured
    per rank count (epoch times); where N's is missing, the step times of ``shares`` stand in.
    ``shares``: ``report.scaling_table`` of the runs, whose ``comm %`` (the all-reduce's share f of the
    N-rank step) is the communication share 06 prints. Amdahl's t_N / t1 = s + (1 - s) / N, solved for the
    measured S = t1 / t_N, gives the serial share s = (N / S - 1) / (N - 1) (the Karp-Flatt metric); the
    all-reduce, f t_N = f t1 / S, is N f / ((N - 1) S) of it. Returns s and its parts, and per rank
    count M Amdahl's 1 / (s + (1 - s) / M), the same with the all-reduce growing as M - 1 (the ring's
    latency steps), and the measured speedup."""
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be 2 or more for Amdahl's law")
    g = shares.xs("strong", level="mode").reset_index().groupby("world_size").median(numeric_only=True)
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
    fit = {
        "speedup": speed,
        "from": source,
        "comm share of the step": f,
        "serial share": s,
        "comm share of s": min(ranks * comm / (ranks - 1), s),
        "bound": 1 / s if s > 0 else float("inf"),
    }
    return fit, pd.DataFrame(rows).set_index("ranks")
