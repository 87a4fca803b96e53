"""Sub-command definitions for ``lstmnb``: argument parsing only, each calling into a module."""

from __future__ import annotations

import argparse

from .cli import subcommand, tag_light


# --- shared option groups -------------------------------------------------------------------------

def _float_pair(text: str) -> tuple[float, float]:
    try:
        lat, lon = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LAT,LON (e.g. 40,280 or 40,-80)") from None
    return lat, lon


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def add_request_args(p: argparse.ArgumentParser) -> None:
    """Options that say which ERA5 data to use (shared by `data`, `train` and friends)."""
    g = p.add_argument_group("data (default: the published request on the embedded sample)")
    g.add_argument("--source", default="sample",
                   help="'sample' (offline, default), 'arco-v3' or 'arco-v2' (public ERA5 in the cloud), "
                        "a gs:// URL or a local Zarr path")
    g.add_argument("--variable", dest="variables", action="append", metavar="NAME",
                   help="variable to extract, repeatable (default: 2m_temperature)")
    g.add_argument("--point", dest="points", action="append", type=_float_pair, metavar="LAT,LON",
                   help="grid point, repeatable; longitude in -180..180 or 0..360 (default: 40,280 and 20,280)")
    g.add_argument("--box", type=_float_list, metavar="LAT_MIN,LAT_MAX,LON_MIN,LON_MAX",
                   help="a lat/lon box instead of points")
    g.add_argument("--start", default=None, help="first day, e.g. 2020-01-01 (default)")
    g.add_argument("--end", default=None, help="last day, inclusive, e.g. 2021-06-30 (default)")


def request_from_args(args: argparse.Namespace):
    from . import era5

    kw = {"source": args.source}
    if args.variables:
        kw["variables"] = tuple(args.variables)
    if getattr(args, "box", None):
        if len(args.box) != 4:
            from .errors import ConfigError

            raise ConfigError(f"--box needs 4 numbers LAT_MIN,LAT_MAX,LON_MIN,LON_MAX; got {args.box}")
        kw["box"], kw["points"] = tuple(args.box), None
    elif args.points:
        kw["points"] = tuple(args.points)
    if args.start:
        kw["start"] = args.start
    if args.end:
        kw["end"] = args.end
    return era5.Request(**kw)


_TRAIN_HELP = {
    "device": "auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps",
    "strategy": "single device, dataparallel (nn.DataParallel) or ddp (DistributedDataParallel)",
    "input_path": "fast: whole training set as device tensors, shuffled index batches; "
                  "dataloader: per-sample Dataset + DataLoader (the published setting)",
    "num_workers": "DataLoader worker processes (dataloader path)",
    "pin_memory": "pinned host memory for DataLoader batches (CUDA only)",
    "amp": "mixed precision on CUDA: off, auto (bf16 where supported, else fp16), bf16, fp16",
    "threads": "torch intra-op threads on CPU (default: torch's choice, one per core)",
    "epochs": "training epochs", "batch_size": "samples per optimiser step", "lr": "Adam learning rate",
    "lr_schedule": "constant, onecycle or cosine", "weight_decay": "Adam weight decay",
    "grad_clip": "clip the gradient norm to this value", "seed": "random seed (runs on CPU are repeatable)",
    "window": "input window in hours", "lead_hours": "hours from the last input to the first target",
    "horizon": "target hours predicted at once", "calendar": "add hour-of-day and day-of-year inputs",
    "fractions": "train,val,test fractions of the time range (chronological)",
    "split_dates": "VAL_START,TEST_START dates instead of fractions",
    "hidden": "hidden units per layer", "layers": "stacked recurrent layers", "dropout": "dropout between layers",
    "cell": "lstm or gru", "target_rmse": "validation RMSE (K) whose time-to-reach is reported",
    "patience": "stop after this many epochs without validation improvement",
    "checkpoint": "checkpoint file, written atomically after each epoch",
    "resume": "continue the run in --checkpoint without repeating finished epochs",
    "eval_batch_size": "batch size for validation and test predictions",
    "experiment": "experiment name stored in the record", "profile": "profile name stored in the record",
    "progress": "show progress bars",
    "fused_adam": "Adam's update as one fused kernel (measured no slower on CPU; fewer launches on GPUs)",
    "compile": "torch.compile the model (measured no faster on CPU: the LSTM is one library kernel)",
    "cuda_graph": "CUDA only: capture the training step once and replay it (constant lr, fast path)",
    "residual": "forecast the change from the last observed value (starts at persistence; part of the "
                "recommended setting)",
    "stop_at_target": "end the run at the first epoch whose validation RMSE reaches --target-rmse",
    "nproc": "ddp outside torchrun: launch this many local processes (one per GPU, or gloo ranks on CPU); "
             "dataparallel: GPUs to use (default all)",
    "bucket_cap_mb": "ddp: gradient bucket size in MB (all-reduce of a full bucket overlaps the backward)",
    "grad_as_bucket_view": "ddp: let gradients be views into the all-reduce buckets (saves memory and a copy)",
    "static_graph": "ddp: declare the graph identical every step (DDP skips per-step bookkeeping)",
    "uneven_shards": "ddp, fast path: after the first epoch size each rank's batch from its measured "
                     "throughput (mixed or unequal devices)",
    "dist_timeout_s": "ddp: seconds a collective may wait for the other ranks before the run fails",
}


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(text.split(","))


