"""05's Amdahl's law from its own DDP runs: the communication share of a step as 06 computes it for the
same runs (``report.scaling_table``), and the serial share, bound and predicted speedups it implies."""

from __future__ import annotations

from typing import Any, Sequence

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


def amdahl_table(shares: pd.DataFrame, ranks: int, measured: pd.Series | None = None,
                 predict: Sequence[int] = (1, 2, 4, 8, 16, 32)) -> tuple[dict[str, float], pd.DataFrame]:
    """Amdahl's law from strong-scaling runs. ``shares``: ``report.scaling_table`` of the runs (the step,
    compute and comm ms per rank count); ``measured``: speedups measured per rank count. With t1 the
    one-rank step and c, m the compute and all-reduce of the step on N = ``ranks`` ranks (t_N = c + m),
    Amdahl's t_N = t1 (s + (1 - s) / N) gives the serial share s = (N t_N / t1 - 1) / (N - 1), of which
    the all-reduce is N m / ((N - 1) t1); the part the ranks divide is p = N (t1 - c) / (N - 1). Returns
    s and its parts, and per rank count the speedup 1 / (s + (1 - s) / N), the speedup with the
    all-reduce growing with the ring's N - 1 steps, and the measured one."""
    if ranks < 2:
        raise ConfigError(f"ranks={ranks} must be 2 or more for Amdahl's law")
    g = shares.xs("strong", level="mode").reset_index().groupby("world_size").median(numeric_only=True)
    t1, c, m = g.loc[1, "step ms"], g.loc[ranks, "compute ms"], g.loc[ranks, "comm ms"]
    s = min(max((ranks * (c + m) / t1 - 1) / (ranks - 1), 0.0), 1.0)  # 1: no gain at all
    p = min(max(ranks * (t1 - c) / (ranks - 1), 0.0), t1)  # the part the ranks divide
    rows = []
    for n in predict:
        grown = t1 / (t1 - p + p / n + m * (n - 1) / (ranks - 1))
        got = measured.get(n, float("nan")) if measured is not None else float("nan")
        rows.append({"ranks": n, "Amdahl": 1 / (s + (1 - s) / n), "comm growing as N - 1": grown,
                     "measured": got})
    fit = {"t1 ms": t1, "serial ms": t1 - p, "divided ms": p, "comm ms": m, "serial share": s,
           "comm share of s": min(ranks * m / ((ranks - 1) * t1), s), "bound": 1 / s if s > 0 else float("inf")}
    return fit, pd.DataFrame(rows).set_index("ranks")
