"""Region experiments, each case a run record (``records.Recorder``; ``results=None``: not recorded): the
region forecaster's variants scored per cell, memory and step time against the area's size, and the
area sharded over local gloo ranks (row bands with halo exchange, or time windows) against one process.

The models, the memory model and the rank logic live in ``lstmnb.region``; this module runs them and
writes the records. Sharded ranks are started by ``training.parallel.spawn``, as DDP ranks are.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..records import Recorder, new_record

SKILL, MEMORY, SCALING = "region-skill", "region-memory", "region-scaling"


def _area(data) -> dict[str, Any]:
    ny, nx = data.grid.shape
    return {"cells": data.n_cells, "shape": [ny, nx], "hours": len(data.times), "samples": data.sizes(),
            "grid": {"latitude": data.grid.lat.tolist(), "longitude": data.grid.lon.tolist()}}


def region_info(request, data) -> dict[str, Any]:
    """The records' ``data`` section: the request, and the area's grid, hours and samples per split."""
    return {**request.as_record(), **_area(data)}


def cell_rows(maps, name: str, targets: int) -> list[dict[str, Any]]:
    """One row per cell (row-major), as ``training.evaluate.per_point_scores`` writes them: the RMSE of
    forecast ``name`` and of both baselines, and the skill scores."""
    from ..data import point_label
    from ..training.evaluate import score_row

    lat = np.repeat(maps["latitude"].values, maps.sizes["longitude"])
    lon = np.tile(maps["longitude"].values, maps.sizes["latitude"])
    got = {k: maps[v].values.reshape(-1) for k, v in (("model", name), ("persistence", "persistence"),
                                                        ("climatology", "climatology"))}
    return [score_row(point_label(lat[i], lon[i]), maps.attrs["lead_hours"], targets,
                      {k: float(v[i]) ** 2 for k, v in got.items()}) for i in range(lat.size)]


def region_skill(data, variants: dict, train_cfg, *, data_info: dict | None = None, results=None,
                 profile: str | None = None, on_epoch: Callable[[str, dict], None] | None = None,
                 on_point: Callable[[dict[str, Any]], None] | None = None):
    """Train each named ``RegionConfig`` of ``variants`` on ``data`` (a ``RegionData``; same seed, same
    batches) and score every cell against persistence and climatology on the same target hours.

    Returns (table, maps, records): ``region.train.compare``'s table and maps, and one record per
    variant with its epochs, timing, pooled metrics and every cell's scores (``skill.per_point``, so
    ``region.grid.record_maps`` draws its map as it does a `train --box` run's). ``data_info``: the
    records' ``data`` section (``region_info``; default: the area alone). ``profile``: the device
    profile the records name (a notebook run's), as in every experiment.
    """
    from ..region.train import compare

    table, maps, fits = compare(data, variants, train_cfg, on_epoch=on_epoch)
    info = data_info or _area(data)
    window_cfg = data.config
    targets = data.sizes()["test"] * window_cfg.horizon
    recorder = Recorder(results, on_point)
    for name, fit in fits.items():
        mcfg = variants[name]
        config = {**dataclasses.asdict(mcfg), **dataclasses.asdict(train_cfg), "variant": name,
                  "window": window_cfg.window, "lead_hours": window_cfg.lead_hours, "fractions": window_cfg.fractions}
        row = table.loc[name]
        seconds = [e["seconds"] for e in fit.history]
        recorder.add(new_record(
            SKILL, device=train_cfg.device, profile=profile, config=config, data=info, epochs=fit.history,
            timing={"train_s": fit.train_s, "epoch_s_median": float(np.median(seconds))},
            metrics={"test_rmse_k": maps.attrs[f"pooled_rmse_{name}"],
                     "persistence_rmse_k": maps.attrs["pooled_rmse_persistence"],
                     "climatology_rmse_k": maps.attrs["pooled_rmse_climatology"],
                     "mean_cell_rmse_k": float(row["mean_cell_rmse_k"]),
                     "cells_better_than_persistence": float(row["cells_better_than_persistence"]),
                     "best_epoch": fit.best_epoch, "epochs_run": len(fit.history), "parameters": int(row["parameters"])},
            skill={"lead_hours": window_cfg.lead_hours, "per_point": cell_rows(maps, name, targets)}))
    return table, maps, recorder.records


_MEMORY_STATUS = {"ok": "ok", "failed": "failed", "over budget": "skipped"}


def region_memory(sides, variants=("sparse", "dense"), budget_bytes: float = 4 * 2**30, base=None, *,
                  target: tuple[int, int] | None = None, results=None, profile: str | None = None,
                  echo: Callable[[str], None] | None = None, on_point: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """``region.memory.sweep`` (square areas per variant up to the budget, each measured in a fresh
    process beside the memory model's prediction), one record per case: the first area over the budget
    is recorded as skipped with its predicted size, a failed case as failed with its reason. ``target``
    (rows, columns): an area the sparse model must train, measured and recorded too (the last row,
    ``attrs['target']``), whatever the budget."""
    from ..region.memory import MemoryCase, measure, sweep

    base = base or MemoryCase()
    df = sweep(sides, variants, budget_bytes, base, echo=echo)
    if target is not None:
        row = measure(dataclasses.replace(base, ny=int(target[0]), nx=int(target[1]), variant="sparse"),
                      df.attrs["floor_bytes"])
        attrs = dict(df.attrs)  # concat keeps no attrs
        df = pd.concat([df.assign(target=False), pd.DataFrame([{**row, "target": True}])], ignore_index=True)
        df.attrs.update(attrs, target=row)
    recorder = Recorder(results, on_point)
    for row in df.to_dict("records"):
        status = _MEMORY_STATUS[row["status"]]
        reason = row.get("reason") if status == "failed" else None
        if row["status"] == "over budget":
            reason = (f"predicted {row['predicted_total'] / 2**30:.2f} GiB, over the {budget_bytes / 2**30:g} GiB "
                      "budget: not run")
        case = dataclasses.replace(base, ny=int(row["ny"]), nx=int(row["nx"]), variant=row["variant"])
        measured = row.get("measured_bytes")
        recorder.add(new_record(
            MEMORY, status=status, reason=reason, device=base.device, profile=profile, config=dataclasses.asdict(case),
            memory={"predicted_bytes": int(row["predicted_total"]),
                    "measured_bytes": None if measured is None or pd.isna(measured) else int(measured),
                    "floor_bytes": df.attrs["floor_bytes"], "budget_bytes": budget_bytes, "method": row.get("method")},
            timing={"step_s": row.get("step_s")},
            region={"variant": row["variant"], "cells": int(row["cells"]), "target": bool(row.get("target", False))}))
    df.attrs["records"] = recorder.records
    return df


def _sharded_rank(env, data, model_cfg, cfg) -> list[dict[str, Any]]:
    """One rank of a sharded run (``training.parallel.spawn`` calls it): its steps, then every rank's
    result gathered to rank 0."""
    import torch.distributed as dist

    from ..region.shard import train_steps

    out = train_steps(data, model_cfg, cfg, env.rank, env.world_size)
    gathered: list[Any] = [None] * env.world_size
    dist.all_gather_object(gathered, out)
    return gathered


def run_sharded(data, model_cfg, cfg) -> dict[str, Any]:
    """``cfg.steps`` training steps on ``cfg.world_size`` local gloo ranks (CPU).

    Returns rank 0's losses (the area's loss after each step), the slowest rank's median step seconds,
    and every rank's cells and bytes sent per step. A failing rank stops all; the error says which.
    """
    from ..region.shard import check_sharded
    from ..training.parallel import spawn

    check_sharded(data, model_cfg, cfg)
    # spawn divides the cores among the ranks and raises the clearest error of a failed rank
    ranks = spawn(_sharded_rank, cfg.world_size, device="cpu", kwargs=dict(data=data, model_cfg=model_cfg, cfg=cfg),
                  timeout_s=cfg.timeout_s)
    return {"mode": cfg.mode, "world_size": cfg.world_size, "losses": ranks[0]["losses"],
            "step_s": max(r["step_s"] for r in ranks), "cells": [r["cells"] for r in ranks],
            "bytes_sent_per_step": [r["bytes_sent_per_step"] for r in ranks]}


def region_scaling(data, model_cfg, world_sizes=(1, 2), modes=None, cfg=None, *, data_info: dict | None = None,
                   results=None, profile: str | None = None,
                   on_point: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """Step time of tiles vs windows over ``world_sizes`` against one process (world size 1, run once and
    recorded once), as a table with the speed-up, the halo bytes each rank sends per step, and the largest
    relative difference of the loss from the one-process loss over the steps; one record per run."""
    from ..region.shard import MODES, ShardConfig, check_sharded, train_steps

    modes = tuple(modes or MODES)
    cfg = cfg or ShardConfig()
    sizes = sorted({int(w) for w in world_sizes})
    if not sizes or sizes[0] < 1:
        raise ConfigError(f"world_sizes={tuple(world_sizes)!r} must be whole numbers >= 1")
    for mode in modes:  # every run's settings against the area, before the first one starts
        for w in sizes:
            check_sharded(data, model_cfg, dataclasses.replace(cfg, mode=mode, world_size=w))
    recorder = Recorder(results, on_point)
    info = data_info or _area(data)
    base = {**dataclasses.asdict(model_cfg), **dataclasses.asdict(cfg)}

    def record(got: dict, mode: str, world: int, one: dict | None) -> dict:
        diff = (float(np.max(np.abs(np.subtract(got["losses"], one["losses"])) / np.abs(one["losses"])))
                if one is not None else 0.0)
        return recorder.add(new_record(
            SCALING, device="cpu", profile=profile, data=info,  # no top-level world_size: the report reads that as DDP
            config={**base, "mode": mode, "world_size": world},
            timing={"step_s": got["step_s"]},
            metrics={"losses": got["losses"], "final_loss": got["losses"][-1], "loss_rel_diff_vs_one": diff},
            region={"mode": mode, "cells": np.atleast_1d(got["cells"]).tolist(),
                    "bytes_sent_per_step": np.atleast_1d(got["bytes_sent_per_step"]).tolist()}))

    one = train_steps(data, model_cfg, dataclasses.replace(cfg, mode="windows", world_size=1))
    one_rec = record(one, "one process", 1, None)
    rows = []
    for mode in modes:
        for w in sizes:
            rec = one_rec if w == 1 else record(
                run_sharded(data, model_cfg, dataclasses.replace(cfg, mode=mode, world_size=w)), mode, w, one)
            step = rec["timing"]["step_s"]
            rows.append({"mode": mode, "world_size": w, "step_s": step,
                         "speedup": one["step_s"] / step if step > 0 else math.nan,
                         "max_halo_bytes_per_step": max(rec["region"]["bytes_sent_per_step"]),
                         "final_loss": rec["metrics"]["final_loss"],
                         "loss_rel_diff": rec["metrics"]["loss_rel_diff_vs_one"]})
    out = pd.DataFrame(rows)
    out.attrs["records"] = recorder.records
    return out