def _option_type(name: str, hint):
    """What argparse parses a TrainConfig field with, from its annotation: ``X | None`` as ``X``,
    ``tuple[X, ...]`` as a comma-separated list of X; bool is returned as is (a --flag/--no-flag)."""
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = (a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        items = set(typing.get_args(hint)) - {Ellipsis}
        lists = {float: _float_list, int: _int_list, str: _str_list}
        if len(items) == 1 and next(iter(items)) in lists:
            return lists[items.pop()]
    elif hint in (bool, int, float, str):
        return hint
    raise TypeError(f"TrainConfig.{name}: no command-line option type for {hint!r}; teach cli_commands._option_type")


def add_train_args(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """One option per TrainConfig field, typed from its annotation (`--batch-size 256`, `--no-progress`).
    None on a light parser (another sub-command runs: see cli.build_parser), sparing torch's import."""
    if getattr(p, "light", False):
        return
    import dataclasses
    import typing

    from .train import TrainConfig

    hints = typing.get_type_hints(TrainConfig)
    g = p.add_argument_group("training")
    for f in dataclasses.fields(TrainConfig):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = _option_type(f.name, hints[f.name])
        help_ = _TRAIN_HELP.get(f.name, "") + f" (default: {f.default})"
        if kind is bool:
            g.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help_)
        else:
            g.add_argument(flag, dest=f.name, type=kind, default=f.default, help=help_)


def train_config_from_args(args: argparse.Namespace):
    import dataclasses

    from .train import TrainConfig

    return TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                          if hasattr(args, f.name)})


def print_run(record: dict) -> None:
    """The epochs table and the final RMSEs beside the baselines, as `lstmnb train` prints them."""
    from .report import epochs_table, format_table, metrics_table

    print(format_table(epochs_table(record)))
    print()
    print(format_table(metrics_table(record)))
    t = record["timing"]
    print(f"\ntraining {t['train_s']:.2f} s on {record['device']['kind']} ({record['device']['name']}); "
          f"warm-up epoch {t['warmup_epoch_s']:.2f} s, median epoch {t['epoch_s_median']:.2f} s, "
          f"{t['samples_per_s']:,.0f} samples/s")
    ttt = t.get("time_to_target") or {}
    if ttt.get("target_rmse_k") is not None:
        print(f"time to validation RMSE <= {ttt['target_rmse_k']:.3f} K: "
              + (f"{ttt['seconds']:.2f} s (epoch {ttt['epoch']})" if ttt["reached"] else ttt["note"]))


# --- train, results, quickstart -------------------------------------------------------------------

@subcommand
def _train(sub) -> None:
    p = sub.add_parser(
        "train", help="train and evaluate one forecaster; prints epochs and RMSE vs baselines; appends a record",
        description="Train one LSTM forecaster, evaluate it against persistence and climatology on the test "
                    "part, print the epochs table, and append the run record to the results file. "
                    "Defaults reproduce the published setting on the embedded sample "
                    "(window 24 h, hidden 64, batch 64, Adam 1e-3, 5 epochs).",
    )
    add_request_args(p)
    add_train_args(p)
    _results_arg(p)
    p.set_defaults(func=_run_train)


