"""`lstmnb region KIND`: region mode's experiments (do neighbours help, per cell; memory against area;
sharding over ranks), each a thin call into ``lstmnb.experiments`` that prints tables and appends records."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..paths import check_cache
from ..region import VARIANTS
from ..rules import CLI
from .checks import check_plot, positive
from .options import (TYPED, CHECKPOINT_OPTIONS, PARALLEL_OPTIONS, add_request_args, add_results_args, add_train_args,
                      check_results_args, int_list, pick_variants, request_from_args, results_path, save_plot,
                      say_recorded, say_threads, str_list, train_config_from_args)
from .region_memory_cmd import add_memory

SKILL_BOX = "38,40,279,280"  # 9 x 5 cells of the synthetic sample (around 39N 80W)
SCALING_BOX = "39,41,279,281"  # 9 x 9 cells
# training options that do not apply to the region model (one device, no checkpoint, no dropout)
_NOT_FOR_REGIONS = (*PARALLEL_OPTIONS, *CHECKPOINT_OPTIONS, "experiment", "dropout")


def add_region(sub, full: bool) -> None:
    p = sub.add_parser("region", help="region mode: do neighbours help, per cell; memory against area; sharding an "
                                      "area over ranks",
                       description="Forecast every cell of a lat/lon box with the point LSTM of `lstmnb train --box`, "
                                   "which the region model also feeds a learned mix of each cell's nearest "
                                   "neighbours (sparse: k weights per cell; dense: n x n; none: no mix, the point "
                                   "model itself). Each KIND prints tables and appends one run record per case; "
                                   "see `lstmnb region KIND --help`.")
    kinds = p.add_subparsers(dest="region_kind", metavar="KIND", required=True)
    _add_skill(kinds, full)
    add_memory(kinds)
    _add_scaling(kinds)


def _add_skill(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "skill", help="train the point model and the neighbour variants on a box; compare them cell by cell",
        description="Train, as `lstmnb train --box` trains the point model (the same options, preset, early "
                    "stopping and thread policy), each variant: none (the point model itself), sparse (plus a "
                    "learned mix of each cell's k nearest cells' weather and its change over the past hour; each "
                    "k of --neighbours is tried and validation chooses) and dense (an n x n mix from the chosen k). "
                    "Prints per variant the mean and pooled test RMSE and the MSE skill score against persistence "
                    "and against none, then the same comparison in the cells the weather reaches first (upstream) "
                    "and last (downstream). One record per run, with every cell's scores.",
        epilog=f"default area: --box {SKILL_BOX} (9 x 5 cells of the sample), 2020-01-01 .. 2021-06-30\n"
               "example:\n  lstmnb region skill --box 39,40,279,280 --end 2020-03-31 --epochs 3 --neighbours 8 "
               "--plot skill.png")
    add_request_args(p)
    if full:
        add_train_args(p, skip=_NOT_FOR_REGIONS)
    g = p.add_argument_group("region model")
    g.add_argument("--variants", type=str_list, default=VARIANTS, help="sparse,none,dense (default all three)")
    g.add_argument("--neighbours", type=int_list, default=(8, 24),
                   help="k nearest cells the sparse mix reads; several: each is trained and the best validation "
                        "RMSE chooses (default 8,24: the 3 x 3 and 5 x 5 stencils)")
    g.add_argument("--channels", type=int, default=3, help="independent mixes (default 3: starting as the mean "
                   "difference and the east and north gradients)")
    g.add_argument("--plot", default=None, metavar="FILE.png",
                   help="save the maps: none's RMSE, each variant's RMSE and its difference from none")
    add_results_args(p)
    p.set_defaults(func=_run_skill, check=_check_skill, box=tuple(float(v) for v in SKILL_BOX.split(",")))


def _check_skill(args) -> None:
    from ..experiments.region_skill import check_mixes
    from .run_cmds import check_training

    request = _area_request(args)
    variants = pick_variants(args.variants)
    if ("sparse" in variants or "dense" in variants) and (not args.neighbours or min(args.neighbours) < 1):
        raise ConfigError(f"--neighbours {','.join(map(str, args.neighbours))}: each k must be a whole number >= 1")
    positive("--channels", args.channels)
    check_mixes(variants, args.neighbours, args.channels, CLI)
    check_training(train_config_from_args(args), request, args)
    check_plot(args.plot)


def _run_skill(args) -> int:
    import pandas as pd

    from ..experiments.region_skill import (comparison_panels, comparison_title, region_skill, region_windows)
    from ..region.maps import plot_panels
    from ..report import format_table

    def epoch(name: str, e: dict) -> None:
        print(f"  {name} epoch {e['epoch']}: train loss {e['train_loss']:.5f}, validation RMSE "
              f"{e['val_rmse_k']:.4f} K, {e['train_s']:.1f} s", flush=True)

    def finished(r: dict) -> None:
        k = r["region"]["neighbours"]
        print(f"{r['region']['variant']}{f' k={k}' if k else ''}: {r['metrics']['epochs_run']} epoch(s), "
              f"{r['metrics']['stop_reason']}{'; chosen by validation' if r['region']['chosen'] and len(r['region']['tried_neighbours']) > 1 else ''}",
              flush=True)

    cfg = train_config_from_args(args)  # region_skill names the experiment
    data, info = region_windows(_area_request(args), cfg, progress=cfg.progress, say=TYPED)
    got = region_skill(data, cfg, pick_variants(args.variants), args.neighbours, args.channels, data_info=info,
                       results=results_path(args), on_epoch=epoch, on_point=finished, say=TYPED)
    maps = got.maps
    print(f"\n{data.grid.shape[0]} x {data.grid.shape[1]} cells, test period {maps.attrs['period']}, "
          f"{cfg.lead_hours} h ahead (MSE skill score = 1 - MSE / MSE of the reference; above 0 beats it):")
    with pd.option_context("display.width", 200):
        print(format_table(got.table, "{:,.4f}"))
        if not got.flow.empty:
            print(f"\nagainst none (the point model), by where the weather comes from (it moves towards "
                  f"{got.flow.attrs['heading_deg']:+.0f} degrees from east): upstream = the half of the cells it "
                  "reaches first")
            print(format_table(got.flow, "{:,.4f}"))
            for name in got.flow.index.get_level_values("forecast").unique():  # a mixing variant: does it beat none
                t = got.flow.loc[name]
                where = [w for w in ("upstream", "downstream") if t.loc[w, "difference (K)"] < 0]
                overall = t.loc["all", "difference (K)"]
                print(f"{name} {'beats' if overall < 0 else 'does not beat'} the point model on average "
                      f"({overall:+.4f} K per cell); better on average in {' and '.join(where) or 'neither half'}")
    say_threads(next(iter(got.records.values()))["threads"])
    print(data.windows.climatology["line"])  # which climatology the baseline is, once
    save_plot(lambda: plot_panels(comparison_panels(maps), comparison_title(maps)), args.plot)
    say_recorded(got.runs, args)
    return 0


def _area_request(args):
    """The request of a region command: a box (the default area, or --box), never points."""
    if args.points:
        raise ConfigError("region mode works on a box of cells, not on points; give --box "
                          "LAT_MIN,LAT_MAX,LON_MIN,LON_MAX")
    return request_from_args(args)


def _add_scaling(kinds) -> None:
    p = kinds.add_parser(
        "scaling", help="the area split over local gloo ranks (tiles with halo exchange vs windows) against one "
                        "process with as many threads",
        description="Train a few steps of the sparse model on N local gloo ranks of one thread each (CPU), per "
                    "mode: tiles (each rank a band of rows and its relation rows, halo rows exchanged every step) "
                    "and windows (each rank the whole area, a share of each batch's windows), against one process "
                    "with N threads: equal total threads, alternating, medians over --repeats. Prints seconds per "
                    "step, the speed-up, halo bytes per rank and step, and the largest relative difference of the "
                    "loss from the one-process loss (float rounding only).",
        epilog=f"default area: --box {SCALING_BOX} (9 x 9 cells of the sample), 2020-01-01 .. 2021-06-30\n"
               "example:\n  lstmnb region scaling --box 39,40,279,280 --world-sizes 1,2 --steps 5")
    add_request_args(p)
    g = p.add_argument_group("scaling")
    g.add_argument("--window", type=int, default=24, help="input hours (default 24)")
    g.add_argument("--hidden", type=int, default=32, help="LSTM hidden units, shared by all cells (default 32)")
    g.add_argument("--neighbours", type=int, default=8, help="k nearest cells mixed into each cell's input (default 8)")
    g.add_argument("--lr", type=float, default=4e-3, help="Adam learning rate (default 0.004)")
    g.add_argument("--seed", type=int, default=0, help="weights and batches (default 0)")
    g.add_argument("--world-sizes", type=int_list, default=(1, 2), help="ranks to run (default 1,2)")
    g.add_argument("--modes", type=str_list, default=("tiles", "windows"), help="tiles,windows (default both)")
    g.add_argument("--steps", type=int, default=5, help="training steps per run (default 5)")
    g.add_argument("--batch-size", type=int, default=8, help="time windows per step (default 8)")
    g.add_argument("--repeats", type=int, default=3, help="alternating runs of each side; medians (default 3)")
    add_results_args(p)
    p.set_defaults(func=_run_scaling, check=_check_scaling, box=tuple(float(v) for v in SCALING_BOX.split(",")))


def _scaling_train_config(args):
    from ..training import preset_config

    return preset_config(window=args.window, hidden=args.hidden, lr=args.lr, seed=args.seed, device="cpu",
                         progress=False)


def _shard_config(args, mode: str = "tiles", world_size: int = 1):
    from ..region.shard import ShardConfig

    return ShardConfig(mode=mode, world_size=world_size, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                       seed=args.seed)


def _scaling_model(args, data=None):
    from ..region.model import variant_config

    sizes = {"n_features": data.n_features, "n_mixed": data.n_mixed} if data is not None else {}
    cfg = variant_config("sparse", hidden=args.hidden, neighbours=args.neighbours, **sizes)
    cfg.validate()
    return cfg


def _check_scaling(args) -> None:
    from ..experiments.region import check_world_sizes

    _area_request(args)
    positive("--lr", args.lr, whole=False)  # its own option (default 0.004), not the rate-by-lead knob
    _scaling_train_config(args).validate(CLI)
    positive("--neighbours", args.neighbours)  # the sparse mix's k; its top, the area's cells less one, needs the data
    _scaling_model(args)
    check_world_sizes(args.world_sizes, CLI)
    positive("--repeats", args.repeats)
    for mode in args.modes:
        for w in args.world_sizes:
            _shard_config(args, mode, w).validate(replace(CLI, names={"world_size": "world_sizes"}))
    check_results_args(args)
    check_cache()


def _run_scaling(args) -> int:
    from ..experiments.region import region_scaling
    from ..experiments.region_skill import region_windows
    from ..report import format_table

    data, info = region_windows(_area_request(args), _scaling_train_config(args), progress=False, say=TYPED)
    table = region_scaling(data, _scaling_model(args, data), args.world_sizes, args.modes, _shard_config(args),
                           repeats=args.repeats, data_info=info, results=results_path(args), say=TYPED,
                           on_point=lambda r: print(f"  {r['region']['mode']}, {r['threads']['total']} thread(s) "
                                                    f"in {r['threads']['ranks']} process(es): "
                                                    f"{r['timing']['step_s']:.4f} s per step", flush=True))
    ny, nx = data.grid.shape
    print(f"\n{ny} x {nx} cells, {args.steps} steps of {args.batch_size} windows, sparse k = {args.neighbours}; "
          f"N gloo ranks of one thread against one process of N threads (medians of {args.repeats}):")
    print(format_table(table.set_index(["mode", "threads"]), "{:,.6g}"))
    print(f"cores free now: {table.attrs['threads']['used']} ({table.attrs['threads']['reason']})")
    if note := next((r["threads"]["note"] for r in table.attrs["records"] if r["threads"].get("note")), None):
        print(f"note: {note}")
    say_recorded(table.attrs["records"], args)
    return 0
