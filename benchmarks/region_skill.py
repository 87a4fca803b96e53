"""Per-cell test RMSE of the region forecaster (sparse, dense, no neighbours) against persistence and
climatology, on a box of the embedded sample (or any source), at one lead time.

    python benchmarks/region_skill.py                          # 37..41N, 279..281E, 1 h ahead
    python benchmarks/region_skill.py --box 19,41,279,281 --epochs 8 --steps 200 --variants sparse,none

Prints the table (mean over cells of the per-cell RMSE, pooled RMSE, share of cells better than
persistence, parameters, training seconds) and writes the skill map to --plot if given.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared machine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default="sample")
    p.add_argument("--box", default="37,41,279,281", help="lat_min,lat_max,lon_min,lon_max")
    p.add_argument("--start", default="2020-01-01")
    p.add_argument("--end", default="2021-06-30")
    p.add_argument("--lead-hours", type=int, default=1)
    p.add_argument("--window", type=int, default=24)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--neighbours", type=int, default=8)
    p.add_argument("--variants", default="sparse,none,dense")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps", type=int, default=150, help="steps per epoch")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="write the skill map (PNG) here")
    args = p.parse_args()

    import pandas as pd

    from lstmnb import era5
    from lstmnb.region.data import region_data_from_box
    from lstmnb.region.model import RegionConfig
    from lstmnb.region.train import RegionTrainConfig, compare, plot_skill_map
    from lstmnb.windows import WindowConfig

    box = tuple(float(v) for v in args.box.split(","))
    t0 = time.perf_counter()
    ds = era5.extract(era5.Request(source=args.source, points=None, box=box, start=args.start, end=args.end),
                      progress=False)
    data = region_data_from_box(ds, WindowConfig(window=args.window, lead_hours=args.lead_hours))
    print(f"{data.grid.shape[0]} x {data.grid.shape[1]} cells, samples {data.sizes()}, "
          f"data in {time.perf_counter() - t0:.1f} s", flush=True)
    shapes = {"sparse": dict(neighbours=args.neighbours), "dense": dict(neighbours=args.neighbours, relation="dense"),
              "none": dict(neighbours=0)}
    variants = {v: RegionConfig(n_static=2, hidden=args.hidden, **shapes[v]) for v in args.variants.split(",")}
    cfg = RegionTrainConfig(epochs=args.epochs, steps_per_epoch=args.steps, batch_size=args.batch_size, lr=args.lr,
                            seed=args.seed)
    def report(name: str, entry: dict) -> None:
        print(f"  {name} epoch {entry['epoch']}: train loss {entry['train_loss']:.4f}, validation RMSE "
              f"{entry['val_rmse_k']:.4f} K, {entry['seconds']:.0f} s", flush=True)

    table, maps, fits = compare(data, variants, cfg, on_epoch=report)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(4))
    if "none" in maps:
        for name in variants:
            if name != "none":
                share = float((maps[name] < maps["none"]).mean())
                print(f"{name}: lower RMSE than none in {share:.0%} of the cells")
    if args.plot:
        plot_skill_map(maps, reference="persistence").savefig(args.plot, dpi=120, bbox_inches="tight")
        print("skill map:", args.plot)


if __name__ == "__main__":
    main()