def _train_and_print(request, cfg, results: str | None) -> None:
    """``train.run`` (appending the record to ``results`` unless None), then the run as `print_run` shows
    it and where the record went; under torchrun only rank 0 prints (and records)."""
    from .parallel import is_rank_zero
    from .records import runs_path
    from .train import run

    # --strategy ddp --nproc N outside torchrun: run() prepares the data once and train() starts N local
    # ranks (lstmnb.parallel); rank 0's record comes back here to be printed and appended
    result = run(request, cfg, results=results)
    if not is_rank_zero():
        return
    print_run(result.record)
    if results is not None:
        print(f"record {result.record['run_id']} appended to {runs_path(results)}")


def _run_train(args) -> int:
    _train_and_print(request_from_args(args), train_config_from_args(args), _results_path(args))
    return 0


@subcommand
def _results(sub) -> None:
    p = sub.add_parser("results", help="table of the recorded runs",
                       description="Show the runs recorded in one or more results files or folders.")
    _records_args(p)
    p.add_argument("--last", type=int, default=20, help="show the last N runs (default 20; 0 for all)")
    p.set_defaults(func=_run_results)


_EXPERIMENT_HELP = "only runs whose experiment name starts with this (scaling: scaling-strong and scaling-weak)"


def _records_args(p: argparse.ArgumentParser) -> None:
    """The records a reading command works on: results files or folders, and an experiment filter."""
    p.add_argument("paths", nargs="*", default=None, help="results files or folders (default: results/)")
    p.add_argument("--experiment", default=None, help=_EXPERIMENT_HELP)


def _read_runs(args) -> list[dict]:
    """The records in ``args.paths`` (default: the results folder) whose experiment starts with
    ``args.experiment``; DataError when there are none."""
    from .errors import DataError
    from .paths import results_dir
    from .records import read_records

    paths = args.paths or [results_dir()]
    runs = [r for r in read_records(paths)
            if not args.experiment or str(r.get("experiment") or "").startswith(args.experiment)]
    if not runs:
        which = f" of experiment {args.experiment}*" if args.experiment else ""
        raise DataError(f"no run records{which} in {', '.join(map(str, paths))}; run `lstmnb train` first")
    return runs


def _run_results(args) -> int:
    import pandas as pd

    from .report import format_table, runs_table

    df = pd.json_normalize(_read_runs(args), max_level=2)
    if args.last:
        df = df.tail(args.last)
    print(format_table(runs_table(df)))
    return 0


# --- data -----------------------------------------------------------------------------------------

@subcommand
def _data(sub) -> None:
    p = sub.add_parser(
        "data", help="extract ERA5 point or box series into the local cache (progress bar, resumable)",
        description="Extract ERA5 series for points or a lat/lon box and keep them in the local cache, so "
                    "training and notebooks read them instantly afterwards. With no options it extracts the "
                    "published request (2 m temperature at 40N and 20N, 280E, 2020-01-01..2021-06-30) from "
                    "the embedded sample, offline. Use --source arco-v3 for the real data in the cloud "
                    "(anonymous access). An interrupted extraction resumes where it stopped: finished "
                    "blocks stay in the cache.",
        epilog="examples:\n"
               "  lstmnb data                                   # the default request, sample store\n"
               "  lstmnb data --source arco-v3 --point 40,-80 --start 2020-01-01 --end 2020-12-31\n"
               "  lstmnb data --box 38,42,279,281 --variable 2m_temperature --variable surface_pressure\n"
               "  lstmnb data --status                          # what is cached, and where",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_request_args(p)
    g = p.add_argument_group("extraction")
    g.add_argument("--refresh", action="store_true", help="ignore cached blocks and fetch everything again")
    g.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="requests in flight at once (default 128; more hides more round trips)")
    g.add_argument("--block-hours", type=int, default=None, metavar="H",
                   help="hours per cache block (default 168, a week)")
    g.add_argument("--credentials", default=None, metavar="FILE|google_default",
                   help="Google credentials for a private copy of the store (default: anonymous)")
    g.add_argument("--csv", default=None, metavar="FILE", help="also write the tidy table to this CSV file")
    g.add_argument("--status", action="store_true", help="show what the cache holds and exit")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(func=_run_data)


