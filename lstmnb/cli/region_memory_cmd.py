"""`lstmnb region memory`: peak memory and step time of the dense and sparse region models against the area, beside the
memory model; the budget checked against this machine's memory, the areas against the synthetic grid, before any run."""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from ..rules import CLI
from .checks import check_plot, positive
from .options import (add_results_args, check_results_args, int_list, pick_variants, results_path, save_plot,
                      say_recorded, say_threads, str_list)


def add_memory(kinds) -> None:
    p = kinds.add_parser(
        "memory", help="peak memory and step time of dense vs sparse against the area, and the memory model",
        description="For square areas of each side, per variant, one training step (after a warm-up step) in a "
                    "fresh process: predicted and measured peak memory and seconds per step, up to the first area "
                    "the memory model puts over --budget-gb (recorded as skipped, not run). Then the largest "
                    "square area each variant fits in the budget, and --target trained by the sparse model. "
                    "Synthetic inputs: memory and speed do not depend on the values. Each process runs the "
                    "threads the CPU policy chooses now.",
        epilog="example:\n  lstmnb region memory --sides 10,20,40,60,80 --budget-gb 2 --plot memory.png")
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
                   help="an area the sparse model must train within the budget, e.g. 60x168 (10,080 cells); "
                        "default: none")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default cpu")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: one per core, fewer while other "
                   "processes keep the cores busy; the records' threads section says which and why)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the memory and step-time plot here")
    add_results_args(p)
    p.set_defaults(func=_run_memory, check=_check_memory)


def _memory_case(args):
    from ..region.memory import MemoryCase
    from ..region.memory_checks import check_floor

    case = MemoryCase(batch=args.batch, window=args.window, hidden=args.hidden, neighbours=args.neighbours,
                      steps=args.steps, device=args.device)
    case.validate(CLI)
    check_floor(case)  # its smallest area fits the machine, before anything is measured
    return case


def _target(args) -> tuple[int, int] | None:
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
    from ..machine.device import local_rank_limit, resolve_device
    from ..experiments.region import check_target
    from ..region.memory_checks import check_areas, check_budget

    case = _memory_case(args)
    variants = pick_variants(args.variants)
    if not args.sides or min(args.sides) < 2:
        raise ConfigError(f"--sides {','.join(map(str, args.sides))}: sides must be whole numbers >= 2")
    check_areas([(s, s) for s in args.sides], f"--sides {','.join(map(str, args.sides))}")
    positive("--budget-gb", args.budget_gb, whole=False)
    resolve_device(args.device, CLI)  # a missing GPU first: its memory is the budget's bound
    check_budget(args.budget_gb, args.device, CLI)
    positive("--threads", args.threads, none_ok=True, hi=local_rank_limit())
    target = _target(args)
    if target is not None:
        check_areas([target], f"--target {args.target}")
    # the sparse mix takes k of the other cells: the smallest area measured bounds k
    areas = [(s, s) for s in args.sides] + ([target] if target is not None else [])
    ny, nx = min(areas, key=lambda a: a[0] * a[1])
    if "sparse" in variants and not 0 <= case.neighbours <= ny * nx - 1:
        raise ConfigError(f"--neighbours {case.neighbours}: the smallest area measured ({ny} x {nx}) has {ny * nx} "
                          f"cells, so k must be 0..{ny * nx - 1}; give fewer neighbours or larger areas")
    if target is not None:
        check_target(target, args.budget_gb * 2**30, case, CLI)
    check_plot(args.plot)
    check_results_args(args)


def _run_memory(args) -> int:
    import pandas as pd

    from ..experiments.region import region_memory
    from ..region.memory import SEARCH_SIDE, largest_side, plot_memory, predict_bytes
    from ..report import format_table

    MiB, budget, base = 2**20, args.budget_gb * 2**30, _memory_case(args)
    df = region_memory(args.sides, pick_variants(args.variants), budget, base, target=_target(args), threads=args.threads,
                       results=results_path(args), echo=print)
    floor_bytes = df.attrs["floor_bytes"]
    shown = df.reindex(columns=["variant", "ny", "nx", "cells", "predicted_total", "measured_bytes", "step_s", "status"])
    for column, scale, fmt in (("predicted_total", MiB, "{:,.1f}"), ("measured_bytes", MiB, "{:,.1f}"),
                               ("step_s", 1, "{:.4f}")):
        shown[column] = (shown[column] / scale).map(lambda v, fmt=fmt: "" if pd.isna(v) else fmt.format(v))
    print(f"\nruntime floor {floor_bytes / MiB:.1f} MiB (a 3 x 3 area); budget {args.budget_gb:g} GiB; batch {args.batch} "
          f"windows of {args.window} h, hidden {args.hidden}, k = {args.neighbours}")
    print(format_table(shown.rename(columns={"predicted_total": "predicted MiB", "measured_bytes": "measured MiB"})))
    ok = df[df["status"].isin(["ok", "over budget"])]
    if len(ok):
        err = (ok["measured_bytes"] - ok["predicted_total"]) / ok["predicted_total"]
        print(f"measured against predicted: {err.min():+.0%} .. {err.max():+.0%}")
    for variant in pick_variants(args.variants):
        s = largest_side(variant, budget, base, floor_bytes)
        beyond = " or more (the search stops there)" if s >= SEARCH_SIDE else ""
        print(f"largest square area within {args.budget_gb:g} GiB, {variant}: {s} x {s} = {s * s:,} cells{beyond}")
    got = df.attrs.get("target")
    if got is not None:
        ny, nx = int(got["ny"]), int(got["nx"])
        dense = predict_bytes(dataclasses.replace(base, ny=ny, nx=nx, variant="dense"), floor_bytes)["total"]
        if got["status"] == "failed":
            what = f"FAILED: {got['reason']}"
        else:
            within = "within" if got["status"] == "ok" else "OVER"
            what = (f"peak {got['measured_bytes'] / MiB:,.0f} MiB measured ({got['predicted_total'] / MiB:,.0f} "
                    f"predicted), {within} the {args.budget_gb:g} GiB budget, {got['step_s']:.2f} s per step")
        print(f"target {ny} x {nx} ({ny * nx:,} cells), sparse: {what}; dense would need "
              f"{dense / 2**30:.1f} GiB (predicted, not run)")
    say_threads(df.attrs["threads"])
    save_plot(lambda: plot_memory(df, budget), args.plot)
    say_recorded(df.attrs["records"], args)
    return 0
