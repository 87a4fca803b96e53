"""DDP on CPU over gloo: 1 vs 2 ranks, strong and weak scaling, compute vs communication, all-reduce bandwidth.

Trains `lstmnb train`'s default setting (`--preset recommended`: window 24 h, one layer of 64, its 70/15/15 split,
so the convergence table has a validation loss; the batch sizes below) on the study's real ERA5 (its two points,
shipped with lstmnb; `--source sample` for the synthetic store) with one and with two gloo ranks (each rank gets
cores / ranks threads, so both runs use the whole machine), prints the scaling table with its definitions and
the measured compute/communication split per step, then times all_reduce between two local gloo ranks from 1 KB
to --max-bytes plus the model's gradient size, and what one gradient all-reduce costs relative to a measured step. Optionally (--uneven) it also runs the
mixed-device demonstration: one rank made slower, even shards vs throughput-sized shards.

    python benchmarks/scaling_cpu.py                    # about 3-5 minutes on 2 cores
    python benchmarks/scaling_cpu.py --epochs 2 --end 2020-06-30 --uneven
    python benchmarks/scaling_cpu.py --tiny             # CI: January 2020, 2 epochs, short comm/all-reduce parts
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

from _tiny import DONE  # benchmarks/_tiny.py, beside this script
from lstmnb import era5, report
from lstmnb import experiments as bench
from lstmnb.machine.device import cpu_cores
from lstmnb.training import TrainConfig, prepare_windows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=None, help="data source (default: study, the study's real ERA5 at its two "
                                                   "points; sample: the synthetic store)")
    ap.add_argument("--start", default="2020-01-01")
    ap.add_argument("--end", default="2021-06-30")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is the warm-up (default 3)")
    ap.add_argument("--global-batch", type=int, default=128, help="strong scaling global batch (default 128)")
    ap.add_argument("--per-device-batch", type=int, default=64, help="weak scaling batch per rank (default 64)")
    ap.add_argument("--comm-steps", type=int, default=30, help="steps timed with/without all-reduce (default 30)")
    ap.add_argument("--max-bytes", type=int, default=16 * 2**20, help="largest all-reduce buffer (default 16 MiB)")
    ap.add_argument("--uneven", action="store_true", help="also run the slow-rank even vs balanced shards demo")
    ap.add_argument("--tiny", action="store_true", help="January 2020, 2 epochs, 3 comm steps, all-reduce up to 64 KiB "
                                                        "(CI: the script runs and prints its tables)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.end, args.epochs, args.comm_steps, args.max_bytes = "2020-01-31", 2, 3, 64 * 2**10

    cores = cpu_cores()
    print(f"machine: {cores} CPU cores available; torch gloo backend on 127.0.0.1; "
          f"python {sys.version.split()[0]}, pid {os.getpid()}")
    if cores < 2:
        print("skipped: 2 gloo ranks need 2 cores; this machine has 1")
        return 0
    cfg = TrainConfig(device="cpu", epochs=args.epochs, progress=False, experiment="scaling")
    request = era5.Request(source=args.source, start=args.start, end=args.end)
    windows, info = prepare_windows(request, cfg, progress=False)
    print(f"data: source {request.source} ({info['kind']}), {args.start}..{args.end}, {len(windows.points)} points, "
          f"{windows.sizes()['train']:,} training windows; model hidden {cfg.hidden}, window {cfg.window} h\n")

    records = []
    for mode, batch in (("strong", args.global_batch), ("weak", args.per_device_batch)):
        t0 = time.perf_counter()
        recs = bench.scaling(windows, replace(cfg, batch_size=batch),
                             bench.ScalingConfig(world_sizes=(1, 2), mode=mode, comm_split_steps=args.comm_steps),
                             data_info=info)
        print(f"{mode} scaling: {len(recs)} runs in {time.perf_counter() - t0:.0f} s")
        records += recs
    print()
    for key in ("strong", "weak", "comm"):
        print(report.SCALING_DEFINITIONS[key])
    print()
    print(report.format_table(report.scaling_table(records)))
    print("\nconvergence (validation loss per epoch vs cumulative wall seconds):")
    conv = report.convergence_table(records).set_index(["experiment", "world_size", "epoch"])
    print(report.format_table(conv, floatfmt="{:,.4f}"))

    step_s = next((r["parallel"]["comm_split"]["step_s"] for r in records
                   if r["world_size"] == 2 and r["scaling"]["mode"] == "weak"), None)
    acfg = bench.AllreduceConfig(world_size=2, device="cpu", min_bytes=1024, max_bytes=args.max_bytes)
    out = bench.allreduce(cfg, acfg, windows.n_features)
    print(f"\nall-reduce, 2 gloo ranks on loopback (GB/s = 1e9 bytes/s; busbw = algbw x 2(n-1)/n = algbw at n=2); "
          f"model gradient {out['gradient_bytes']:,} bytes per step; 'share of a step' uses the weak-scaling "
          f"2-rank step of {step_s * 1e3:.2f} ms")
    print(report.format_table(report.allreduce_table([out], step_s), floatfmt="{:,.4f}"))

    if args.uneven:
        demo_cfg = replace(cfg, batch_size=64, epochs=max(3, args.epochs))
        slow_s = 2e-4
        demo = bench.uneven_demo(windows, demo_cfg, slow_rank=1, seconds_per_sample=slow_s)
        print(f"\nmixed devices: rank 1 made slower by {slow_s * 1e3:g} ms per training sample")
        for name, rec in demo.items():
            epochs = rec["epochs"]
            print(f"  {name:<8} epoch s {[round(e['train_s'], 2) for e in epochs]}  "
                  f"shards {[e.get('shard_sizes') for e in epochs]}  test RMSE {rec['metrics']['test_rmse_k']:.3f} K")
    print(DONE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