def _run_data(args) -> int:
    from . import era5

    if args.status:
        from .era5_cache import extracts_root, status

        rows = status()
        print(f"cache: {extracts_root()}")
        if not rows:
            print("nothing cached yet; run `lstmnb data`")
            return 0
        import pandas as pd

        from .report import format_table

        table = pd.DataFrame(rows).set_index("store")
        table["MB"] = table["bytes"] / 1e6
        print(format_table(table[["variable", "target", "blocks", "hours", "MB"]], floatfmt="{:,.2f}"))
        return 0
    request = request_from_args(args)
    options = {"token": args.credentials} if args.credentials else None
    ds = era5.extract(request, progress=args.progress, refresh=args.refresh, storage_options=options,
                      concurrency=args.concurrency, block_hours=args.block_hours)
    print(era5.summary(ds))
    from .era5_cache import extracts_root

    print(f"cached     {extracts_root()}")
    if args.csv:
        from .paths import atomic_path

        with atomic_path(args.csv) as tmp:
            era5.to_frame(ds).to_csv(tmp, index=False)
        print(f"csv        {args.csv}")
    return 0


# --- notebooks and quickstart ---------------------------------------------------------------------

@subcommand
def _notebooks(sub) -> None:
    p = sub.add_parser(
        "notebooks", help="run the notebook series with a device profile (papermill), or list notebooks and profiles",
        description="Run the numbered notebooks through papermill with a device profile's parameters, write the "
                    "executed notebooks and their HTML to runs/<profile>/<timestamp>/, and print a summary.",
    )
    nsub = p.add_subparsers(dest="notebooks_command", metavar="ACTION")
    run = nsub.add_parser(
        "run", help="execute the series (or some notebooks) with a profile",
        description="Execute the notebooks with a profile's parameters; -p overrides win. A failing notebook "
                    "stops the series; the notebooks executed so far are kept.",
        epilog="examples:\n"
               "  lstmnb notebooks run --profile cpu\n"
               "  lstmnb notebooks run --profile ci --only 01,03\n"
               "  lstmnb notebooks run --profile cpu -p epochs_list '[5]' -p input_paths '[dataloader]'\n"
               "  lstmnb notebooks run --profile cpu --only 06 -p results_paths '[results, ~/carc-results]'\n"
               "  lstmnb notebooks run --profile carc-v100 --kernel lstmnb",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--profile", required=True, help="profile name (see `lstmnb notebooks list`) or a .yaml path")
    run.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", default=[],
                     metavar=("KEY", "VALUE"), help="override a notebook parameter; VALUE is read as YAML "
                                                    "(5, [5, 10], cuda, null); repeatable")
    run.add_argument("--only", default=None, help="comma-separated notebooks by number or name, e.g. 01,03")
    run.add_argument("--kernel", default=None, help="Jupyter kernel name (default: the profile's)")
    run.add_argument("--timeout", type=int, default=None, help="seconds allowed per cell (default: the profile's)")
    run.add_argument("--runs-dir", default="runs", help="where run folders go (default: ./runs)")
    run.add_argument("--notebooks", default=None, help="notebook folder (default: the checkout's notebooks/)")
    run.add_argument("--no-html", dest="html", action="store_false", help="do not render HTML")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="no per-cell progress bar")
    run.set_defaults(func=_run_notebooks)
    lst = nsub.add_parser("list", help="show the notebooks (with their parameters) and the profiles")
    lst.add_argument("--notebooks", default=None, help="notebook folder (default: the checkout's notebooks/)")
    lst.set_defaults(func=_list_notebooks)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def _overrides(pairs) -> dict:
    from .notebooks import parse_value

    return {key: parse_value(value) for key, value in pairs}


def _print_series(result) -> None:
    from .report import format_table

    print()
    print(format_table(result.table(), floatfmt="{:,.1f}"))
    print(f"\nrun folder  {result.run_dir}")
    print(f"records     {result.results}")
    if result.report:
        print(f"report      {result.report}")


def _run_notebooks(args) -> int:
    from .notebooks import NotebookError, run_series

    try:
        result = run_series(args.profile, overrides=_overrides(args.parameters), only=args.only,
                            runs_dir=args.runs_dir, notebooks=args.notebooks, kernel=args.kernel,
                            cell_timeout_s=args.timeout, html=args.html, progress=args.progress)
    except NotebookError as exc:
        if getattr(exc, "series", None) is not None:
            _print_series(exc.series)
        raise
    _print_series(result)
    return 0


