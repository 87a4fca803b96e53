"""Region mode's cost experiments, each case a run record (``records.Recorder``; ``results=None``: not recorded):
memory and step time against the area's size, and the area sharded over local gloo ranks (row bands with halo
exchange, or time windows) against one process. The models, memory model and rank logic live in ``lstmnb.region``;
``region_skill`` (do neighbours help?) has its own module.

Timings follow the CPU thread policy (``device.cpu_threads``), and every record says what it chose in its ``threads``
section. Sharding is compared at equal total threads: N ranks of one thread each against one process with N threads,
alternating, with medians over repeats, so neither side has cores the other lacks."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import tempfile
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from ..errors import ConfigError, OutputError
from ..machine.device import cpu_cores, cpu_threads, torch_threads
from ..records import Recorder, new_record
from ..region.bands import AreaFile
from ..region.memory import MemoryCase, measure, predict_bytes, sweep
from ..region.shard import MODES, ShardConfig, check_sharded, plan_tiles, train_steps
from ..rules import PYTHON, Spelling
from ..training.parallel import spawn

MEMORY, SCALING = "region-memory", "region-scaling"
MiB = 2**20
_MEMORY_STATUS = {"ok": "ok", "over budget": "ok", "failed": "failed", "not run": "skipped"}


def region_memory(sides, variants=("sparse", "dense"), budget_bytes: float = 4 * 2**30, base=None, *,
                  target: tuple[int, int] | None = None, threads: int | None = None, results=None,
                  profile: str | None = None, echo: Callable[[str], None] | None = None,
                  on_point: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """``region.memory.sweep`` (square areas per variant up to the budget, each measured in a fresh process beside
    the memory model's prediction), one record per case: the first area the model puts over the budget is recorded
    as skipped with its predicted size, a failed case as failed with its reason. ``target`` (rows, columns): an area
    the sparse model must train within the budget (refused when predicted over it), measured and recorded too (the
    last row, ``attrs['target']``); a measured peak over the budget is marked 'over budget'. Each process runs the
    threads the CPU policy chooses (``threads``: that many instead)."""
    base = base or MemoryCase()
    if target is not None:
        check_target(target, budget_bytes, base)
    if base.device == "cpu":
        choice = cpu_threads(threads)
        base = dataclasses.replace(base, threads=choice["used"])
    else:  # the step runs on the GPU: torch's own CPU threads, recorded as they are
        choice = {"used": torch.get_num_threads(), "policy": "default",
                  "reason": f"the step runs on {base.device}; the CPU threads are torch's default"}
    df = sweep(sides, variants, budget_bytes, base, echo=echo)
    df["status"] = df["status"].replace({"over budget": "not run"})
    if target is not None:
        row = measure(dataclasses.replace(base, ny=int(target[0]), nx=int(target[1]), variant="sparse"),
                      df.attrs["floor_bytes"])
        attrs = dict(df.attrs)  # concat keeps no attrs
        df = pd.concat([df.assign(target=False), pd.DataFrame([{**row, "target": True}])], ignore_index=True)
        df.attrs.update(attrs)
    if "measured_bytes" in df:  # measured, and over the budget after all
        df.loc[(df["status"] == "ok") & (df["measured_bytes"].fillna(0) > budget_bytes), "status"] = "over budget"
    if target is not None:
        df.attrs["target"] = df.iloc[-1].to_dict()
    recorder = Recorder(results, on_point)
    for row in df.to_dict("records"):
        status = _MEMORY_STATUS[row["status"]]
        reason = row.get("reason") if status == "failed" else None
        if row["status"] == "not run":
            reason = (f"predicted {row['predicted_total'] / 2**30:.2f} GiB, over the {budget_bytes / 2**30:g} GiB "
                      "budget: not run")
        case = dataclasses.replace(base, ny=int(row["ny"]), nx=int(row["nx"]), variant=row["variant"])
        measured = None if pd.isna(row.get("measured_bytes")) else int(row["measured_bytes"])  # None or NaN: none
        step = None if pd.isna(row.get("step_s")) else float(row["step_s"])
        recorder.add(new_record(
            MEMORY, status=status, reason=reason, device=base.device, profile=profile, config=dataclasses.asdict(case),
            data={"source": "synthetic", "shape": [case.ny, case.nx]}, threads=choice,
            memory={"predicted_bytes": int(row["predicted_total"]), "measured_bytes": measured,
                    "floor_bytes": df.attrs["floor_bytes"], "budget_bytes": budget_bytes, "method": row.get("method"),
                    "within_budget": None if measured is None else measured <= budget_bytes},
            timing={"step_s": step},
            region={"variant": row["variant"], "cells": int(row["cells"]), "target": bool(row.get("target", False)),
                    "peak_mib": None if measured is None else measured / MiB, "step_s": step}))
    df.attrs.update(records=recorder.records, threads=choice)
    return df


def check_target(target: tuple[int, int], budget_bytes: float, base, say: Spelling = PYTHON) -> None:
    """Refuse a memory target whose step the memory model already puts over the budget, as ``say`` spells them."""
    ny, nx = target
    need = predict_bytes(dataclasses.replace(base, ny=int(ny), nx=int(nx), variant="sparse"))["total"]
    if need > budget_bytes:
        given = (f"--target {ny}x{nx}", f"--budget-gb {budget_bytes / 2**30:g}") if say.cli else (
            say("target", tuple(target)), say("budget_bytes", budget_bytes))
        raise ConfigError(f"{given[0]}: the sparse step needs {need / MiB:,.0f} MiB by the memory model, over the "
                          f"{given[1]} budget; raise the budget or shrink the target")


def check_scaling_area(shape: tuple[int, int], neighbours: int, world_sizes, modes, say: Spelling = PYTHON) -> None:
    """The box against the k and the ranks asked, once it is read and before any run: a box too small for them is one
    line saying so and what to give (as ``region_skill.check_neighbours`` words it), as ``say`` spells the settings."""
    ny, nx = (int(v) for v in shape)
    n = ny * nx
    if neighbours and n < 2:
        raise ConfigError(f"the box holds {n} cell, too small for the sparse mix: it has no neighbours (k >= 1); "
                          f"give a larger box, e.g. {say('box', (39, 39.5, 279, 279.5))} (3 x 3 cells)")
    if neighbours and neighbours > n - 1:
        raise ConfigError(f"{say('neighbours', neighbours)}: a box of {n} cells ({ny} x {nx}) is too small: it gives "
                          f"each cell 1..{n - 1} neighbours; give k in 1..{n - 1} (e.g. "
                          f"{say('neighbours', min(8, n - 1))}), or a larger box")
    most = max(world_sizes)
    if "tiles" in modes and most > ny:
        rows = f"{ny} row{'s' if ny > 1 else ''}"
        raise ConfigError(f"{say('world_sizes', tuple(world_sizes))}: a box of {rows} of cells is too small for {most} "
                          f"tiles ranks (one band of rows each); give {say.key('world_sizes')} up to {ny}, a box of "
                          f"at least {most} rows, or {say('modes', 'windows' if say.cli else ('windows',))}")


def _sharded_rank(env, area, model_cfg, cfg) -> list[dict[str, Any]]:
    """One rank of a sharded run (``training.parallel.spawn`` calls it): its cells out of ``area`` (an ``AreaFile``: a
    tiles rank its band's, a windows rank all), its steps, then every rank's result gathered to rank 0."""
    cells = plan_tiles(area.grid, None, env.world_size)[env.rank].cells if cfg.mode == "tiles" else None
    part = area.load(cells)
    out = {**train_steps(part, model_cfg, cfg, env.rank, env.world_size), "held_bytes": part.held_bytes}
    gathered: list[Any] = [None] * env.world_size
    dist.all_gather_object(gathered, out)
    return gathered


def run_sharded(data, model_cfg, cfg, threads: int | None = 1, area=None) -> dict[str, Any]:
    """``cfg.steps`` training steps on ``cfg.world_size`` local gloo ranks (CPU) of ``threads`` threads each (None: the
    cores divided among the ranks). ``area``: ``data`` already written as a ``region.bands.AreaFile`` (a study of many
    runs writes it once); None: written here for this run. Returns rank 0's losses (the area's loss after each step),
    the slowest rank's median step seconds, and every rank's cells, bytes of series held and bytes sent per step."""
    check_sharded(data, model_cfg, cfg)
    with contextlib.nullcontext(area) if area is not None else _area_file(data) as area:
        ranks = spawn(_sharded_rank, cfg.world_size, device="cpu", kwargs=dict(area=area, model_cfg=model_cfg,
                      cfg=cfg), timeout_s=cfg.timeout_s, threads=threads)
    return {"mode": cfg.mode, "world_size": cfg.world_size, "losses": ranks[0]["losses"],
            "step_s": max(r["step_s"] for r in ranks),
            **{key: [r[key] for r in ranks] for key in ("cells", "held_bytes", "bytes_sent_per_step")}}


@contextlib.contextmanager
def _area_file(data):
    """``data`` written as an ``AreaFile`` in a temporary folder, removed afterwards."""
    folder = None
    try:
        folder = tempfile.TemporaryDirectory(prefix="lstmnb-area-")
        area = AreaFile.write(data, folder.name)
    except OSError as exc:  # a full or unusable temporary folder: one line, with where to put it instead
        if folder is not None:
            folder.cleanup()
        raise OutputError(f"the ranks' copy of the area's series ({data.windows.series.nbytes / MiB:,.1f} MiB) "
                          f"could not be written under {tempfile.gettempdir()}: {exc.strerror or exc}; set TMPDIR "
                          "to a folder with room") from exc
    with folder:
        yield area


def one_process(data, model_cfg, cfg, threads: int) -> dict[str, Any]:
    """The unsharded steps in this process on ``threads`` intra-op threads (put back afterwards)."""
    with torch_threads(threads):
        out = train_steps(data, model_cfg, dataclasses.replace(cfg, mode="windows", world_size=1))
    return {**out, "held_bytes": int(data.windows.series.nbytes)}


def check_world_sizes(world_sizes, say: Spelling = PYTHON) -> list[int]:
    """The world sizes, sorted, each a whole number of ranks in 1..cores (one core per one-thread rank); a refusal
    names them as ``say`` spells ``world_sizes``."""
    whole = isinstance(world_sizes, (list, tuple)) and all(
        isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in world_sizes)
    sizes = sorted({int(w) for w in world_sizes}) if whole else []
    top = cpu_cores()
    if not sizes or sizes[0] < 1 or sizes[-1] > top:
        raise say.refuse("world_sizes", world_sizes, f": ranks must be in 1..{top} (this machine's cores: each rank "
                                                     "runs one thread)")
    return sizes


def region_scaling(data, model_cfg, world_sizes=(1, 2), modes=None, cfg=None, *, repeats: int = 1,
                   data_info: dict | None = None, results=None, say: Spelling = PYTHON,
                   profile: str | None = None, on_point: Callable[[dict[str, Any]], None] | None = None) -> pd.DataFrame:
    """Step time of tiles vs windows against one process at equal total threads (the module's docstring) for each N of
    ``world_sizes`` (N = 1: the one-thread process alone), alternating ``repeats`` times; medians. Returns a table with
    the speed-up, the halo bytes each rank sends per step, the MiB of series the largest rank holds (tiles: its band's
    cells; windows: the area) and the largest relative difference of the loss from the one-process loss; one record per
    (mode, N) and per one-process N, whose ``threads`` section also holds the cores the CPU policy finds free now
    (``free_now``): whether both sides had their cores alone. ``say``: how refusals name settings."""
    modes = tuple(modes or MODES)
    cfg = cfg or ShardConfig()
    sizes = check_world_sizes(world_sizes, say)
    if not isinstance(repeats, int) or repeats < 1:
        raise say.refuse("repeats", repeats, "must be a whole number >= 1")
    check_scaling_area(data.grid.shape, model_cfg.neighbours, sizes, modes, say)
    each = dataclasses.replace(say, names={**say.names, "world_size": "world_sizes"})  # one N of world_sizes
    for mode in modes:  # every run's settings against the area, before the first one starts
        for w in sizes:
            check_sharded(data, model_cfg, dataclasses.replace(cfg, mode=mode, world_size=w), each)
    policy = cpu_threads()
    runs: dict[tuple[str, int], list[dict]] = {}
    with _area_file(data) as area:  # what the ranks read their cells from, written once
        for w in sizes:
            for _ in range(repeats):  # alternating: a change in the machine's load hits both sides alike
                runs.setdefault(("one process", w), []).append(one_process(data, model_cfg, cfg, w))
                for mode in (modes if w > 1 else ()):
                    runs.setdefault((mode, w), []).append(
                        run_sharded(data, model_cfg, dataclasses.replace(cfg, mode=mode, world_size=w), area=area))
    reference = runs[("one process", sizes[0])][0]["losses"]
    recorder = Recorder(results, on_point)
    info = data_info or {"cells": data.n_cells, "shape": list(data.grid.shape)}
    base = {**dataclasses.asdict(model_cfg), **dataclasses.asdict(cfg)}
    median_step = {key: statistics.median(g["step_s"] for g in got) for key, got in runs.items()}
    fewest = median_step[("one process", sizes[0])]
    rows = []
    for (mode, w), got in runs.items():
        step, one_step = median_step[(mode, w)], median_step[("one process", w)]
        speedup = one_step / step if step > 0 else math.nan
        # no speed-up from a baseline that ran slower than the same work on fewer threads: its threads shared
        # cores with other processes (they spin), so the ratio would measure the load, not the sharding
        withheld = None
        if mode != "one process" and w > sizes[0] and one_step > fewest:
            withheld = (f"no speed-up: one process of {w} threads ({one_step:.3g} s a step) ran slower than one of "
                        f"{sizes[0]} ({fewest:.3g} s), so its cores were busy with other work")
            speedup = math.nan
        losses = got[0]["losses"]
        diff = float(np.max(np.abs(np.subtract(losses, reference)) / np.abs(reference)))
        ranks = 1 if mode == "one process" else w
        note = (f"{w} thread(s) in all, but the policy finds {policy['used']} core(s) free now: both sides share "
                "cores with other processes") if w > policy["used"] else None
        rec = recorder.add(new_record(
            SCALING, device="cpu", profile=profile, data=info,  # no top-level world_size: the report reads that as DDP
            config={**base, "mode": mode, "world_size": ranks, "repeats": repeats},
            threads={"used": w // ranks, "policy": "equal total threads",
                     "reason": f"{ranks} process(es) of {w // ranks} thread(s) against one process of {w}",
                     "free_now": policy["used"], "free_now_reason": policy["reason"],
                     "total": w, "per_rank": w // ranks, "ranks": ranks,
                     "comparison": "equal total threads: N ranks of one thread against one process of N threads",
                     **({"note": note} if note else {})},
            timing={"step_s": step, "step_s_runs": [g["step_s"] for g in got], "one_process_step_s": one_step},
            metrics={"losses": losses, "final_loss": losses[-1], "loss_rel_diff_vs_one": diff},
            region={"mode": mode, "cells": int(data.n_cells), "rank_cells": np.atleast_1d(got[0]["cells"]).tolist(),
                    "bytes_sent_per_step": np.atleast_1d(got[0]["bytes_sent_per_step"]).tolist(),
                    "rank_held_bytes": np.atleast_1d(got[0]["held_bytes"]).tolist(),
                    "step_s": step, "speedup": None if math.isnan(speedup) else speedup, "total_threads": w,
                    **({"speedup_withheld": withheld} if withheld else {})}))
        rows.append({"mode": mode, "threads": w, "ranks": ranks, "step_s": step, "one_process_step_s": one_step,
                     "speedup": speedup, "max_halo_bytes_per_step": max(rec["region"]["bytes_sent_per_step"]),
                     "series_mib_per_rank": max(rec["region"]["rank_held_bytes"]) / MiB,
                     "final_loss": losses[-1], "loss_rel_diff": diff, "note": withheld or ""})
    out = pd.DataFrame(rows)
    out.attrs.update(records=recorder.records, threads=policy)
    return out
