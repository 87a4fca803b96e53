"""`lstmnb region KIND`: region mode's experiments (skill per cell, memory against area, sharding over
ranks), each a thin call into ``lstmnb.experiments.region`` that prints a table and appends records."""

from __future__ import annotations

import argparse

from ..region import VARIANTS
from .checks import check_plot, check_results, positive
from .options import add_request_args, add_results_args, int_list, request_from_args, results_path, save_plot, str_list

DEFAULT_BOX = "37,41,279,281"  # 17 x 9 cells of the embedded sample (around 39N 80W)
SCALING_BOX = "39,41,279,281"  # 9 x 9 cells


def add_region(sub, full: bool) -> None:
    p = sub.add_parser("region", help="region mode: per-cell skill of a neighbour-mixing model, memory against area, "
                                      "sharding an area over ranks",
                       description="Forecast every cell of a lat/lon box with one LSTM shared by all cells, which "
                                   "also reads a learned mix of each cell's nearest neighbours (sparse: k weights "
                                   "per cell; dense: n x n; none: the per-cell control). Each KIND prints a table "
                                   "and appends one run record per case; see `lstmnb region KIND --help`.")
    kinds = p.add_subparsers(dest="region_kind", metavar="KIND", required=True)
    for add in (_add_skill, _add_memory, _add_scaling):
        add(kinds)


def _add_area_args(p: argparse.ArgumentParser, box: str) -> None:
    add_request_args(p)
    p.set_defaults(box=tuple(float(v) for v in box.split(",")), start="2020-01-01", end="2021-06-30")
    g = p.add_argument_group("region model")
    g.add_argument("--window", type=int, default=24, help="input hours (default 24)")
    g.add_argument("--hidden", type=int, default=32, help="LSTM hidden units, shared by all cells (default 32)")
    g.add_argument("--neighbours", type=int, default=8, help="k nearest cells mixed into each cell's input (default 8)")
    g.add_argument("--lr", type=float, default=4e-3, help="Adam learning rate (default 0.004)")
    g.add_argument("--seed", type=int, default=0, help="weights and batches (default 0)")


def _area_request(args):
    from ..errors import ConfigError

    if args.points:
        raise ConfigError("region mode works on a box of cells, not on points; give --box LAT_MIN,LAT_MAX,LON_MIN,LON_MAX")
    return request_from_args(args)


def _area_data(args, lead_hours: int = 1):
    """The request and its box as ``RegionData`` (splits, train-only scaling, windows over time)."""
    from ..data import extract
    from ..region.data import region_data_from_box
    from ..windows import WindowConfig

    request = _area_request(args)
    return request, region_data_from_box(extract(request), WindowConfig(window=args.window, lead_hours=lead_hours))


def _model_config(args, variant: str = "sparse", data=None):
    """The variant's RegionConfig from the options; with ``data``, sized to its inputs (one feature per
    variable, the cells' coordinates as static inputs)."""
    from ..region.model import variant_config

    sizes = {"n_features": data.n_features, "n_static": data.n_static} if data is not None else {}
    cfg = variant_config(variant, hidden=args.hidden, neighbours=args.neighbours, **sizes)
    cfg.validate()
    return cfg


def _check_area(args) -> None:
    from ..paths import check_cache
    from ..windows import WindowConfig

    _area_request(args)
    WindowConfig(window=args.window, lead_hours=getattr(args, "lead_hours", 1)).validate()
    positive("--lr", args.lr, whole=False)
    _model_config(args)
    check_results(results_path(args))
    check_cache()


def _variants(given: tuple[str, ...]) -> tuple[str, ...]:
    """The variants named by --variants, each once, in the order given; a ConfigError names any unknown one."""
    from ..errors import ConfigError

    names = tuple(dict.fromkeys(given))
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise ConfigError(f"--variants {','.join(given)}: {', '.join(map(repr, bad)) or 'none given'} not known; "
                          f"choose from {','.join(VARIANTS)}")
    return names


# --- skill ------------------------------------------------------------------------------------------