def _list_notebooks(args) -> int:
    from .notebooks import listing

    nbs, profiles = listing(args.notebooks)
    print("notebooks:")
    for name, heading, params in nbs:
        print(f"  {name:<22} {heading}")
        print(f"  {'':<22} parameters: {params}")
    print("\nprofiles (lstmnb notebooks run --profile NAME):")
    for name, label, device, kernel in profiles:
        print(f"  {name:<10} {label:<14} device {device:<5} kernel {kernel}")
    return 0


@subcommand
def _quickstart(sub) -> None:
    p = sub.add_parser(
        "quickstart", help="the main job: train + evaluate on the sample (CPU), then render the notebook series",
        description="Train and evaluate the default forecaster on the embedded sample on CPU (the published "
                    "setting: window 24 h, hidden 64, batch 64, 5 epochs), print the results table, then run "
                    "the notebook series with a quick CPU profile and print where the HTML report is. "
                    "A few minutes on 2 cores.",
    )
    p.add_argument("--profile", default="quick", help="profile for the notebook series (default: quick)")
    p.add_argument("--epochs", type=int, default=5, help="epochs of the default run (default 5)")
    _results_arg(p)
    p.add_argument("--runs-dir", default="runs", help="where the notebook run folder goes (default: ./runs)")
    p.add_argument("--no-notebooks", dest="notebooks", action="store_false", help="only the training run")
    p.set_defaults(func=_run_quickstart)


def _run_quickstart(args) -> int:
    from .train import TrainConfig

    print(f"== 1/2  default run on the embedded sample, CPU, {args.epochs} epochs")
    _train_and_print(None, TrainConfig(device="cpu", epochs=args.epochs, experiment="quickstart"), _results_path(args))
    if not args.notebooks:
        return 0
    from .notebooks import run_series

    print(f"\n== 2/2  the notebook series, profile {args.profile}")
    series = run_series(args.profile, runs_dir=args.runs_dir)
    _print_series(series)
    print(f"\nopen the report: {series.report}")
    return 0


# --- bench: experiments built from runs -----------------------------------------------------------
# `lstmnb bench KIND`: each KIND registers itself below with @bench_command (one function per kind).
BENCH_COMMANDS: list = []


def bench_command(fn):
    BENCH_COMMANDS.append(fn)
    return fn


@subcommand
def _bench(sub) -> None:
    p = sub.add_parser("bench", help="speed experiments: speed (time to accuracy, MFU), scaling, allreduce, ...",
                       description="Experiments built from timed runs. Each prints a table and appends run "
                                   "records; see `lstmnb bench KIND --help`.")
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    tag_light(kinds, lambda name: p.light)
    for register in BENCH_COMMANDS:
        register(kinds)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


@bench_command
def _bench_speed(kinds) -> None:
    p = kinds.add_parser(
        "speed", help="time to a target validation RMSE, samples/s and model FLOPs utilisation of three settings",
        description="Trains the published setting (DataLoader, batch 64), the same model and batch on the fast "
                    "path, and the recommended fast setting, alternating them over repeats, and prints medians: "
                    "samples/s, seconds per epoch, seconds to a target validation RMSE (default 10%% below "
                    "persistence), training FLOP/s as a fraction of this machine's measured float32 matmul rate, "
                    "and ratios against the published setting.",
    )
    add_request_args(p)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    p.add_argument("--repeats", type=int, default=3, help="runs per setting; medians are reported (default 3)")
    p.add_argument("--max-epochs", type=int, default=15, help="epoch budget per run (default 15)")
    p.add_argument("--target-rmse", type=float, default=None,
                   help="validation RMSE target in K (default: --target-fraction x persistence's validation RMSE)")
    p.add_argument("--target-fraction", type=float, default=0.9, help="default target as a fraction of "
                   "persistence's validation RMSE (default 0.9, i.e. 10%% below)")
    p.add_argument("--only", default=None, help="comma-separated contenders: published,fast,recommended")
    p.add_argument("--results", default=None, help="append each run's record here (default: do not record)")
    p.set_defaults(func=_run_bench_speed)


def _run_bench_speed(args) -> int:
    from . import speed

    report = speed.speed_benchmark(
        request_from_args(args), device=args.device, repeats=args.repeats, max_epochs=args.max_epochs,
        target_rmse=args.target_rmse, target_fraction=args.target_fraction,
        only=args.only.split(",") if args.only else None, results=args.results,
    )
    print(speed.format_report(report))
    return 0


