"""`lstmnb scratch bench`: the from-scratch LSTM's versions table."""

from __future__ import annotations

import os

from ..errors import ConfigError, DeviceError
from ..paths import check_cache
from ..rules import CLI, known
from .checks import check_plot, positive
from .options import add_results_args, check_results_args, results_path, save_plot

# the from-scratch versions, as lstmnb.scratch.fit.VERSIONS names them (kept here so that parsing does
# not import numba; tests/test_scratch_versions.py checks the two agree)
SCRATCH_VERSIONS = ("loops", "numpy", "numba-cpu", "numba-cuda", "numba-cuda-block", "torch", "torch-cuda")

def add_scratch(sub, full: bool) -> None:
    p = sub.add_parser("scratch", help="the from-scratch LSTM: versions table (loops, numpy, numba, CUDA per sample and per block, torch)",
                       description="The LSTM written from its equations (NumPy, backprop through time) and its "
                                   "parallel versions; see `lstmnb scratch bench --help`.")
    ssub = p.add_subparsers(dest="scratch_command", metavar="ACTION", required=True)
    b = ssub.add_parser(
        "bench", help="train every version from the same weights and print the versions table",
        description="Train each version for N epochs from the same initial weights on the same batches "
                    "(versions alternated over repeats; medians quoted), print compile and run time, speedup "
                    "against loops and numpy, final train/test loss and test RMSE beside the baselines, and "
                    "append one record per version (experiment scratch_versions). GPU versions without a GPU "
                    "are recorded as skipped.")
    b.add_argument("--versions", default=None,
                   help="comma-separated versions, each run once (default all: " + ",".join(SCRATCH_VERSIONS) + ")")
    b.add_argument("--data", default="airline", help="airline (default) or era5 (the study's real ERA5 at 40N 280E)")
    b.add_argument("--window", type=int, default=None, help="input steps per sample (default 12 airline, 24 era5)")
    b.add_argument("--hours", type=int, default=None, help="era5: hours of the series (default 1008)")
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
    add_results_args(b)
    b.add_argument("--plot", default=None, metavar="FILE", help="also save the plot (png/svg/pdf)")
    b.set_defaults(func=_run_scratch_bench, check=_check_scratch_bench)


def _versions(args) -> list[str]:
    """The versions asked for, each a known one, each once in the order given (the default: all)."""
    if args.versions is None:
        return list(SCRATCH_VERSIONS)
    return known((v.strip() for v in args.versions.split(",")), SCRATCH_VERSIONS, f"--versions {args.versions!r}",
                 " (comma-separated; leave it out for all)")


def _config(args):
    from ..scratch.data import default_window
    from ..scratch.fit import ScratchConfig

    window = args.window if args.window is not None else default_window(args.data)
    hours = {"hours": args.hours} if args.hours is not None else {}  # not given: ScratchConfig's default
    return ScratchConfig(data=args.data, window=window, **hours, hidden=args.hidden, epochs=args.epochs,
                         batch_size=args.batch_size, optimizer=args.optimizer, lr=args.lr,
                         clip=args.clip or None, dtype=args.dtype, seed=args.seed, threads=args.threads)


def _check_scratch_bench(args) -> None:
    # idle OpenMP threads of numba and torch busy-wait and starve each other on few cores: set before either
    # loads (see benchmarks/scratch_versions.py); main runs this check before the run, in the same process
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.hours is not None and args.data != "era5":
        raise ConfigError(f"--hours {args.hours} is for --data era5 (hours of the ERA5 point series); --data "
                          f"{args.data} is a fixed series: leave --hours out")
    _config(args).validate(CLI)
    _only_unavailable(_versions(args), _config(args))
    positive("--repeats", args.repeats)
    check_plot(args.plot)
    check_results_args(args)
    if args.data == "era5":
        check_cache()


def _only_unavailable(versions: list[str], config) -> None:
    """Refuses versions that are all GPU ones unable to run here (the run would give only skipped rows, exit 0); a CPU
    version among them runs, the others skipped rows beside it."""
    if not all("cuda" in v for v in versions):
        return
    from ..scratch.bench import skip_reason

    reasons = {v: skip_reason(v, config) for v in versions}
    if all(reasons.values()):
        v, which = versions[0], "none of them can" if len(versions) > 1 else "it cannot"
        raise DeviceError(f"--versions {','.join(versions)}: {which} run here ({v}: {reasons[v]}); ask for a CPU "
                          "version (loops, numpy, numba-cpu, torch) or run on a machine with a CUDA GPU")


def _run_scratch_bench(args) -> int:
    from ..scratch.bench import format_versions, plot_versions, versions_table

    path = results_path(args)
    table = versions_table(_versions(args), _config(args), repeats=args.repeats, record=path is not None,
                           record_path=path, say=CLI)
    print(format_versions(table))
    save_plot(lambda: plot_versions(table), args.plot)
    return 0
