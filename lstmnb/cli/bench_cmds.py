"""`lstmnb bench KIND`: experiments built from timed runs (speed, scaling, allreduce, cost here; size and batch-sweep
in ``bench_sizes``)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError, DataError
from ..paths import check_cache
from ..rules import CLI, known
from .bench_sizes import bench_batch_sweep, bench_size, steady_epochs
from .checks import check_plot, check_records_args, check_results, positive
from .options import (TYPED, CHECKPOINT_OPTIONS, add_records_args, add_request_args, add_results_args, add_train_args,
                      byte_size, check_results_args, int_list, read_runs, request_from_args, results_path, save_plot,
                      train_config_from_args)
from .run_cmds import check_training


def add_bench(sub, full: bool) -> None:
    p = sub.add_parser("bench", help="speed experiments: speed (time to accuracy, MFU), scaling, allreduce, ...",
                       description="Experiments built from timed runs. Each prints a table; size, scaling, allreduce "
                                   "and batch-sweep also append their run records (speed only with "
                                   "--results; cost reads records). See `lstmnb bench KIND --help`.")
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND", required=True)
    for add in (_bench_ladder, _bench_speed, bench_size, _bench_scaling, _bench_allreduce, bench_batch_sweep,
                _bench_cost):
        add(kinds, full)


def _bench_ladder(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "ladder", help="the study's workload rung by rung, from the study's code to lstmnb's fastest step",
        description="Times the study's workload (two layers of 64, batch 128, 17,520 samples an epoch, Adam 1e-3) "
                    "rung by rung on the study's data: rung 0 is the study's code (--preset published), each "
                    "later rung one change on the one before, the last the recommended setting (another model "
                    "and optimiser). Each run is a fresh `lstmnb train` process, rounds alternate, and every "
                    "record says its rung; prints the medians and each rung against the CPU's rung 0. Every rung "
                    "runs on the same threads (chosen once at the start: all cores on an idle machine, fewer "
                    "where other processes keep cores busy): run it on an idle machine.",
        epilog="example:\n  lstmnb bench ladder --epochs 5 --rounds 3 --device cpu")
    p.add_argument("--device", choices=("cpu", "cuda", "all"), default="all",
                   help="cpu, cuda or all (default: all; without a GPU its rungs are recorded as skipped)")
    p.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5; the study timed 5, 10, 15)")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds; medians are printed (default 3)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads of every run (default: chosen once at the start, as a CPU run chooses its own)")
    add_results_args(p)
    p.set_defaults(func=_run_bench_ladder, check=_check_bench_ladder)


def _check_bench_ladder(args) -> None:
    from ..machine.device import local_rank_limit

    positive("--epochs", args.epochs)
    positive("--rounds", args.rounds)
    positive("--threads", args.threads, none_ok=True, hi=local_rank_limit())
    check_results_args(args)
    check_cache()


def _run_bench_ladder(args) -> int:
    import pandas as pd

    from ..experiments.ladder import ladder_experiment
    from ..report import format_table, ladder_rows, ladder_table

    devices = ("cpu", "cuda") if args.device == "all" else (args.device,)
    def say(r: dict) -> None:
        done = f", {r['timing']['train_s']:.2f} s" if r.get("timing") else f" ({r['reason']})"
        faults = (r.get("memory") or {}).get("page_faults")  # a CPU run's: the regime its heap ran in
        done += f", {faults / 1e6:.2f} million page faults" if faults is not None else ""
        print(f"{r['device']['kind']} rung {r['ladder']['rung']} ({r['ladder']['name']}): {r['status']}{done}")

    records = ladder_experiment(args.epochs, args.rounds, devices, results=results_path(args), threads=args.threads,
                                on_point=say)
    print("\n" + format_table(ladder_table(ladder_rows(pd.json_normalize(records, max_level=2), "measured here"))))
    return 0


def _bench_speed(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "speed", help="time to a target validation RMSE, samples/s and model FLOPs utilisation of three settings",
        description="Trains the published setting (DataLoader, batch 128, two layers), the same model and batch on the fast "
                    "path, and the recommended fast setting, alternating them over repeats, and prints medians: "
                    "samples/s, seconds per epoch, seconds to a target validation RMSE (default 10% below "
                    "persistence), training FLOP/s as a fraction of this machine's measured float32 matmul rate, "
                    "and ratios against the published setting.")
    add_request_args(p)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    p.add_argument("--repeats", type=int, default=3, help="runs per setting; medians are reported (default 3)")
    p.add_argument("--max-epochs", type=int, default=15, help="epoch budget per run (default 15)")
    p.add_argument("--target-rmse", type=float, default=None,
                   help="validation RMSE target in K (default: --target-fraction x persistence's validation RMSE)")
    p.add_argument("--target-fraction", type=float, default=None, help="the target as a fraction of "
                   "persistence's validation RMSE, when --target-rmse is not given (default 0.9, i.e. 10%% below)")
    p.add_argument("--only", default=None, help="comma-separated contenders: published,fast,recommended")
    p.add_argument("--results", default=None, help="append each run's record here (default: do not record)")
    p.set_defaults(func=_run_bench_speed, check=_check_bench_speed)


def _check_bench_speed(args) -> None:
    from ..machine.device import resolve_device
    from ..experiments.speed import CONTENDERS
    from ..training.config import knob_problem

    request_from_args(args)
    if knob_problem("device", args.device):
        raise CLI.refuse("device", args.device, knob_problem("device", args.device))
    resolve_device(args.device, CLI)
    positive("--repeats", args.repeats)
    positive("--max-epochs", args.max_epochs)
    steady_epochs("--max-epochs", args.max_epochs)
    positive("--target-rmse", args.target_rmse, whole=False, none_ok=True)
    if args.target_rmse is not None and args.target_fraction is not None:
        raise ConfigError(f"--target-rmse {args.target_rmse:g} and --target-fraction {args.target_fraction:g} both "
                          "given: the target is an RMSE in K or a fraction of persistence's; give one")
    if args.target_fraction is not None and not 0 < args.target_fraction <= 1:
        raise ConfigError(f"--target-fraction {args.target_fraction} must be in (0, 1]: the target is that fraction of "
                          "persistence's validation RMSE (0.9: 10% below it)")
    only = args.only.split(",") if args.only is not None else list(CONTENDERS)
    known(only, CONTENDERS, f"--only {args.only!r}")
    twice = sorted({n for n in only if only.count(n) > 1})
    if twice:  # it ran them twice as often, and printed each row twice
        raise ConfigError(f"--only {args.only} repeats {','.join(twice)}; give each contender once, e.g. "
                          f"{','.join(dict.fromkeys(only))} (--repeats sets how often each runs)")
    check_results(args.results)
    check_cache()


def _run_bench_speed(args) -> int:
    from ..experiments import speed

    report = speed.speed_benchmark(
        request_from_args(args), device=args.device, repeats=args.repeats, max_epochs=args.max_epochs,
        target_rmse=args.target_rmse, target_fraction=args.target_fraction,
        only=args.only.split(",") if args.only else None, results=args.results, say=TYPED)
    print(speed.format_report(report))
    return 0


def _bench_scaling(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "scaling", help="strong/weak scaling of DDP over 1..N devices, with compute vs communication",
        description="One DDP run per world size (local processes: one per GPU, or gloo ranks on CPU). Prints "
                    "time per epoch, samples/s, speedup and efficiency with their definitions, the measured "
                    "compute/communication split per step, and validation loss per epoch and wall time. "
                    "--batch-size is the global batch in strong scaling and the per-device batch in weak.",
        epilog="examples:\n"
               "  lstmnb bench scaling --device cpu --world-sizes 1,2 --epochs 3\n"
               "  lstmnb bench scaling --device cuda --world-sizes 1,2,4 --mode both --batch-size 256")
    add_request_args(p)
    if full:
        add_train_args(p, skip=("strategy", "nproc", "experiment", *CHECKPOINT_OPTIONS))
    g = p.add_argument_group("scaling")
    g.add_argument("--world-sizes", type=int_list, default=(1, 2), help="world sizes to run (default 1,2)")
    g.add_argument("--mode", choices=("strong", "weak", "both"), default="strong", help="default strong")
    g.add_argument("--comm-steps", type=int, default=20,
                   help="steps timed with and without the all-reduce per world size (0: skip; default 20)")
    g.add_argument("--plot", default=None, metavar="FILE.png", help="save the convergence plot here")
    add_results_args(p)
    p.set_defaults(func=_run_bench_scaling, check=_check_bench_scaling)


def _scaling_configs(args):
    from .. import experiments

    modes = ("strong", "weak") if args.mode == "both" else (args.mode,)
    return [experiments.ScalingConfig(world_sizes=args.world_sizes, mode=m, comm_split_steps=args.comm_steps)
            for m in modes]


def _check_bench_scaling(args) -> None:
    from ..training.parallel import check_world_size, ddp_device_kind

    cfg = train_config_from_args(args)
    check_training(cfg, request_from_args(args), args)
    steady_epochs("--epochs", cfg.epochs)
    for sc in _scaling_configs(args):
        sc.validate(cfg, replace(CLI, names={"comm_split_steps": "comm_steps"}))
    check_world_size(ddp_device_kind(cfg.device, CLI), max(args.world_sizes), "--world-sizes")  # before the data
    check_plot(args.plot)


def _run_bench_scaling(args) -> int:
    from .. import experiments
    from ..report import SCALING_DEFINITIONS, convergence_table, format_table, plot_convergence, scaling_table
    from ..training import prepare_windows

    cfg = train_config_from_args(args)
    scs = _scaling_configs(args)
    windows, info = prepare_windows(request_from_args(args), cfg, progress=cfg.progress, say=TYPED)
    records = []
    for sc in scs:
        records += experiments.scaling(windows, cfg, sc, data_info=info, results=results_path(args),
                                 on_point=lambda r: print(f"  world_size {r['world_size']}: "
                                                          f"{r['timing']['epoch_s_median']:.3f} s/epoch"))
    for sc in scs:
        print(f"\n{SCALING_DEFINITIONS[sc.mode]}")
    print(SCALING_DEFINITIONS["comm"] + "\n")
    print(format_table(scaling_table(records)))
    print("\nconvergence (validation loss per epoch, cumulative wall seconds):")
    convergence = convergence_table(records)
    print(format_table(convergence.set_index(["experiment", "world_size", "epoch"])))
    save_plot(lambda: plot_convergence(convergence), args.plot)
    return 0


def _bench_allreduce(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "allreduce", help="all-reduce time, algorithm and bus bandwidth per buffer size (nccl-tests convention)",
        description="Times torch.distributed.all_reduce on float32 buffers from --min-bytes to --max-bytes "
                    "(x --factor) plus the model's gradient size, over --world-size local ranks (NCCL on GPUs, "
                    "gloo on CPU). algbw = bytes / time; busbw = algbw x 2(n-1)/n, as nccl-tests define it. "
                    "GB/s means 1e9 bytes per second.")
    p.add_argument("--world-size", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--device", default="auto", help="auto, cpu (gloo) or cuda (NCCL) (default auto)")
    p.add_argument("--min-bytes", type=byte_size, default=1024, help="smallest buffer (default 1K)")
    p.add_argument("--max-bytes", type=byte_size, default=64 * 2**20, help="largest buffer (default 64M)")
    p.add_argument("--factor", type=int, default=4, help="size step (default 4)")
    p.add_argument("--budget-s", type=float, default=0.2, help="timed seconds per size (default 0.2)")
    p.add_argument("--hidden", type=int, default=64, help="model hidden units, for the gradient size (default 64)")
    p.add_argument("--layers", type=int, default=1, help="model layers, for the gradient size (default 1)")
    p.add_argument("--cell", default="lstm", help="lstm or gru (default lstm)")
    p.add_argument("--step-s", type=float, default=None,
                   help="a measured training step in seconds: show the share of it one gradient all-reduce takes")
    add_results_args(p)
    p.set_defaults(func=_run_bench_allreduce, check=_check_bench_allreduce)


def _allreduce_configs(args):
    from ..experiments import AllreduceConfig
    from ..training import TrainConfig

    return (TrainConfig(hidden=args.hidden, layers=args.layers, cell=args.cell, experiment="allreduce"),
            AllreduceConfig(world_size=args.world_size, device=args.device, min_bytes=args.min_bytes,
                            max_bytes=args.max_bytes, factor=args.factor, budget_s=args.budget_s))


def _check_bench_allreduce(args) -> None:
    from ..machine.device import resolve_device
    from ..training.parallel import check_world_size, ddp_device_kind

    cfg, acfg = _allreduce_configs(args)
    cfg.validate(CLI)
    acfg.validate(CLI)
    resolve_device(acfg.device, CLI)
    check_world_size(ddp_device_kind(acfg.device, CLI), acfg.world_size, "--world-size")
    positive("--step-s", args.step_s, whole=False, none_ok=True)
    check_results_args(args)


def _run_bench_allreduce(args) -> int:
    from .. import experiments
    from ..records import append_record
    from ..report import allreduce_table, format_table

    cfg, acfg = _allreduce_configs(args)
    out = experiments.allreduce(cfg, acfg)
    print(format_table(allreduce_table([out], args.step_s)))
    print(f"\nmodel gradient per step: {out['gradient_bytes']:,} bytes (hidden {args.hidden}, layers {args.layers}, "
          f"{args.cell}); busbw = algbw x 2(n-1)/n with n = {args.world_size}")
    if path := results_path(args):
        print(f"record appended to {append_record(experiments.allreduce_record(out, acfg, cfg), path)}")
    return 0


def _bench_cost(kinds, full: bool) -> None:
    p = kinds.add_parser(
        "cost", help="cost per run from a price table (per device-hour): table and optional plot",
        description="Cost of each recorded run: devices x wall hours x price per device-hour. The shipped "
                    "prices are examples; copy lstmnb/prices.yaml, set your own and pass --prices.")
    add_records_args(p)
    p.add_argument("--prices", default=None, help="your price table (YAML); default: the shipped examples")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the cost vs time plot here")
    p.set_defaults(func=_run_bench_cost, check=_check_bench_cost)


def _check_bench_cost(args) -> None:
    from ..report import load_prices

    check_records_args(args)
    load_prices(args.prices)  # the file, its YAML and every price
    check_plot(args.plot)


def _run_bench_cost(args) -> int:
    from ..report import cost_table, format_table, load_prices, plot_cost

    runs = read_runs(args)
    table = cost_table(runs, load_prices(args.prices))
    if table.empty:
        raise DataError(f"none of the {len(runs)} run record(s) read is a finished run with timing")
    print(format_table(table))
    if (table["price source"] == "example").any():
        print("\nprices marked 'example' are illustrative defaults; pass --prices with your own rates")
    save_plot(lambda: plot_cost(table), args.plot)
    return 0