# --- scratch: the from-scratch LSTM and its versions table -----------------------------------------

@subcommand
def _scratch(sub) -> None:
    p = sub.add_parser("scratch", help="the from-scratch LSTM: versions table (loops, numpy, numba, CUDA, torch)",
                       description="The LSTM written from its equations (NumPy, backprop through time) and its "
                                   "parallel versions; see `lstmnb scratch bench --help`.")
    ssub = p.add_subparsers(dest="scratch_command", metavar="ACTION")
    b = ssub.add_parser(
        "bench", help="train every version from the same weights and print the versions table",
        description="Train each version for N epochs from the same initial weights on the same batches "
                    "(versions alternated over repeats; medians quoted), print compile and run time, speedup "
                    "against loops and numpy, final train/test loss and test RMSE beside the baselines, and "
                    "append one record per version (experiment scratch_versions). GPU versions without a GPU "
                    "are recorded as skipped.",
    )
    b.add_argument("--versions", default=None,
                   help="comma-separated versions (default all: loops,numpy,numba-cpu,numba-cuda,torch,torch-cuda)")
    b.add_argument("--data", default="airline", help="airline (default) or era5 (the embedded sample point series)")
    b.add_argument("--window", type=int, default=None, help="input steps per sample (default 12 airline, 24 era5)")
    b.add_argument("--hours", type=int, default=24 * 42, help="era5: hours of the series (default 1008)")
    b.add_argument("--hidden", type=int, default=32, help="hidden units (default 32)")
    b.add_argument("--epochs", type=int, default=30, help="epochs per run (default 30)")
    b.add_argument("--batch-size", type=int, default=16, help="samples per optimiser step (default 16)")
    b.add_argument("--optimizer", default="adam", help="adam (default) or sgd")
    b.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    b.add_argument("--clip", type=float, default=1.0, help="max gradient norm; 0 turns clipping off (default 1)")
    b.add_argument("--dtype", default="float64", help="float64 (default) or float32")
    b.add_argument("--seed", type=int, default=0, help="seed of the initial weights and the shuffles (default 0)")
    b.add_argument("--threads", type=int, default=None,
                   help="CPU threads for numba-cpu and torch (default: the libraries' own choice)")
    b.add_argument("--repeats", type=int, default=3, help="runs per version; median run time (default 3)")
    _results_arg(b)
    b.add_argument("--plot", default=None, metavar="FILE", help="also save the plot (png/svg/pdf)")
    b.set_defaults(func=_run_scratch_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def _run_scratch_bench(args) -> int:
    import os

    # idle OpenMP threads of numba and torch busy-wait and starve each other on few cores; must be set
    # before either loads (see benchmarks/scratch_versions.py)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from .scratch.bench import format_table, plot_versions, versions_table
    from .scratch.data import default_window
    from .scratch.fit import VERSIONS, ScratchConfig

    window = args.window or default_window(args.data)
    config = ScratchConfig(data=args.data, window=window, hours=args.hours, hidden=args.hidden, epochs=args.epochs,
                           batch_size=args.batch_size, optimizer=args.optimizer, lr=args.lr,
                           clip=args.clip or None, dtype=args.dtype, seed=args.seed, threads=args.threads)
    versions = [v.strip() for v in args.versions.split(",")] if args.versions else list(VERSIONS)
    path = _results_path(args)
    table = versions_table(versions, config, repeats=args.repeats, record=path is not None, record_path=path)
    print(format_table(table))
    if args.plot:
        _save_plot(plot_versions(table), args.plot)
    return 0


# --- bench: parallel training (lstmnb.bench, lstmnb.parallel) --------------------------------------

def _byte_size(text: str) -> int:
    """'1024', '64K', '16M', '1G' (powers of 1024) -> bytes."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper().removesuffix("B")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        return int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1024, 64K, 16M or 1G") from None


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None


def _results_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default=None,
                   help="results file or folder for the records (default: results/runs.jsonl; env LSTMNB_RESULTS)")
    p.add_argument("--no-record", action="store_true", help="do not append records")


def _results_path(args):
    if args.no_record:
        return None
    from .paths import results_dir

    return args.results or str(results_dir())


def _save_plot(fig, path: str | None) -> None:
    """Save a figure atomically (matplotlib picks the format from the suffix: png, svg, pdf; none: png)."""
    if path:
        from pathlib import Path

        from .paths import atomic_path

        with atomic_path(path, suffix=Path(path).suffix or ".png") as tmp:
            fig.savefig(tmp, dpi=120)
        print(f"plot       {path}")


@bench_command
def _bench_scaling(kinds) -> None:
    p = kinds.add_parser(
        "scaling", help="strong/weak scaling of DDP over 1..N devices, with compute vs communication",
        description="One DDP run per world size (local processes: one per GPU, or gloo ranks on CPU). Prints "
                    "time per epoch, samples/s, speedup and efficiency with their definitions, the measured "
                    "compute/communication split per step, and validation loss per epoch and wall time. "
                    "--batch-size is the global batch in strong scaling and the per-device batch in weak.",
        epilog="examples:\n"
               "  lstmnb bench scaling --device cpu --world-sizes 1,2 --epochs 3\n"
               "  lstmnb bench scaling --device cuda --world-sizes 1,2,4 --mode both --batch-size 256",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_request_args(p)
    add_train_args(p, skip=("strategy", "nproc", "checkpoint", "resume"))
    g = p.add_argument_group("scaling")
    g.add_argument("--world-sizes", type=_int_list, default=(1, 2), help="world sizes to run (default 1,2)")
    g.add_argument("--mode", choices=("strong", "weak", "both"), default="strong", help="default strong")
    g.add_argument("--comm-steps", type=int, default=20,
                   help="steps timed with and without the all-reduce per world size (0: skip; default 20)")
    g.add_argument("--plot", default=None, metavar="FILE.png", help="save the convergence plot here")
    _results_arg(p)
    p.set_defaults(func=_run_bench_scaling)


def _run_bench_scaling(args) -> int:
    from . import bench
    from .report import SCALING_DEFINITIONS, convergence_table, format_table, plot_convergence, scaling_table
    from .train import prepare_windows

    cfg = train_config_from_args(args)
    modes = ("strong", "weak") if args.mode == "both" else (args.mode,)
    scs = [bench.ScalingConfig(world_sizes=args.world_sizes, mode=m, comm_split_steps=args.comm_steps) for m in modes]
    for sc in scs:  # every bad value before any data is read or any run starts
        sc.validate(cfg)
    windows, info = prepare_windows(request_from_args(args), cfg, progress=cfg.progress)
    records = []
    for sc in scs:
        records += bench.scaling(windows, cfg, sc, data_info=info, results=_results_path(args),
                                 on_point=lambda r: print(f"  world_size {r['world_size']}: "
                                                          f"{r['timing']['epoch_s_median']:.3f} s/epoch"))
    for m in modes:
        print(f"\n{SCALING_DEFINITIONS[m]}")
    print(SCALING_DEFINITIONS["comm"] + "\n")
    print(format_table(scaling_table(records)))
    print("\nconvergence (validation loss per epoch, cumulative wall seconds):")
    print(format_table(convergence_table(records).set_index(["experiment", "world_size", "epoch"])))
    if args.plot:
        _save_plot(plot_convergence(records), args.plot)
    return 0


@bench_command
def _bench_allreduce(kinds) -> None:
    p = kinds.add_parser(
        "allreduce", help="all-reduce time, algorithm and bus bandwidth per buffer size (nccl-tests convention)",
        description="Times torch.distributed.all_reduce on float32 buffers from --min-bytes to --max-bytes "
                    "(x --factor) plus the model's gradient size, over --world-size local ranks (NCCL on GPUs, "
                    "gloo on CPU). algbw = bytes / time; busbw = algbw x 2(n-1)/n, as nccl-tests define it. "
                    "GB/s means 1e9 bytes per second.",
    )
    p.add_argument("--world-size", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--device", default="auto", help="auto, cpu (gloo) or cuda (NCCL) (default auto)")
    p.add_argument("--min-bytes", type=_byte_size, default=1024, help="smallest buffer (default 1K)")
    p.add_argument("--max-bytes", type=_byte_size, default=64 * 2**20, help="largest buffer (default 64M)")
    p.add_argument("--factor", type=int, default=4, help="size step (default 4)")
    p.add_argument("--budget-s", type=float, default=0.2, help="timed seconds per size (default 0.2)")
    p.add_argument("--hidden", type=int, default=64, help="model hidden units, for the gradient size (default 64)")
    p.add_argument("--layers", type=int, default=1, help="model layers, for the gradient size (default 1)")
    p.add_argument("--cell", default="lstm", help="lstm or gru (default lstm)")
    p.add_argument("--step-s", type=float, default=None,
                   help="a measured training step in seconds: show the share of it one gradient all-reduce takes")
    _results_arg(p)
    p.set_defaults(func=_run_bench_allreduce)


def _run_bench_allreduce(args) -> int:
    from . import bench
    from .parallel import AllreduceConfig
    from .records import append_record
    from .report import allreduce_table, format_table
    from .train import TrainConfig

    cfg = TrainConfig(hidden=args.hidden, layers=args.layers, cell=args.cell, experiment="allreduce")
    cfg.validate()
    acfg = AllreduceConfig(world_size=args.world_size, device=args.device, min_bytes=args.min_bytes,
                           max_bytes=args.max_bytes, factor=args.factor, budget_s=args.budget_s)
    out = bench.allreduce(cfg, acfg)
    print(format_table(allreduce_table(out["rows"], out["gradient_bytes"], args.step_s)))
    print(f"\nmodel gradient per step: {out['gradient_bytes']:,} bytes (hidden {args.hidden}, layers {args.layers}, "
          f"{args.cell}); busbw = algbw x 2(n-1)/n with n = {args.world_size}")
    path = _results_path(args)
    if path:
        print(f"record appended to {append_record(bench.allreduce_record(out, acfg, cfg), path)}")
    return 0


@bench_command
def _bench_batch_sweep(kinds) -> None:
    p = kinds.add_parser(
        "batch-sweep", help="batch size x4 from 32 until out of memory: time per epoch and validation RMSE",
        description="Trains on one device at batch sizes --first-batch, x--factor, ... up to --max-batch (default: the "
                    "training set), recording each point (ok, or oom where memory ran out; the sweep stops "
                    "there). --memory-cap-mb limits memory per point (GPU: allocator fraction; CPU: the "
                    "process's data-segment limit), so the out-of-memory path can be seen on any machine.",
    )
    add_request_args(p)
    add_train_args(p, skip=("strategy", "nproc", "batch_size", "checkpoint", "resume"))
    g = p.add_argument_group("sweep")
    g.add_argument("--first-batch", type=int, default=32, help="first batch size (default 32)")
    g.add_argument("--factor", type=int, default=4, help="growth per point (default 4)")
    g.add_argument("--max-batch", type=int, default=None, help="largest batch size (default: the training set)")
    g.add_argument("--memory-cap-mb", type=float, default=None, help="memory allowed per point, in MB")
    _results_arg(p)
    p.set_defaults(func=_run_bench_batch_sweep)


def _run_bench_batch_sweep(args) -> int:
    from . import bench
    from .report import batch_sweep_table, format_table
    from .train import prepare_windows

    cfg = train_config_from_args(args)
    sweep = bench.SweepConfig(start=args.first_batch, factor=args.factor, max_batch=args.max_batch,
                              memory_cap_mb=args.memory_cap_mb)
    sweep.validate()
    windows, info = prepare_windows(request_from_args(args), cfg, progress=cfg.progress)
    records = bench.batch_sweep(windows, cfg, sweep, data_info=info, results=_results_path(args))
    print(format_table(batch_sweep_table(records)))
    return 0


@bench_command
def _bench_cost(kinds) -> None:
    p = kinds.add_parser(
        "cost", help="cost per run from a price table (per device-hour): table and optional plot",
        description="Cost of each recorded run: devices x wall hours x price per device-hour. The shipped "
                    "prices are examples; copy lstmnb/prices.yaml, set your own and pass --prices.",
    )
    _records_args(p)
    p.add_argument("--prices", default=None, help="your price table (YAML); default: the shipped examples")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the cost vs time plot here")
    p.set_defaults(func=_run_bench_cost)


def _run_bench_cost(args) -> int:
    from .errors import DataError
    from .report import cost_table, format_table, load_prices, plot_cost

    runs = _read_runs(args)
    table = cost_table(runs, load_prices(args.prices))
    if table.empty:
        raise DataError(f"none of the {len(runs)} run record(s) read is a finished run with timing")
    print(format_table(table))
    if (table["price source"] == "example").any():
        print("\nprices marked 'example' are illustrative defaults; pass --prices with your own rates")
    if args.plot:
        _save_plot(plot_cost(table), args.plot)
    return 0