def _add_skill(kinds) -> None:
    p = kinds.add_parser(
        "skill", help="train the variants on a box and score every cell against persistence and climatology",
        description="Train each variant (same seed, same batches) on the box's cells and print, per variant, the "
                    "mean over cells of the per-cell test RMSE, the pooled RMSE, the share of cells better than "
                    "persistence, parameters and training seconds, beside persistence and climatology scored on "
                    "the same target hours. One record per variant, with every cell's scores.",
        epilog=f"default area: --box {DEFAULT_BOX} (17 x 9 cells of the sample), 2020-01-01 .. 2021-06-30\n"
               "example:\n  lstmnb region skill --box 39,40,279,280 --end 2020-03-31 --epochs 3 --plot skill.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_area_args(p, DEFAULT_BOX)
    g = p.add_argument_group("skill")
    g.add_argument("--lead-hours", type=int, default=1, help="forecast this many hours after the last input (default 1)")
    g.add_argument("--variants", type=str_list, default=VARIANTS, help="sparse,none,dense (default all three)")
    g.add_argument("--epochs", type=int, default=5, help="epochs; the best validation epoch's weights are kept (default 5)")
    g.add_argument("--steps", type=int, default=100, help="optimiser steps per epoch (default 100)")
    g.add_argument("--batch-size", type=int, default=16, help="time windows per step, each holding every cell (default 16)")
    g.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default cpu")
    g.add_argument("--plot", default=None, metavar="FILE.png", help="save the skill maps against persistence here")
    add_results_args(p)
    p.set_defaults(func=_run_skill, check=_check_skill)


def _train_config(args):
    from ..region.train import RegionTrainConfig

    return RegionTrainConfig(epochs=args.epochs, steps_per_epoch=args.steps, batch_size=args.batch_size, lr=args.lr,
                             seed=args.seed, device=args.device)


def _check_skill(args) -> None:
    _check_area(args)
    for v in _variants(args.variants):
        _model_config(args, v)
    _train_config(args).validate()
    check_plot(args.plot)


def _run_skill(args) -> int:
    import pandas as pd

    from ..experiments.region import region_info, region_skill
    from ..region.grid import plot_skill_map
    from ..report import format_table


    def epoch(name: str, e: dict) -> None:
        print(f"  {name} epoch {e['epoch']}: train loss {e['train_loss']:.4f}, validation RMSE "
              f"{e['val_rmse_k']:.4f} K, {e['seconds']:.1f} s", flush=True)

    request, data = _area_data(args, args.lead_hours)
    variants = {v: _model_config(args, v, data) for v in _variants(args.variants)}
    table, maps, records = region_skill(data, variants, _train_config(args), data_info=region_info(request, data),
                                        results=results_path(args), on_epoch=epoch)
    ny, nx = records[0]["data"]["shape"]
    print(f"\n{ny} x {nx} cells, test part, {args.lead_hours} h ahead (RMSE in K):")
    shown = table.copy()
    for column, fmt in (("parameters", "{:,.0f}"), ("best_epoch", "{:.0f}"), ("train_s", "{:.1f}")):
        shown[column] = shown[column].map(lambda v, fmt=fmt: "" if pd.isna(v) else fmt.format(v))
    with pd.option_context("display.width", 200):
        print(format_table(shown, "{:,.4f}"))
    if "none" in maps:
        for name in variants:
            if name != "none":
                print(f"{name}: lower RMSE than none (no neighbours) in {float((maps[name] < maps['none']).mean()):.0%} "
                      f"of the cells")
    if args.plot:
        save_plot(plot_skill_map(maps, reference="persistence"), args.plot)
    _say_recorded(records, args)
    return 0


def _say_recorded(records: list[dict], args) -> None:
    from ..records import runs_path

    path = results_path(args)
    if path is not None and records:
        print(f"{len(records)} record(s) appended to {runs_path(path)}")


# --- memory -----------------------------------------------------------------------------------------

def _add_memory(kinds) -> None:
    p = kinds.add_parser(
        "memory", help="peak memory and step time of dense vs sparse against the area, and the memory model",
        description="For square areas of each side, per variant, one training step (after a warm-up step) in a "
                    "fresh process: predicted and measured peak memory and seconds per step, up to the first area "
                    "the memory model puts over --budget-gb (recorded as skipped, not run). Then the largest "
                    "square area each variant fits in the budget, and --target trained by the sparse model. "
                    "Synthetic inputs: memory and speed do not depend on the values.",
        epilog="example:\n  lstmnb region memory --sides 10,20,40,60,80 --budget-gb 2 --plot memory.png",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sides", type=int_list, default=(10, 20, 40, 60, 80), help="sides of the square areas, in cells "
                   "(default 10,20,40,60,80)")
    p.add_argument("--variants", type=str_list, default=("sparse", "dense"), help="default sparse,dense")
    p.add_argument("--budget-gb", type=float, default=2.0, help="GiB one step may use; larger areas are not run (default 2)")
    p.add_argument("--batch", type=int, default=4, help="time windows per step (default 4)")
    p.add_argument("--window", type=int, default=24, help="input hours (default 24)")
    p.add_argument("--hidden", type=int, default=32, help="LSTM hidden units (default 32)")
    p.add_argument("--neighbours", type=int, default=8, help="k nearest cells (default 8)")
    p.add_argument("--steps", type=int, default=2, help="timed steps per case, after one warm-up step (default 2)")
    p.add_argument("--target", default=None, metavar="ROWSxCOLS",
                   help="an area the sparse model must train, e.g. 60x168 (10,080 cells); default: none")
    p.add_argument("--kernel", default="gather", choices=("gather", "csr"),
                   help="how the sparse mix is computed: an index gather or a torch sparse CSR product (default gather)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default cpu")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the memory and step-time plot here")
    add_results_args(p)
    p.set_defaults(func=_run_memory, check=_check_memory)


def _memory_case(args):
    from ..region.memory import MemoryCase

    case = MemoryCase(batch=args.batch, window=args.window, hidden=args.hidden, neighbours=args.neighbours,
                      steps=args.steps, kernel=args.kernel, device=args.device)
    case.validate()
    return case


def _target(args) -> tuple[int, int] | None:
    from ..errors import ConfigError

    if args.target is None:
        return None
    try:
        ny, nx = (int(v) for v in args.target.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--target {args.target!r} is not ROWSxCOLS, e.g. 60x168") from None
    if ny < 1 or nx < 1:
        raise ConfigError(f"--target {args.target}: rows and columns must be >= 1")
    return ny, nx


def _check_memory(args) -> None:
    from ..device import resolve_device
    from ..errors import ConfigError

    _memory_case(args)
    _variants(args.variants)
    if not args.sides or min(args.sides) < 2:
        raise ConfigError(f"--sides {','.join(map(str, args.sides))}: sides must be whole numbers >= 2")
    positive("--budget-gb", args.budget_gb, whole=False)
    _target(args)
    resolve_device(args.device)
    check_plot(args.plot)
    check_results(results_path(args))


def _run_memory(args) -> int:
    import dataclasses

    import pandas as pd

    from ..experiments.region import region_memory
    from ..region.memory import largest_side, plot_memory, predict_bytes
    from ..report import format_table

    MiB, budget, base = 2**20, args.budget_gb * 2**30, _memory_case(args)
    df = region_memory(args.sides, _variants(args.variants), budget, base, target=_target(args),
                       results=results_path(args), echo=print)
    floor_bytes = df.attrs["floor_bytes"]
    shown = df.reindex(columns=["variant", "ny", "nx", "cells", "predicted_total", "measured_bytes", "step_s", "status"])
    for column, scale, fmt in (("predicted_total", MiB, "{:,.1f}"), ("measured_bytes", MiB, "{:,.1f}"),
                               ("step_s", 1, "{:.4f}")):
        shown[column] = (shown[column] / scale).map(lambda v, fmt=fmt: "" if pd.isna(v) else fmt.format(v))
    print(f"\nruntime floor {floor_bytes / MiB:.1f} MiB (a 3 x 3 area); budget {args.budget_gb:g} GiB; batch {args.batch} "
          f"windows of {args.window} h, hidden {args.hidden}, k = {args.neighbours}")
    print(format_table(shown.rename(columns={"predicted_total": "predicted MiB", "measured_bytes": "measured MiB"})))
    ok = df[df["status"] == "ok"]
    if len(ok):
        err = (ok["measured_bytes"] - ok["predicted_total"]) / ok["predicted_total"]
        print(f"measured against predicted: {err.min():+.0%} .. {err.max():+.0%}")
    for variant in _variants(args.variants):
        s = largest_side(variant, budget, base, floor_bytes)
        print(f"largest square area within {args.budget_gb:g} GiB, {variant}: {s} x {s} = {s * s:,} cells")
    got = df.attrs.get("target")
    if got is not None:
        ny, nx = int(got["ny"]), int(got["nx"])
        dense = predict_bytes(dataclasses.replace(base, ny=ny, nx=nx, variant="dense"), floor_bytes)["total"]
        what = (f"peak {got['measured_bytes'] / MiB:,.0f} MiB measured ({got['predicted_total'] / MiB:,.0f} predicted), "
                f"{got['step_s']:.2f} s per step" if got["status"] == "ok" else f"FAILED: {got['reason']}")
        print(f"target {ny} x {nx} ({ny * nx:,} cells), sparse: {what}; dense would need "
              f"{dense / 2**30:.1f} GiB (predicted, not run)")
    if args.plot:
        save_plot(plot_memory(df, budget), args.plot)
    _say_recorded(df.attrs["records"], args)
    return 0


# --- scaling ----------------------------------------------------------------------------------------

def _add_scaling(kinds) -> None:
    p = kinds.add_parser(
        "scaling", help="the area split over local gloo ranks (tiles with halo exchange vs windows) against one process",
        description="Train a few steps of the sparse model on one process, then on N local gloo ranks (CPU) per "
                    "mode: tiles (each rank a band of rows and its relation rows, halo rows exchanged every step) "
                    "and windows (each rank the whole area, a share of each batch's windows). Prints seconds per "
                    "step, speed-up over one process, halo bytes per rank and step, and the largest relative "
                    "difference of the loss from the one-process loss (float rounding only).",
        epilog=f"default area: --box {SCALING_BOX} (9 x 9 cells of the sample), 2020-01-01 .. 2021-06-30\n"
               "example:\n  lstmnb region scaling --box 39,40,279,280 --world-sizes 1,2 --steps 5",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_area_args(p, SCALING_BOX)
    g = p.add_argument_group("scaling")
    g.add_argument("--world-sizes", type=int_list, default=(1, 2), help="ranks to run (default 1,2)")
    g.add_argument("--modes", type=str_list, default=("tiles", "windows"), help="tiles,windows (default both)")
    g.add_argument("--steps", type=int, default=5, help="training steps per run (default 5)")
    g.add_argument("--batch-size", type=int, default=8, help="time windows per step (default 8)")
    add_results_args(p)
    p.set_defaults(func=_run_scaling, check=_check_scaling)


def _shard_config(args, mode: str = "tiles", world_size: int = 1):
    from ..region.shard import ShardConfig

    return ShardConfig(mode=mode, world_size=world_size, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                       seed=args.seed)


def _check_scaling(args) -> None:
    from ..errors import ConfigError
    from ..training.config import local_rank_limit

    _check_area(args)
    top = local_rank_limit()
    if not args.world_sizes or any(not 1 <= w <= top for w in args.world_sizes):
        raise ConfigError(f"--world-sizes {','.join(map(str, args.world_sizes))}: ranks must be in 1..{top}")
    for mode in args.modes:
        for w in args.world_sizes:
            _shard_config(args, mode, w).validate()


def _run_scaling(args) -> int:
    from ..experiments.region import region_info, region_scaling
    from ..report import format_table

    request, data = _area_data(args)
    table = region_scaling(data, _model_config(args, data=data), args.world_sizes, args.modes, _shard_config(args),
                           data_info=region_info(request, data), results=results_path(args),
                           on_point=lambda r: print(f"  {r['region']['mode']}, {r['config']['world_size']} rank(s): "
                                                    f"{r['timing']['step_s']:.4f} s per step", flush=True))
    ny, nx = data.grid.shape
    print(f"\n{ny} x {nx} cells, {args.steps} steps of {args.batch_size} windows, sparse k = {args.neighbours}, "
          f"gloo ranks on this CPU:")
    print(format_table(table.set_index(["mode", "world_size"]), "{:,.6g}"))
    _say_recorded(table.attrs["records"], args)
    return 0
