"""`lstmnb bench size` and `lstmnb bench batch-sweep`: the problem's size swept, in grid points and in batch size;
and what the benches whose figures are steady epochs share."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..rules import CLI
from .checks import check_plot
from .options import (TYPED, CHECKPOINT_OPTIONS, PARALLEL_OPTIONS, add_request_args, add_results_args, add_train_args,
                      int_list, override_default, request_from_args, results_path, save_plot, train_config_from_args)
from .run_cmds import check_training


def steady_epochs(option: str, epochs: int | None) -> None:
    """A bench whose figures are steady epochs (the first, warm-up epoch left out) needs two or more."""
    if epochs is not None and epochs < 2:
        raise ConfigError(f"{option} {epochs} leaves no steady epoch to time (the first is the warm-up, which this "
                          f"bench leaves out): give {option} 2 or more")


def bench_size(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "size", help="samples/s against the number of grid points: CPU vs GPU (eager and CUDA graph), crossover",
        description="Trains the same setting on 2, 8, 32, ... grid points of the sample's box (the published two "
                    "first), on the CPU and on a GPU eager and with a CUDA graph, and prints samples/s, seconds "
                    "per epoch, the GPU's speedup over the CPU and the crossover: the fewest points at which the "
                    "GPU is faster. Without a GPU the GPU rows are recorded as skipped. Defaults: 2 epochs "
                    "(warm-up + one timed) on 2020-01-01..2020-03-31.")
    add_request_args(p, places=False)  # the sizes' grid points are its own (--points): no --point or --box
    if full:
        add_train_args(p, skip=(*PARALLEL_OPTIONS, *CHECKPOINT_OPTIONS, "input_path", "device", "cuda_graph",
                                "experiment"))
        override_default(p, "epochs", 2, "a warm-up epoch and one timed")
    g = p.add_argument_group("size")
    g.add_argument("--points", dest="size_points", type=int_list, default=(2, 8, 32, 128, 512),
                   help="grid-point counts (default 2,8,32,128,512)")
    g.add_argument("--variants", default="cpu,cuda-eager,cuda-graph",
                   help="device variants: cpu, cuda-eager, cuda-graph (default all three)")
    g.add_argument("--plot", default=None, metavar="FILE.png", help="save the throughput and speedup plot here")
    add_results_args(p)
    p.set_defaults(func=_run_bench_size, check=_check_bench_size)


def _size_setup(args):
    """The size experiment's config, with its default dates (a quarter) when neither is given."""
    from ..experiments import size

    if args.start is None and args.end is None:
        args.start, args.end = "2020-01-01", "2020-03-31"
    return size.SizeConfig(points=tuple(args.size_points), variants=tuple(v.strip() for v in args.variants.split(",")))


def _check_bench_size(args) -> None:
    from ..experiments.size import grid_points

    sc = _size_setup(args)
    sc.validate(CLI)
    for n in sc.points:
        grid_points(n, say=CLI)
    check_training(train_config_from_args(args), request_from_args(args), args, device=False)
    steady_epochs("--epochs", train_config_from_args(args).epochs)
    check_plot(args.plot)


def _run_bench_size(args) -> int:
    from ..experiments import size
    from ..report import format_table

    sc = _size_setup(args)
    records = size.size_experiment(
        request_from_args(args), train_config_from_args(args), sc, results=results_path(args),
        on_point=lambda r: print(f"  {r['size']['points']:>4} points {r['size'].get('ran', r['size']['variant']):<10} "
                                 + (f"{r['timing']['samples_per_s']:,.0f} samples/s" if r["status"] == "ok"
                                    else f"{r['status']}: {r['reason']}")
                                 + (f" ({r['cuda_graph']['reason']})" if "not used" in r["size"].get("ran", "")
                                    else "")), say=TYPED)
    table = size.size_table(records)
    data = next((r["data"] for r in records if r.get("data")), None)
    print(f"\ndata: {data['source']} ({data.get('kind', 'real')} data) at every size, so that sizes compare alike"
          if data else "")
    print(format_table(size.format_size_table(table)) if not table.empty else "(no finished runs)")
    if all(r["status"] == "skipped" for r in records if r["size"]["variant"] != "cpu"):
        print("no GPU rows: they are recorded as skipped here; run `lstmnb bench size` on a GPU machine for the crossover")
    for variant, n in size.crossover(table).items():
        print(f"{variant}: " + (f"faster than the CPU from {n} points on" if n else "not faster than the CPU at these sizes"))
    if args.plot and not table.empty:
        save_plot(size.plot_size(table), args.plot)
    return 0


def bench_batch_sweep(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "batch-sweep", help="batch size x4 from 32 until out of memory: time per epoch and validation RMSE",
        description="Trains on one device at batch sizes --first-batch, x--factor, ... up to --max-batch (default: the "
                    "training set), recording each point (ok, or oom where memory ran out; the sweep stops there). "
                    "--memory-cap-mb limits memory per point (GPU: allocator fraction; CPU: the process's data-segment "
                    "limit, Linux only), so the out-of-memory path can be seen on any GPU or Linux machine.")
    add_request_args(p)
    if full:
        add_train_args(p, skip=(*PARALLEL_OPTIONS, *CHECKPOINT_OPTIONS, "batch_size", "experiment"))
    g = p.add_argument_group("sweep")
    g.add_argument("--first-batch", type=int, default=32, help="first batch size (default 32)")
    g.add_argument("--factor", type=int, default=4, help="growth per point (default 4)")
    g.add_argument("--max-batch", type=int, default=None, help="largest batch size (default: the training set)")
    g.add_argument("--memory-cap-mb", type=float, default=None, help="memory allowed per point, in MB")
    add_results_args(p)
    p.set_defaults(func=_run_bench_batch_sweep, check=_check_bench_batch_sweep)


def _sweep_config(args):
    from .. import experiments

    return experiments.SweepConfig(start=args.first_batch, factor=args.factor, max_batch=args.max_batch,
                                   memory_cap_mb=args.memory_cap_mb)


SWEEP_SPELLING = replace(CLI, names={"start": "first_batch"})  # SweepConfig's fields as this command spells them


def _check_bench_batch_sweep(args) -> None:
    check_training(train_config_from_args(args), request_from_args(args), args)
    _sweep_config(args).validate(SWEEP_SPELLING)


def _run_bench_batch_sweep(args) -> int:
    from .. import experiments
    from ..report import batch_sweep_table, format_table
    from ..training import prepare_windows

    cfg = train_config_from_args(args)
    sweep = _sweep_config(args)
    windows, info = prepare_windows(request_from_args(args), cfg, progress=cfg.progress, say=TYPED)
    sweep.check_start(windows.x["train"].shape[0], SWEEP_SPELLING)
    records = experiments.batch_sweep(windows, cfg, sweep, data_info=info, results=results_path(args))
    print(format_table(batch_sweep_table(records)))
    return 0
