"""Problem size: samples/s and seconds per epoch against the number of grid points, on the CPU and on a GPU (eager and
with the step captured as a CUDA graph). At the published two points a GPU is launch-bound; with more points each step
carries more work and the GPU pulls ahead. The experiment finds where (the crossover) and by how much (the speedup).
Each point is a run record; a device that is not here gives ``skipped`` records with the reason."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from ..datasets.study import STUDY_POINTS
from ..machine.device import no_cuda_reason
from ..records import Recorder
from ..rules import PYTHON, Spelling
from ..training import TrainConfig, prepare_windows, skipped_record, train

VARIANTS = ("cpu", "cuda-eager", "cuda-graph")


def grid_points(n: int, lat: tuple[float, float] = (19.0, 41.0), lon: tuple[float, float] = (279.0, 281.0),
                step: float = 0.25, say: Spelling = PYTHON) -> tuple[tuple[float, float], ...]:
    """``n`` grid points of a lat/lon box: the study's two first, then cells spread evenly over the box
    (the synthetic sample's box by default, 801 cells); more than the box holds is refused as ``say`` spells it."""
    lats = np.arange(lat[1], lat[0] - step / 2, -step)
    lons = np.arange(lon[0], lon[1] + step / 2, step)
    cells = [(float(a), float(o)) for a in lats for o in lons]
    if not 1 <= n <= len(cells):
        raise say.refuse("points", n, f"must be between 1 and the box's {len(cells)} grid cells")
    chosen = [p for p in STUDY_POINTS if p in cells][:n]
    rest = [c for c in cells if c not in chosen]
    picks = np.linspace(0, len(rest) - 1, n - len(chosen)).round().astype(int) if n > len(chosen) else []
    return tuple(chosen + [rest[i] for i in picks])


@dataclass
class SizeConfig:
    """Grid-point counts to run and the device variants to run them on."""

    points: tuple[int, ...] = (2, 8, 32, 128, 512)
    variants: tuple[str, ...] = VARIANTS

    def validate(self, say: Spelling = PYTHON) -> None:
        points = self.points if isinstance(self.points, (list, tuple)) else ()
        if not points or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in points):
            raise say.refuse("points", self.points, "must be whole numbers >= 1")
        variants = self.variants if isinstance(self.variants, (list, tuple)) else ()
        if not variants or any(v not in VARIANTS for v in variants):
            raise say.refuse("variants", self.variants, f"must be one or more of {', '.join(VARIANTS)}")


def ran_variant(variant: str, record: dict[str, Any]) -> str:
    """The label of what a point measured. Pure: a ``cuda-graph`` point whose record says no graph was captured and
    replayed (refused, or too few full batches) timed eager steps: ``cuda-graph (not used)``, never a graph's speed."""
    if variant == "cuda-graph" and record.get("status") == "ok" and not (record.get("cuda_graph") or {}).get("used"):
        return "cuda-graph (not used)"
    return variant


def size_experiment(request, cfg: TrainConfig, sc: SizeConfig = SizeConfig(), *, results=None,
                    on_point: Callable[[dict[str, Any]], None] | None = None, say: Spelling = PYTHON) -> list[dict]:
    """One run per (point count, variant) on the request's time range and ``cfg``'s setting (strategy single, fast
    path). The study's data holds two points, so sizes beyond them come from the synthetic sample (every size, to
    compare alike; the records' ``data.kind`` says synthetic). ``say``: how refusals and advice name settings."""
    from ..data import SAMPLE, STUDY

    sc.validate(say)
    base = replace(cfg, strategy="single", input_path="fast", checkpoint=None, resume=False, experiment="size")
    no_gpu = None if torch.cuda.is_available() else no_cuda_reason()
    recorder = Recorder(results, on_point)
    for n in sc.points:
        source = SAMPLE if request.source == STUDY else request.source
        windows, info = prepare_windows(replace(request, source=source, points=grid_points(n), box=None), base,
                                        progress=cfg.progress, say=say)
        for variant in sc.variants:
            run_cfg = (replace(base, device="cpu", amp="off") if variant == "cpu" else  # amp: the GPU variants'
                       replace(base, device="cuda", cuda_graph=variant == "cuda-graph"))
            size = {"points": n, "variant": variant, "train_samples": int(windows.x["train"].shape[0])}
            if variant != "cpu" and no_gpu:
                rec = skipped_record(run_cfg, no_gpu, data=info, size=size)
            else:
                rec = train(windows, run_cfg, data_info=info, say=say).record
                rec["size"] = {**size, "ran": ran_variant(variant, rec)}
            recorder.add(rec)
    return recorder.records


def size_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """samples/s and s/epoch per point count (rows) and variant (columns: what each point ran, see ``ran_variant``), the
    GPU variants' speedup over the CPU, and the crossover: the fewest points at which each GPU variant beats the CPU."""
    rows = [{"points": r["size"]["points"], "variant": r["size"].get("ran", r["size"]["variant"]),
             "samples_per_s": r["timing"]["samples_per_s"], "epoch_s": r["timing"]["epoch_s_median"]}
            for r in records if r.get("status") == "ok" and r.get("size")]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).groupby(["points", "variant"]).median()
    sps = df["samples_per_s"].unstack("variant")
    out = pd.concat({"samples/s": sps, "s/epoch": df["epoch_s"].unstack("variant")}, axis=1)
    if "cpu" in sps:
        for v in (c for c in sps.columns if c != "cpu"):
            out[("speedup vs cpu", v)] = sps[v] / sps["cpu"]
    return out


def crossover(table: pd.DataFrame) -> dict[str, int | None]:
    """Per GPU variant: the fewest points at which it trains more samples/s than the CPU (None: never)."""
    if table.empty or "speedup vs cpu" not in table.columns.get_level_values(0):
        return {}
    speed = table["speedup vs cpu"]
    return {v: next((int(n) for n, s in speed[v].items() if s > 1), None) for v in speed.columns}


def plot_size(table: pd.DataFrame):
    """samples/s against grid points (log-log) per variant, and the GPU variants' speedup over the CPU."""
    import matplotlib.pyplot as plt

    has_speedup = "speedup vs cpu" in table.columns.get_level_values(0)
    fig, axes = plt.subplots(1, 2 if has_speedup else 1, figsize=(11 if has_speedup else 6, 3.8), squeeze=False)
    ax = axes[0][0]
    for v in table["samples/s"].columns:
        ax.plot(table.index, table[("samples/s", v)], marker="o", label=v)
    ax.set(xscale="log", yscale="log", xlabel="grid points", ylabel="training samples / s", title="throughput")
    ax.legend()
    if has_speedup:
        ax = axes[0][1]
        for v in table["speedup vs cpu"].columns:
            ax.plot(table.index, table[("speedup vs cpu", v)], marker="o", label=v)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set(xscale="log", xlabel="grid points", ylabel="x the CPU's samples/s", title="GPU over CPU")
        ax.legend()
    fig.tight_layout()
    return fig


def format_size_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as text cells: samples/s whole, seconds to 3 decimals, speedups to 2."""
    fmt = {"samples/s": "{:,.0f}", "s/epoch": "{:.3f}", "speedup vs cpu": "{:.2f}x"}
    out = table.copy().astype(object)
    for col in table.columns:
        out[col] = table[col].map(lambda v, f=fmt[col[0]]: "-" if pd.isna(v) else f.format(v))
    out.columns = [f"{a} {b}" for a, b in table.columns]
    return out
