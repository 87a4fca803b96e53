"""Peak memory and step time of the region forecaster against the area's size, dense vs sparse relation,
on this CPU (each case in a fresh process; see lstmnb/region/memory.py for the model and the method).

    python benchmarks/region_memory.py                       # sides 10, 20, ... within a 4 GiB budget
    python benchmarks/region_memory.py --budget-gb 8 --sides 10,20,40,60,80,100,120 --plot region_memory.png

Prints, per variant and side: predicted and measured peak MiB and seconds per training step (median
of --steps after one warm-up); the largest square area each variant fits in the budget (memory model,
with the measured runtime floor); the target area (default 60 x 168 = 10,080 cells) trained by the
sparse model for a few steps, with the dense model's prediction for the same area; and the sparse
kernels (gather vs CSR) on one area.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sides", default="10,20,30,40,50,60,70,80,90,100,120,140",
                   help="sides of the square areas, in cells")
    p.add_argument("--variants", default="sparse,dense")
    p.add_argument("--budget-gb", type=float, default=4.0, help="GiB one step may use; larger areas are not run")
    p.add_argument("--batch", type=int, default=4, help="time windows per step")
    p.add_argument("--window", type=int, default=24)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--neighbours", type=int, default=8)
    p.add_argument("--channels", type=int, default=3)
    p.add_argument("--steps", type=int, default=2, help="timed steps per case, after one warm-up step")
    p.add_argument("--target", default="60x168", help="rows x columns of the area the sparse model must train")
    p.add_argument("--kernel-side", type=int, default=60, help="side of the area where gather and CSR are timed")
    p.add_argument("--plot", default=None, help="write the memory/speed plot (PNG) here")
    args = p.parse_args()

    import pandas as pd

    from lstmnb.region.memory import MemoryCase, floor, largest_side, measure, plot_memory, predict_bytes, sweep

    MiB, budget = 2**20, args.budget_gb * 2**30
    base = MemoryCase(batch=args.batch, window=args.window, hidden=args.hidden, neighbours=args.neighbours,
                      channels=args.channels, steps=args.steps)
    low = floor(base)
    floor_bytes = low["measured_bytes"]
    print(f"runtime floor (3 x 3 area, sparse): {floor_bytes / MiB:.1f} MiB ({low['method']}); "
          f"budget {args.budget_gb:g} GiB; batch {args.batch} windows of {args.window} h, hidden {args.hidden}, "
          f"k = {args.neighbours}, {args.channels} channels", flush=True)
    sides = [int(s) for s in args.sides.split(",")]
    df = sweep(sides, args.variants.split(","), budget, base, floor_bytes=floor_bytes, echo=print)
    cols = ["variant", "ny", "nx", "cells", "predicted_total", "measured_bytes", "step_s", "status"]
    table = df.reindex(columns=cols).copy()
    for c in ("predicted_total", "measured_bytes"):
        table[c] = (table[c] / MiB).round(1)
    with pd.option_context("display.width", 200, "display.max_rows", 100):
        print(table.rename(columns={"predicted_total": "predicted_MiB", "measured_bytes": "measured_MiB"})
              .to_string(index=False))
    ok = df[df["status"] == "ok"]
    if len(ok):
        err = (ok["measured_bytes"] - ok["predicted_total"]) / ok["predicted_total"]
        print(f"measured vs predicted: {err.min():+.0%} .. {err.max():+.0%}")
    for variant in args.variants.split(","):
        s = largest_side(variant, budget, base, floor_bytes)
        print(f"largest square area within {args.budget_gb:g} GiB, {variant}: {s} x {s} = {s * s} cells")

    ny, nx = (int(v) for v in args.target.lower().split("x"))
    target = dataclasses.replace(base, ny=ny, nx=nx, variant="sparse")
    got = measure(target, floor_bytes)
    dense_pred = predict_bytes(dataclasses.replace(target, variant="dense"), floor_bytes)["total"]
    if got["status"] == "ok":
        print(f"target {ny} x {nx} ({ny * nx} cells), sparse: peak {got['measured_bytes'] / MiB:.0f} MiB measured "
              f"({got['predicted_total'] / MiB:.0f} predicted), {got['step_s']:.2f} s per step, loss {got['loss']:.3f}")
    else:
        print(f"target {ny} x {nx}, sparse: FAILED: {got['reason']}")
    print(f"target {ny} x {nx}, dense: {dense_pred / 2**30:.1f} GiB predicted "
          f"({'within' if dense_pred <= budget else 'over'} the {args.budget_gb:g} GiB budget; not run)")

    k = args.kernel_side
    for kernel in ("gather", "csr"):
        r = measure(dataclasses.replace(base, ny=k, nx=k, variant="sparse", kernel=kernel), floor_bytes)
        what = f"{r['step_s']:.3f} s per step, {r['measured_bytes'] / MiB:.0f} MiB" if r["status"] == "ok" else r["reason"]
        print(f"sparse kernel {kernel:>6} on {k} x {k}: {what}")
    if args.plot:
        plot_memory(df, budget).savefig(args.plot, dpi=120, bbox_inches="tight")
        print("plot:", args.plot)


if __name__ == "__main__":
    main()
