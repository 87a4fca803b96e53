"""Do neighbours help? The region model's variants trained as the point model is, and compared with it cell by cell.

Every variant trains through ``training.train`` on the box's keyed windows (``region.data``): the recommended preset
(or the one given), its batches, early stopping on validation, the CPU thread policy and the run record with every
cell's scores. So ``none`` *is* the point model of `lstmnb train --box` (tests/test_region_skill.py trains both and
gets the same forecasts), and ``sparse`` and ``dense`` differ from it only by the neighbour mix. Sparse tries each k
of ``neighbours`` and keeps the one with the best validation RMSE; dense starts from that k's stencil. Each chosen run
is compared with ``none`` per cell (RMSE difference, MSE skill score), split into the cells the weather reaches first
(upstream) and last (downstream)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
import xarray as xr

from ..datasets.weather import FRONT_HEADINGS_DEG
from ..errors import ConfigError, DataError
from ..records import Recorder
from ..region import VARIANTS
from ..region.data import RegionData
from ..region.grid import BASELINES, Grid, flow_halves, record_maps
from ..region.maps import Panel, map_title, rmse_panels
from ..region.model import KeyedForecaster, check_channels, region_model, variant_config
from ..rules import PYTHON, Spelling, known
from ..training import prepare_windows, train, with_overrides
from ..training.evaluate import mse_skill_score
from ..training.guards import stop_if_diverged

SKILL = "region-skill"
REFERENCE = "none"  # the point model: what the neighbours must beat
SAMPLE_HEADING_DEG = float(np.mean(FRONT_HEADINGS_DEG))  # the synthetic sample's fronts: east-south-east


@dataclass
class SkillResult:
    """The chosen run of each variant (``records``), every run tried (``runs``), the per-cell maps, the
    table (one row per forecast) and the comparison with ``none`` by where the weather comes from."""

    records: dict[str, dict[str, Any]]
    runs: list[dict[str, Any]]
    maps: xr.Dataset
    table: pd.DataFrame
    flow: pd.DataFrame


def check_neighbours(variants, neighbours, n_cells: int, say: Spelling = PYTHON) -> None:
    """Every k of ``neighbours`` fits the box (a cell has ``n_cells - 1`` others), when a variant mixes; a refusal
    names the settings as ``say`` spells them."""
    if all(v == REFERENCE for v in variants):
        return
    alone = say("variants", "none" if say.cli else ("none",))
    if not neighbours:
        raise ConfigError(f"{say.key('neighbours')} is empty; give one or more k, e.g. {say('neighbours', (8, 24))}")
    if n_cells < 2:
        raise ConfigError(f"the box holds {n_cells} cell, which has no neighbours; give a larger box, or {alone} (the "
                          "point model alone)")
    bad = [k for k in neighbours if not isinstance(k, (int, np.integer)) or not 1 <= k <= n_cells - 1]
    if bad:
        raise ConfigError(f"{say('neighbours', bad[0])}: a box of {n_cells} cells gives each cell 1..{n_cells - 1} "
                          f"neighbours; give each k in 1..{n_cells - 1} (e.g. {say('neighbours', min(8, n_cells - 1))}),"
                          f" a larger box, or {alone}")


def check_mixes(variants, neighbours, channels: int, say: Spelling = PYTHON) -> None:
    """The channels against each k a variant tries (sparse: every one, dense: the first), before any trains."""
    for k in neighbours if "sparse" in variants else neighbours[:1] if "dense" in variants else ():
        check_channels(channels, int(k), say)


def variant_model(variant: str, data, cfg, k: int, channels: int = 3):
    """The keyed region model of ``variant`` for ``data``, shaped as ``cfg`` (a TrainConfig) shapes the
    point model, seeded as the Trainer seeds it (so ``none`` starts with the point model's weights)."""
    if cfg.dropout:
        raise ConfigError(f"dropout={cfg.dropout} is not offered by the region model; leave it at 0")
    mcfg = variant_config(variant, n_features=data.n_features, n_mixed=data.n_mixed, hidden=cfg.hidden,
                          layers=cfg.layers, horizon=cfg.horizon, cell=cfg.cell, residual=cfg.residual,
                          neighbours=k, channels=channels)
    return KeyedForecaster(region_model(mcfg, data.grid, seed=cfg.seed), data.windows.series, cfg.window), mcfg


def region_skill(data, cfg, variants=VARIANTS, neighbours=(8,), channels: int = 3, *, data_info=None,
                 results=None, profile: str | None = None, heading_deg: float = SAMPLE_HEADING_DEG,
                 on_epoch: Callable[[str, dict], None] | None = None,
                 on_point: Callable[[dict], None] | None = None, say: Spelling = PYTHON) -> SkillResult:
    """Train each variant on ``data`` (``RegionData``) with ``cfg`` (a ``TrainConfig``; its window, lead and horizon
    must be the data's) and compare each with ``none`` per cell. Records: one per run, each with its ``threads``,
    ``skill.per_point`` (every cell) and a ``region`` section (variant, k, whether validation chose it). ``say``: how
    the runs' refusals and advice name settings."""
    variants = tuple(known(variants, VARIANTS, say("variants", variants)))
    check_neighbours(variants, neighbours, data.n_cells, say)
    check_mixes(variants, neighbours, channels, say)
    run_cfg = with_overrides(cfg, experiment=SKILL, profile=profile or cfg.profile, checkpoint=None, resume=False)
    info = data_info or {"cells": data.n_cells, "grid": {"latitude": data.grid.lat.tolist(),
                                                         "longitude": data.grid.lon.tolist()}}
    recorder = Recorder(results, on_point)
    chosen: dict[str, dict[str, Any]] = {}
    best_k = int(neighbours[0]) if neighbours else 0
    for variant in sorted(variants, key=("none", "sparse", "dense").index):  # dense starts from sparse's k
        tries = [0] if variant == REFERENCE else (list(neighbours) if variant == "sparse" else [best_k])
        runs = []
        for k in tries:
            name = variant if len(tries) == 1 else f"{variant} k={k}"
            model, mcfg = variant_model(variant, data, run_cfg, k, channels)
            report = None if on_epoch is None else (lambda e, name=name: on_epoch(name, e))
            rec = train(data.windows, run_cfg, data_info=info, model=model, on_epoch_end=report, say=say).record
            rec["region"] = {"variant": variant, "neighbours": k, "relation": mcfg.relation, "channels": mcfg.channels,
                             "n_mixed": mcfg.n_mixed, "cells": data.n_cells, "tried_neighbours": list(tries)}
            stop_if_diverged(rec, recorder.results)  # no per-cell comparison with a run that has no forecast
            runs.append(rec)
        best = min(runs, key=lambda r: r["metrics"]["best_val_rmse_k"])
        for rec in runs:
            rec["region"]["chosen"] = rec is best
            recorder.add(rec)
        chosen[variant] = best
        if variant == "sparse":
            best_k = best["region"]["neighbours"]
    ordered = {v: chosen[v] for v in variants}
    maps = variant_maps(ordered)
    return SkillResult(ordered, recorder.records, maps, skill_table(maps, ordered),
                       flow_table(maps, data.grid, heading_deg))


def variant_maps(records: dict[str, dict[str, Any]]) -> xr.Dataset:
    """Per-cell test RMSE (K) of each named run and of both baselines, as (lat, lon) maps, from the runs'
    records; the baselines must agree (the same cells and target hours). ``attrs``: pooled RMSE of each,
    the lead and the test period."""
    maps = None
    for name, rec in records.items():
        m = record_maps(rec)
        if maps is None:
            maps = m.drop_vars("model")
        elif not np.allclose(m["persistence"].values, maps["persistence"].values, rtol=1e-9):
            raise DataError(f"run {name!r} was scored on other cells or hours than the first; compare like with like")
        maps[name] = m["model"]
        maps.attrs[f"pooled_rmse_{name}"] = m.attrs["pooled_rmse_model"]
    return maps[[*records, *BASELINES]]


def _mse(maps: xr.Dataset, name: str) -> np.ndarray:
    return np.asarray(maps[name].values, dtype=np.float64) ** 2


def mse_skill_maps(maps: xr.Dataset, reference: str) -> xr.Dataset:
    """The MSE skill score per cell of every other map against ``reference`` (1 - MSE / MSE of it)."""
    score = np.vectorize(mse_skill_score, otypes=[float])
    ref = _mse(maps, reference)
    return xr.Dataset({n: (maps[n].dims, score(_mse(maps, n), ref)) for n in maps.data_vars if n != reference},
                      coords=maps.coords, attrs=dict(maps.attrs))


def skill_table(maps: xr.Dataset, records: dict[str, dict[str, Any]] | None = None) -> pd.DataFrame:
    """One row per forecast: mean over cells of the per-cell RMSE, pooled RMSE, the pooled MSE skill score
    against persistence and against ``none`` (the point model), the share of cells better than ``none``;
    with ``records``, each run's k, epochs and best epoch."""
    rows = []
    for name in maps.data_vars:
        mse = _mse(maps, name)
        row = {"forecast": name, "mean cell RMSE (K)": float(np.sqrt(mse).mean()),
               "pooled RMSE (K)": float(np.sqrt(mse.mean())),
               "MSE skill score vs persistence": mse_skill_score(mse.mean(), _mse(maps, "persistence").mean())}
        if REFERENCE in maps:
            ref = _mse(maps, REFERENCE)
            row["MSE skill score vs none"] = mse_skill_score(mse.mean(), ref.mean())
            row["cells better than none"] = float((mse < ref).mean())
        rec = (records or {}).get(name)
        if rec is not None:
            epochs = rec.get("epochs") or []
            row.update(k=rec["region"]["neighbours"], epochs=rec["metrics"]["epochs_run"],
                       best_epoch=min(epochs, key=lambda e: e["val_rmse_k"])["epoch"] if epochs else None)
        rows.append(row)
    table = pd.DataFrame(rows).set_index("forecast")
    for name in ("k", "epochs", "best_epoch"):  # counts, blank for the baselines: whole numbers, not 8.0
        if name in table:
            table[name] = table[name].astype("Int64")
    return table


def flow_table(maps: xr.Dataset, grid: Grid, heading_deg: float = SAMPLE_HEADING_DEG) -> pd.DataFrame:
    """Each mixing variant against ``none`` in the upstream and downstream halves of the box (by where the
    weather moving at ``heading_deg`` arrives first, ``region.grid.flow_halves``): cells, mean RMSE of
    both, the mean RMSE difference (K; below 0: the neighbours help), the pooled MSE skill score against
    ``none`` and the share of cells where the variant is better."""
    if REFERENCE not in maps:
        return pd.DataFrame()
    half = flow_halves(grid, heading_deg)
    ref = _mse(maps, REFERENCE).reshape(-1)
    rows = []
    for name in (n for n in maps.data_vars if n not in (REFERENCE, *BASELINES)):
        mse = _mse(maps, name).reshape(-1)
        for where in ("upstream", "downstream", "all"):
            sel = np.ones(half.size, bool) if where == "all" else half == where
            rows.append({"forecast": name, "cells": where, "count": int(sel.sum()),
                         "RMSE none (K)": float(np.sqrt(ref[sel]).mean()),
                         "RMSE (K)": float(np.sqrt(mse[sel]).mean()),
                         "difference (K)": float((np.sqrt(mse[sel]) - np.sqrt(ref[sel])).mean()),
                         "MSE skill score vs none": mse_skill_score(mse[sel].mean(), ref[sel].mean()),
                         "cells better than none": float((mse[sel] < ref[sel]).mean())})
    if not rows:  # no mixing variant ran (--variants none): nothing to set against none
        return pd.DataFrame()
    out = pd.DataFrame(rows).set_index(["forecast", "cells"])
    out.attrs["heading_deg"] = heading_deg
    return out


def comparison_panels(maps: xr.Dataset, names: list[str] | None = None) -> list:
    """Panels for the question: ``none``'s RMSE, then per mixing variant its RMSE and its difference from
    ``none`` (K, centred on 0; blue: the neighbours help)."""
    names = [n for n in (names or maps.data_vars) if n not in (REFERENCE, *BASELINES)]
    panels = rmse_panels(maps, [REFERENCE] if REFERENCE in maps else [])
    for n in names:
        panels += rmse_panels(maps, [n])
        if REFERENCE in maps:
            panels.append(Panel(f"{n} − none", maps[n] - maps[REFERENCE], "RMSE difference (K)", "difference"))
    return panels


def comparison_title(maps: xr.Dataset) -> str:
    return map_title("per-cell test RMSE and the neighbours' difference from the point model (none)", maps)


def region_windows(request, cfg, *, progress: bool = True, say: Spelling = PYTHON):
    """The request's box as ``RegionData`` (keyed windows as ``cfg`` makes them, `lstmnb train --box`'s) and
    the records' ``data`` section; ``say``: how refusals and advice name settings."""
    if request.box is None:
        raise ConfigError("region mode works on a box of cells, not on points; give " + (
            "--box LAT_MIN,LAT_MAX,LON_MIN,LON_MAX" if say.cli else "box=(lat_min, lat_max, lon_min, lon_max)"))
    windows, info = prepare_windows(request, cfg, progress=progress, keys=True, say=say)
    grid = Grid(np.asarray(info["grid"]["latitude"], dtype=np.float64), np.asarray(info["grid"]["longitude"], dtype=np.float64))
    return RegionData(windows, grid), {**info, "shape": list(grid.shape)}
